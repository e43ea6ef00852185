package env_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	. "avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// The token layout as the tests see it (deliberately not taken from the
// sealer): a 9-byte header whose bytes 5 to 8 are the sealed state's
// length, a 12-byte nonce, the sealed state, then the history.
func historyOf(tok []byte) (head, hist []byte) {
	n := 21 + int(binary.BigEndian.Uint32(tok[5:9]))
	return tok[:n], tok[n:]
}

// wantTampered fails unless err is INVALID_ARGUMENT / TOKEN_TAMPERED.
func wantTampered(t *testing.T, what string, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != InvalidArgument || e.Reason != ReasonTokenTampered {
		t.Fatalf("%s: %v, want INVALID_ARGUMENT / TOKEN_TAMPERED", what, err)
	}
}

// dialogueToken resets top-a and asks qs, returning every token.
func dialogueToken(t *testing.T, e *Env, qs ...string) [][]byte {
	t.Helper()
	tok := resetOne(t, e, "top-a", nil).Token
	toks := [][]byte{tok}
	for _, q := range qs {
		tok = mustStep(t, e, tok, askAction(q), false).Token
		toks = append(toks, tok)
	}
	return toks
}

// TestHistoryChunksSealedOnce: a step copies the history it was given and
// appends one chunk, so the texts of past turns are never sealed again
// (the step's cost does not grow with them).
func TestHistoryChunksSealedOnce(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	toks := dialogueToken(t, e, "What do you mean by top region?", "Which year?", "Anything else?")
	if _, h := historyOf(toks[0]); len(h) != 0 {
		t.Fatalf("the reset's token carries %d bytes of history", len(h))
	}
	for i := 1; i < len(toks); i++ {
		_, prev := historyOf(toks[i-1])
		_, cur := historyOf(toks[i])
		if len(cur) <= len(prev) || !bytes.Equal(cur[:len(prev)], prev) {
			t.Fatalf("turn %d: the history (%d bytes) does not extend the previous one (%d bytes)", i, len(cur), len(prev))
		}
		head, _ := historyOf(toks[i])
		if (len(toks[i])-21)%64 != 0 || len(head) >= len(toks[i]) {
			t.Errorf("turn %d: a token of %d bytes is not padded to its bucket as a whole", i, len(toks[i]))
		}
	}
}

// TestHistoryTampering: a changed history never yields a transcript or a
// finished episode. A cut, extended or swapped history is rejected at once
// (its length and last tag are in the authenticated state); a byte
// changed inside a chunk fails when the texts are read (a transcript, a
// solver) and at the step that ends the episode, however many steps that
// did not read the texts came between.
func TestHistoryTampering(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	ctx := context.Background()
	toks := dialogueToken(t, e, "What do you mean by top region?", "Which year?")
	good := toks[2]
	head, hist := historyOf(good)
	if len(hist) == 0 {
		t.Fatal("no history after two questions")
	}
	if _, err := e.Transcript(good); err != nil {
		t.Fatalf("the untouched token's transcript: %v", err)
	}
	for i := range hist {
		bad := bytes.Clone(good)
		bad[len(head)+i] ^= 0x01
		if _, err := e.Transcript(bad); err == nil {
			t.Fatalf("history byte %d flipped: the transcript was read", i)
		} else {
			wantTampered(t, "transcript, history byte flipped", err)
		}
		r, err := e.Step(ctx, &pb.StepRequest{Token: bad, Action: askAction("Anything else?")})
		if err != nil {
			wantTampered(t, "ask, history byte flipped", err)
			continue
		}
		// The step did not read the texts (the reference oracle reads
		// credits only); the episode it continues cannot end.
		_, err = e.Step(ctx, &pb.StepRequest{Token: r.Token, Action: stopAction()})
		wantTampered(t, "the ending step after a flipped history byte", err)
		if _, err := e.Transcript(r.Token); err == nil {
			t.Fatalf("history byte %d flipped: the next token's transcript was read", i)
		}
	}
	// Cut by its last chunk, or extended: rejected at once.
	_, first := historyOf(toks[1])
	cut := append(bytes.Clone(head), first...)
	_, err := e.Step(ctx, &pb.StepRequest{Token: cut, Action: askAction("Anything else?")})
	wantTampered(t, "the history cut by a chunk", err)
	_, err = e.Step(ctx, &pb.StepRequest{Token: append(bytes.Clone(good), 0), Action: askAction("Anything else?")})
	wantTampered(t, "the history extended by a byte", err)

	// Forks: the head of one and the history of the other.
	a := mustStep(t, e, toks[1], askAction("Which year?"), false).Token
	b := mustStep(t, e, toks[1], askAction("Which area?"), false).Token
	ha, _ := historyOf(a)
	_, hb := historyOf(b)
	_, err = e.Step(ctx, &pb.StepRequest{Token: append(bytes.Clone(ha), hb...), Action: askAction("Anything else?")})
	wantTampered(t, "a fork's head with the other fork's history", err)

	// Another episode of the same task and dialogue: its history does not
	// fit this head.
	other := dialogueToken(t, e, "What do you mean by top region?", "Which year?")[2]
	_, ho := historyOf(other)
	if len(ho) != len(hist) {
		t.Fatalf("the same dialogue's histories are %d and %d bytes", len(ho), len(hist))
	}
	_, err = e.Step(ctx, &pb.StepRequest{Token: append(bytes.Clone(head), ho...), Action: askAction("Anything else?")})
	wantTampered(t, "another episode's history", err)
	// And the untouched token still works.
	mustStep(t, e, good, stopAction(), false)
}
