package env

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
)

// Token layout constants as the tests see them (deliberately not taken from
// the sealer, so that a layout change is noticed).
const (
	testNonceSize = 12 // AES-GCM standard nonce
	testTagSize   = 16 // AES-GCM tag
	testHeader    = 9  // version + key id + head length
	testKeyIDEnd  = 5  // version + key id
)

func newTestSealer(t testing.TB) *Sealer {
	t.Helper()
	s, err := NewSealer(RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantBucket is the padded plaintext+tag size the token layout promises:
// the smallest multiple of bucketStep, at least minBucket, that holds a
// 4-byte length prefix, the plaintext and the tag.
func wantBucket(plainLen int) int {
	b := minBucket
	for b < 4+plainLen+testTagSize {
		b += bucketStep
	}
	return b
}

func wantTokenError(t *testing.T, err error, code Code, reason pb.ErrorReason) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *env.Error", err, err)
	}
	if e.Code != code || e.Reason != reason {
		t.Fatalf("error %q: code %d reason %s, want code %d reason %s", e, e.Code, e.Reason, code, reason)
	}
	if e.Field != "token" {
		t.Errorf("error %q: field %q, want token", e, e.Field)
	}
}

func TestSealOpenRoundTrip(t *testing.T) {
	s := newTestSealer(t)
	// Sizes around the bucket edges: 4+n+16 = 128 at n = 108, 192 at n = 172.
	for _, n := range []int{0, 1, 107, 108, 109, 171, 172, 173, 235, 236, 237, 251, 252, 253, 1000, 100000} {
		plain := make([]byte, n)
		for i := range plain {
			plain[i] = byte(i*7 + n)
		}
		tok := s.Seal(plain)
		bucket := len(tok) - testHeader - testNonceSize
		if bucket != wantBucket(n) {
			t.Errorf("size %d: sealed length %d = header+nonce+%d, want bucket %d", n, len(tok), bucket, wantBucket(n))
		}
		if bucket < minBucket || bucket%bucketStep != 0 {
			t.Errorf("size %d: bucket %d is not a multiple of %d ≥ %d", n, bucket, bucketStep, minBucket)
		}
		if tok[0] != tokenVersion {
			t.Errorf("size %d: version byte %d", n, tok[0])
		}
		got, err := s.Open(tok)
		if err != nil {
			t.Fatalf("size %d: Open: %v", n, err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("size %d: round trip returned %d bytes that differ from the plaintext", n, len(got))
		}
		if n > 0 {
			tok2 := s.Seal(plain)
			if bytes.Equal(tok, tok2) {
				t.Errorf("size %d: two seals of the same plaintext are identical (nonce reuse?)", n)
			}
			if bytes.Equal(tok[testHeader:testHeader+testNonceSize], tok2[testHeader:testHeader+testNonceSize]) {
				t.Errorf("size %d: two seals share a nonce", n)
			}
		}
	}
	// The empty plaintext too must get fresh nonces.
	if bytes.Equal(s.Seal(nil), s.Seal(nil)) {
		t.Error("two seals of the empty plaintext are identical")
	}
}

func TestEveryBitFlipIsRejected(t *testing.T) {
	s := newTestSealer(t)
	tok := s.Seal([]byte("a small episode state"))
	for i := range tok {
		for bit := range 8 {
			bad := bytes.Clone(tok)
			bad[i] ^= 1 << bit
			got, err := s.Open(bad)
			if err == nil {
				t.Fatalf("byte %d bit %d flipped: Open accepted it and returned %q", i, bit, got)
			}
			switch {
			case i == 0:
				wantTokenError(t, err, InvalidArgument, ReasonTokenMalformed)
			case i < testKeyIDEnd:
				wantTokenError(t, err, InvalidArgument, ReasonTokenForeign)
			case i < testHeader:
				// The head length: out of range, or the associated data
				// no longer matches.
				var e *Error
				if !errors.As(err, &e) || e.Reason != ReasonTokenMalformed && e.Reason != ReasonTokenTampered {
					t.Fatalf("byte %d bit %d flipped: %v, want TOKEN_MALFORMED or TOKEN_TAMPERED", i, bit, err)
				}
			default:
				wantTokenError(t, err, InvalidArgument, ReasonTokenTampered)
			}
		}
	}
	// The original still opens: flips were made on copies.
	if _, err := s.Open(tok); err != nil {
		t.Fatal(err)
	}
}

func TestTruncationsAreRejected(t *testing.T) {
	s := newTestSealer(t)
	tok := s.Seal([]byte("state"))
	minLen := testHeader + testNonceSize + testTagSize + 4
	for n := 0; n < len(tok); n++ {
		_, err := s.Open(tok[:n])
		if err == nil {
			t.Fatalf("a token truncated to %d of %d bytes was accepted", n, len(tok))
		}
		if n < minLen {
			wantTokenError(t, err, InvalidArgument, ReasonTokenMalformed)
		} else {
			wantTokenError(t, err, InvalidArgument, ReasonTokenTampered)
		}
	}
	// What follows the head is the history, which the sealer hands on
	// unread: its checks (checkHead, the chunks' tags) reject an extended
	// token (TestHistoryTampering).
	if _, hist, err := s.openToken(nil, append(bytes.Clone(tok), 0)); err != nil || !bytes.Equal(hist, []byte{0}) {
		t.Fatalf("a token with a trailing byte: history %q, %v", hist, err)
	}
}

func TestForeignKey(t *testing.T) {
	a, b := newTestSealer(t), newTestSealer(t)
	_, err := b.Open(a.Seal([]byte("x")))
	wantTokenError(t, err, InvalidArgument, ReasonTokenForeign)

	// Same key bytes, separate sealers: interchangeable (replicas).
	key := RandomKey()
	s1, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewSealer(bytes.Clone(key))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Open(s1.Seal([]byte("shared")))
	if err != nil || string(got) != "shared" {
		t.Fatalf("replica with the same key: %q, %v", got, err)
	}
}

func TestNewSealerKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 24, 31, 33, 64} {
		if _, err := NewSealer(make([]byte, n)); err == nil {
			t.Errorf("NewSealer accepted a %d-byte key", n)
		}
	}
	if _, err := NewSealer(make([]byte, 32)); err != nil {
		t.Errorf("NewSealer rejected a 32-byte key: %v", err)
	}
	if k1, k2 := RandomKey(), RandomKey(); len(k1) != KeySize || bytes.Equal(k1, k2) {
		t.Errorf("RandomKey: %d bytes, repeated %v", len(k1), bytes.Equal(k1, k2))
	}
}

func TestReadKeyFile(t *testing.T) {
	key := RandomKey()
	dir := t.TempDir()
	write := func(name string, body []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := map[string][]byte{
		"hex":            []byte(hex.EncodeToString(key)),
		"hex-newline":    []byte(hex.EncodeToString(key) + "\n"),
		"hex-upper-crlf": []byte(strings.ToUpper(hex.EncodeToString(key)) + "\r\n"),
		"base64":         []byte(base64.StdEncoding.EncodeToString(key)),
		"base64-newline": []byte(base64.StdEncoding.EncodeToString(key) + "\n"),
		"raw":            key,
	}
	for name, body := range good {
		got, err := ReadKeyFile(write(name, body))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, key) {
			t.Errorf("%s: read a different key", name)
		}
	}
	bad := map[string][]byte{
		"empty":        nil,
		"hex-63":       []byte(hex.EncodeToString(key)[:63] + "\n"),
		"hex-66":       []byte(hex.EncodeToString(append(bytes.Clone(key), 1)) + "\n"),
		"hex-not":      []byte(strings.Repeat("zz", 32) + "\n"),
		"base64-16":    []byte(base64.StdEncoding.EncodeToString(key[:16]) + "\n"),
		"base64-33":    []byte(base64.StdEncoding.EncodeToString(append(bytes.Clone(key), 1)) + "\n"),
		"raw-31":       key[:31],
		"raw-33":       append(bytes.Clone(key), 7),
		"words-of-key": []byte("this is not a key at all, sorry\n\n"),
	}
	for name, body := range bad {
		p := write(name, body)
		got, err := ReadKeyFile(p)
		if err == nil {
			t.Errorf("%s: accepted, returned %d bytes", name, len(got))
			continue
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
	missing := filepath.Join(dir, "no-such-file")
	if _, err := ReadKeyFile(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
}

// TestTokenLengthHidesCredits checks the leak property of fixed decision 1:
// states that differ only in how many credits their questions earned seal
// to tokens of the same length.
func TestTokenLengthHidesCredits(t *testing.T) {
	s := newTestSealer(t)
	e := &Env{cfg: Config{Sealer: s}, maxState: 1 << 20, maxHistory: historyBound}
	token := func(mask uint64) []byte {
		st := &statepb.EpisodeState{
			Version: stateVersion, Corpus: "tiny", RecordId: "big", RecordHashHi: 1, RecordHashLo: 2,
			Seed: 42, Budget: 4, Phase: pb.Phase_PHASE_ASKING, Status: pb.EpisodeStatus_EPISODE_STATUS_RUNNING,
			Attempted: 3, IssuedUnix: 1_700_000_000,
		}
		h := &history{}
		for i := range 3 {
			h.add(st, "what do you mean by q"+string(rune('a'+i))+"?", "the reply", mask)
		}
		tok, err := e.seal(st, h)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	masks := []uint64{0, 1, 0b111, 1 << 63, ^uint64(0)}
	tokLen := len(token(masks[0]))
	for _, m := range masks[1:] {
		if got := len(token(m)); got != tokLen {
			t.Errorf("mask %#x: token is %d bytes, mask 0 gives %d", m, got, tokLen)
		}
	}
}

// fuzzKey is fixed so that every fuzz worker builds the same sealer.
var fuzzKey = []byte("avtgym fuzz key: 32 bytes long!!")

// fuzzPlainPrefix marks the plaintexts the fuzz test itself seals; Open may
// only ever return a plaintext that starts with it.
const fuzzPlainPrefix = "fuzz-seed:"

func FuzzOpen(f *testing.F) {
	s, err := NewSealer(fuzzKey)
	if err != nil {
		f.Fatal(err)
	}
	other, err := NewSealer(RandomKey())
	if err != nil {
		f.Fatal(err)
	}
	seeds := [][]byte{
		nil, {}, {1}, {0}, {tokenVersion, 0, 0, 0, 0},
		bytes.Repeat([]byte{0}, 64), bytes.Repeat([]byte{0xff}, 300),
		other.Seal([]byte(fuzzPlainPrefix + "foreign")),
	}
	for _, n := range []int{0, 10, 300} {
		seeds = append(seeds, s.Seal([]byte(fuzzPlainPrefix+strings.Repeat("x", n))))
	}
	valid := s.Seal([]byte(fuzzPlainPrefix + "y"))
	seeds = append(seeds, valid[:len(valid)-1], valid[:40], append(bytes.Clone(valid), 0))
	for _, b := range seeds {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plain, err := s.Open(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != InvalidArgument {
				t.Fatalf("Open error %v is not an InvalidArgument *env.Error", err)
			}
			switch e.Reason {
			case ReasonTokenMalformed, ReasonTokenForeign, ReasonTokenTampered:
			default:
				t.Fatalf("Open error reason %q", e.Reason)
			}
			return
		}
		if !strings.HasPrefix(string(plain), fuzzPlainPrefix) {
			t.Fatalf("Open accepted %d bytes that the sealer never sealed: plaintext %q", len(data), plain)
		}
	})
}

func TestSealFuncMatchesSeal(t *testing.T) {
	s := newTestSealer(t)
	for _, n := range []int{0, 1, 108, 109, 5000} {
		plain := bytes.Repeat([]byte{0xa5}, n)
		tok := s.SealFunc(n, func(buf []byte) {
			if len(buf) != n {
				t.Fatalf("SealFunc(%d) gave a %d-byte buffer", n, len(buf))
			}
			copy(buf, plain)
		})
		if len(tok) != len(s.Seal(plain)) {
			t.Errorf("size %d: SealFunc token %d bytes, Seal token %d", n, len(tok), len(s.Seal(plain)))
		}
		got, err := s.Open(tok)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("size %d: SealFunc round trip: %v", n, err)
		}
	}
}

func TestOpenRejectsBadLengthPrefix(t *testing.T) {
	s := newTestSealer(t)
	for _, prefix := range []uint32{1 << 31, ^uint32(0), 1000} {
		tok, _, _ := s.prepare(3, 0)
		body := tok[testHeader+testNonceSize:]
		body[0], body[1], body[2], body[3] = byte(prefix>>24), byte(prefix>>16), byte(prefix>>8), byte(prefix)
		tok = s.seal(tok)
		_, err := s.Open(tok)
		wantTokenError(t, err, InvalidArgument, ReasonTokenMalformed)
	}
}
