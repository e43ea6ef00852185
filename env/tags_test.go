package env_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// TestTagsAreSealedAndCarried: a reset's tags travel in every episode's
// token, unchanged by steps, and come back in the transcript (the record);
// the policy's observation holds none of them.
func TestTagsAreSealedAndCarried(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	tags := map[string]string{"run": "grpo-7", "trainer/step": "12", "group": "g-3", "model:rev": "ünï"}
	resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: "top-a", Seed: u64(5), GroupSize: 3, Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for i, ep := range resp.Episodes {
		if len(ep.EpisodeUid) != 32 || strings.Trim(ep.EpisodeUid, "0123456789abcdef") != "" {
			t.Fatalf("episode %d: uid %q is not 32 hex digits", i, ep.EpisodeUid)
		}
		uids[ep.EpisodeUid] = true
		for _, turn := range ep.Observation.GetTurns() {
			for _, v := range tags {
				if strings.Contains(turn.GetText(), v) {
					t.Fatalf("episode %d: the observation shows tag value %q", i, v)
				}
			}
		}
		step := mustStep(t, e, ep.Token, askAction("which region?"), false)
		tr, err := e.Transcript(step.Token)
		if err != nil {
			t.Fatal(err)
		}
		if tr.UID != ep.EpisodeUid {
			t.Errorf("episode %d: the step's transcript has uid %q, the reset %q", i, tr.UID, ep.EpisodeUid)
		}
		if len(tr.Tags) != len(tags) {
			t.Fatalf("episode %d: transcript tags %v, want %v", i, tr.Tags, tags)
		}
		for k, v := range tags {
			if tr.Tags[k] != v {
				t.Errorf("episode %d: tag %q = %q, want %q", i, k, tr.Tags[k], v)
			}
		}
	}
	if len(uids) != 3 {
		t.Fatalf("a group of 3 got %d distinct uids", len(uids))
	}
	// The same seed reset again is another episode: another uid.
	again := resetOne(t, e, "top-a", nil)
	first := resetOne(t, e, "top-a", nil)
	if again.EpisodeId != first.EpisodeId || again.EpisodeUid == first.EpisodeUid {
		t.Fatalf("two resets of one seed: ids %q/%q, uids %q/%q; want equal ids and distinct uids", again.EpisodeId, first.EpisodeId, again.EpisodeUid, first.EpisodeUid)
	}
	if tr, err := e.Transcript(first.Token); err != nil || tr.Tags != nil {
		t.Fatalf("an untagged reset: %v", err)
	}
}

// TestTagLimits: tags outside the documented bounds are rejected before
// any episode is built, naming the field.
func TestTagLimits(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	many := map[string]string{}
	for i := range env.MaxTags + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	full := map[string]string{}
	for i := range env.MaxTags {
		full[strings.Repeat("k", env.MaxTagKeyBytes-2)+string(rune('a'+i))+"x"] = strings.Repeat("é", env.MaxTagValueBytes/2)
	}
	for name, tc := range map[string]struct {
		tags map[string]string
		ok   bool
	}{
		"at every limit":   {full, true},
		"too many":         {many, false},
		"empty key":        {map[string]string{"": "v"}, false},
		"long key":         {map[string]string{strings.Repeat("k", env.MaxTagKeyBytes+1): "v"}, false},
		"key with a space": {map[string]string{"run id": "v"}, false},
		"key with unicode": {map[string]string{"ключ": "v"}, false},
		"long value":       {map[string]string{"k": strings.Repeat("v", env.MaxTagValueBytes+1)}, false},
		"invalid utf-8":    {map[string]string{"k": "\xff\xfe"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: "top-a", GroupSize: 2, Tags: tc.tags})
			if tc.ok {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				tr, err := e.Transcript(resp.Episodes[1].Token)
				if err != nil {
					t.Fatal(err)
				}
				if len(tr.Tags) != len(tc.tags) {
					t.Fatalf("transcript tags %d, want %d", len(tr.Tags), len(tc.tags))
				}
				return
			}
			wantEnvError(t, err, env.InvalidArgument, env.ReasonInvalidOption)
			var ee *env.Error
			if errors.As(err, &ee); ee.Field != "tags" {
				t.Fatalf("error on field %q, want tags: %v", ee.Field, err)
			}
		})
	}
}
