package env

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"

	"avtgym/env/internal/statepb"
)

// Tags and episode uids: what a trainer labels its episodes with
// (ResetRequest.tags) and the random id that tells one started episode from
// every other (Episode.episode_uid). Both are sealed at reset and carried
// unchanged by every step; the environment never reads them, and the policy
// never sees them. They are there for the records (the server's episode
// log, rollout and eval), so that a run can be filtered by trainer step or
// group and a retried step told apart from a second episode that happens to
// play out alike.

// Tag limits (docs/limits.md). Every byte of a tag travels in the token
// twice per step, and the state bound (StateBound) counts them at their
// largest.
const (
	// MaxTags bounds the tags of one reset.
	MaxTags = 16
	// MaxTagKeyBytes bounds a tag's key.
	MaxTagKeyBytes = 64
	// MaxTagValueBytes bounds a tag's value.
	MaxTagValueBytes = 256
)

// tagKeyByte reports whether b may appear in a tag key: ASCII letters,
// digits and "._-:/" (keys become column names and URL query parameters).
func tagKeyByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("._-:/", b) >= 0
}

// checkTags validates a reset's tags and returns them sorted by key. It
// checks the count before looking at any tag.
func checkTags(tags map[string]string) ([]*statepb.Tag, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > MaxTags {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "tags", "%d tags, more than %d", len(tags), MaxTags)
	}
	out := make([]*statepb.Tag, 0, len(tags))
	for k, v := range tags {
		if k == "" || len(k) > MaxTagKeyBytes {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "tags", "tag key %q is %d bytes, want 1 to %d", clip(k, MaxTagKeyBytes), len(k), MaxTagKeyBytes)
		}
		for i := range len(k) {
			if !tagKeyByte(k[i]) {
				return nil, errorf(InvalidArgument, ReasonInvalidOption, "tags", "tag key %q holds %q: a key is ASCII letters, digits and \"._-:/\"", k, k[i])
			}
		}
		if len(v) > MaxTagValueBytes {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "tags", "tag %q: the value is %d bytes, more than %d", k, len(v), MaxTagValueBytes)
		}
		if !utf8.ValidString(v) {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "tags", "tag %q: the value is not valid UTF-8", k)
		}
		out = append(out, &statepb.Tag{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b *statepb.Tag) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// clip cuts s to n bytes for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// newUID draws an episode uid.
func newUID() (hi, lo uint64) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// uidString is a uid's Episode.episode_uid spelling: 32 lower-case hex
// digits.
func uidString(hi, lo uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return hex.EncodeToString(b[:])
}

// tagMap is a state's tags as a map (nil when there are none).
func tagMap(tags []*statepb.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[t.Key] = t.Value
	}
	return m
}

// tagsBound bounds the encoded tags of a state: MaxTags tags at their
// largest.
func tagsBound() int {
	return MaxTags * bytesField(50, bytesField(1, MaxTagKeyBytes)+bytesField(2, MaxTagValueBytes))
}
