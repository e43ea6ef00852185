package conformance

// Tokens, fork and retry (ARCHITECTURE.md, fixed decision 1; README
// "Episodes", "Stateless"): the token is the episode. A tampered, truncated
// or foreign token is INVALID_ARGUMENT with a documented reason; the same
// token and action give the same result, however long after; an old token
// forks the episode.

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// tokenReasons are the reasons a token that is not one of the server's
// may be rejected with (INVALID_ARGUMENT).
var tokenReasons = []string{"TOKEN_TAMPERED", "TOKEN_MALFORMED", "TOKEN_FOREIGN"}

// probe is the action tokens are stepped with: valid in every protocol at
// reset, and it keeps the episode going.
var probe = driver.UnparsedAction("conformance: token probe")

func checkTokens(t *testing.T, tg *Target, p *protocol, tk *task, st *stats) {
	pl := newPlay(t, tg, p, tk, st)
	pl.start(nil)
	good := pl.cur.tok
	want, err := tg.Env.Step(t.Context(), &pb.StepRequest{Token: good, Action: probe, IncludePrivileged: true})
	if err != nil {
		t.Fatalf("the reset's token: %v", err)
	}
	reject := func(name string, tok []byte, reasons ...string) {
		t.Helper()
		r, err := tg.Env.Step(t.Context(), &pb.StepRequest{Token: tok, Action: probe})
		st.steps.Add(1)
		st.errors.Add(1)
		if err == nil {
			if r.GetDone() {
				t.Errorf("%s: a token of %d bytes was accepted and ended the episode", name, len(tok))
				return
			}
			// A byte inside the token's history (a pre-filled dialogue)
			// is authenticated when the history is read, and always by
			// the step that ends the episode (env/history.go): the
			// episode it continues is never scored.
			err = pl.playToEnd(r.GetToken())
			if err == nil {
				t.Errorf("%s: a token of %d bytes was accepted, and its episode ended", name, len(tok))
				return
			}
			reasons = []string{"TOKEN_TAMPERED"}
		}
		code, reason := tg.ErrorOf(err)
		if code != codes.InvalidArgument || !slices.Contains(reasons, reason) {
			t.Errorf("%s: %s / %q (%v); want INVALID_ARGUMENT / one of %v", name, code, reason, err, reasons)
		}
		pl.show("the error of a "+name+" token", []string{err.Error()}, nil)
	}
	changed := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }

	// Every single-byte change is rejected, whatever the byte: the header,
	// the nonce, the sealed state or the tag at once, a byte inside the
	// history at the latest by the step that would end the episode.
	for i := range good {
		for _, bit := range []byte{0x01, 0x80} {
			tok := changed(func(b []byte) []byte { b[i] ^= bit; return b })
			reject("flipped byte "+strconv.Itoa(i)+" (^"+strconv.Itoa(int(bit))+")", tok, tokenReasons...)
		}
	}
	// Altered or truncated content fails authentication: TOKEN_TAMPERED.
	reject("middle byte flipped", changed(func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }), "TOKEN_TAMPERED")
	reject("last byte flipped", changed(func(b []byte) []byte { b[len(b)-1] ^= 0x01; return b }), "TOKEN_TAMPERED")
	reject("truncated by 1", good[:len(good)-1], "TOKEN_TAMPERED")
	reject("truncated by 16", good[:len(good)-16], "TOKEN_TAMPERED")
	reject("truncated to half", good[:len(good)/2], "TOKEN_TAMPERED")
	reject("extended by 1", append(bytes.Clone(good), 0), "TOKEN_TAMPERED")
	// Missing, too short to be a token, or longer than any the server
	// issues: TOKEN_MALFORMED.
	reject("empty", nil, "TOKEN_MALFORMED")
	reject("too short", good[:8], "TOKEN_MALFORMED")
	long := append(bytes.Clone(good), make([]byte, tg.Limits.MaxTokenBytes()+1-len(good))...)
	reject("too long", long, "TOKEN_MALFORMED")
	reject("random bytes", bytes.Repeat([]byte{0xa5}, len(good)), tokenReasons...)
	// Sealed under another key: TOKEN_FOREIGN.
	seed := seedOf
	resp, err := tg.Foreign.Reset(t.Context(), &pb.ResetRequest{TaskId: tk.id, Seed: &seed, Options: cloneOptions(nil, p.proto)})
	if err != nil {
		t.Fatalf("reset on the foreign environment: %v", err)
	}
	reject("foreign", resp.GetEpisodes()[0].GetToken(), "TOKEN_FOREIGN")

	// The original still plays, as it did.
	again, err := tg.Env.Step(t.Context(), &pb.StepRequest{Token: good, Action: probe, IncludePrivileged: true})
	if err != nil {
		t.Fatalf("the reset's token after the rejections: %v", err)
	}
	if !sameResult(want, again) {
		t.Errorf("the reset's token gives another result after the rejections:\n%v\n%v", want, again)
	}
	pl.finish()
}

// checkForkAndRetry plays the task's first steps script, then retries
// every step of it from its old token (after the episode went on: the
// server remembers nothing), continues two retries' tokens alike, and forks
// the episode from its reset.
func checkForkAndRetry(t *testing.T, tg *Target, p *protocol, tk *task, st *stats) {
	var sc script
	for _, s := range p.scripts(tk) {
		if s.check == checkSteps {
			sc = s
			break
		}
	}
	pl := newPlay(t, tg, p, tk, st)
	pl.start(sc.opts)
	for i, m := range sc.moves {
		if m.from != "" || m.want.code != codes.OK {
			break // the script's main line only
		}
		pl.step("move "+strconv.Itoa(i+1), m)
	}
	if len(pl.history) == 0 {
		t.Fatalf("(suite) script %s played no step", sc.name)
	}
	step := func(tok []byte, a *pb.Action) *pb.StepResponse {
		t.Helper()
		r, err := tg.Env.Step(t.Context(), &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: true})
		st.steps.Add(1)
		if err != nil {
			t.Fatalf("%s: %v", describe(a), err)
		}
		pl.checkToken("retry", r.GetToken())
		return r
	}
	// Retry: every old token, stepped again with its action, gives the
	// same result under fresh token bytes.
	retried := make([]*pb.StepResponse, len(pl.history))
	for i, rec := range pl.history {
		r := step(rec.before, rec.act)
		retried[i] = r
		if !sameResult(r, rec.resp) {
			t.Errorf("step %d (%s) retried from its old token gives another result:\n%v\nfirst:\n%v", i+1, describe(rec.act), r, rec.resp)
		}
		if bytes.Equal(r.GetToken(), rec.resp.GetToken()) {
			t.Errorf("step %d retried: the same token bytes; the nonces must be fresh", i+1)
		}
	}
	// The first step's two tokens (the first answer's and the retry's)
	// continue alike.
	if len(pl.history) > 1 {
		next := pl.history[1].act
		a, b := step(pl.history[0].resp.GetToken(), next), step(retried[0].GetToken(), next)
		if !sameResult(a, b) || !sameResult(a, pl.history[1].resp) {
			t.Errorf("the tokens of a step and of its retry continue differently:\n%v\n%v", a, b)
		}
	}
	// Fork: the reset's token with another first action takes another
	// path; the old path is unchanged (its last step, retried once more,
	// still gives what it gave).
	first := pl.history[0]
	fork := step(first.before, probe)
	if sameResult(fork, first.resp) {
		t.Errorf("a fork with another action (%s) gave the result of %s", describe(probe), describe(first.act))
	}
	if fork.GetDone() || fork.GetObservation().GetPhase() != pb.Phase_PHASE_ASKING {
		t.Errorf("the fork (an unparsed output at reset) ended the episode or left asking: %v", fork)
	}
	last := pl.history[len(pl.history)-1]
	if r := step(last.before, last.act); !sameResult(r, last.resp) {
		t.Errorf("after the fork, the last step of the old path gives another result:\n%v\n%v", r, last.resp)
	}
	pl.finish()
}

// playToEnd steps tok with the probe action until a step fails (its error)
// or the episode ends (nil); the probe ends every protocol's episode
// within maxProbeSteps (two unparsed outputs end an AMBITAB dialogue and
// a TIDE episode; the others run out of turns or coins).
func (pl *play) playToEnd(tok []byte) error {
	for range maxProbeSteps {
		r, err := pl.tg.Env.Step(pl.t.Context(), &pb.StepRequest{Token: tok, Action: probe})
		pl.st.steps.Add(1)
		if err != nil {
			return err
		}
		if r.GetDone() {
			return nil
		}
		tok = r.GetToken()
	}
	pl.t.Errorf("the probe action did not end the episode in %d steps", maxProbeSteps)
	return nil
}

// maxProbeSteps bounds playToEnd.
const maxProbeSteps = 256
