package eval_test

import (
	"context"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/testutil"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// TestLeakyOraclesMoveTheDiagnostics is issue 5's fixture check: on the demo
// corpus with the lookup solver, the two deliberately leaky test oracles
// make ΔJ_resp (responder leak) and ΔRec_none (matcher leak) positive with
// intervals that exclude 0, while the deterministic oracle's come out 0.
// The expected values are recomputed here independently of Analyze, from
// the played episodes, by the fixtures' rules:
//   - leaky responder: every reply carries the reference SQL, so an asker
//     episode succeeds whenever at least one question was answered; its
//     hybrid is the deterministic oracle, so ΔJ_resp per seed is the mean
//     over asker episodes of [success under the leak] − [success under the
//     deterministic oracle];
//   - credit-all: none_adv gets recall 1 on every record where recall is
//     defined, against 0 under the deterministic oracle: ΔRec_none = 1.
func TestLeakyOraclesMoveTheDiagnostics(t *testing.T) {
	s := testutil.StartServer(t, app.Config{TestOracles: true})
	dir := t.TempDir()
	seeds := []uint64{0, 1, 2}
	_, err := eval.Run(context.Background(), s.Client.Env, eval.Config{
		Asker:      policy.Scripted(probe.NoneAdv), // a generic asker: asks, learns nothing
		Oracles:    []pb.OracleType{pb.OracleType_ORACLE_TYPE_DETERMINISTIC, pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER, pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL},
		Seeds:      seeds,
		Conditions: []eval.Condition{eval.None, eval.Asker, eval.Full, eval.FullAdv, eval.NoneAdv},
		Dir:        dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := eval.ReadEpisodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	opt := eval.AnalyzeOptions{Resamples: 2000, BootstrapSeed: 7}
	om, err := eval.ReadOracleMap(dir)
	if err != nil || om == nil {
		t.Fatalf("the run directory's oracle map: %v, %v", om, err)
	}
	om.Apply(&opt)
	rep, err := eval.Analyze(eps, opt)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]eval.Row{}
	for _, r := range rep.Rows {
		rows[r.Oracle] = r
	}

	// Independent expectations.
	type key struct {
		task string
		seed uint64
	}
	byOracle := map[string]map[eval.Condition]map[key]eval.Episode{}
	for _, e := range eps {
		if byOracle[e.Oracle] == nil {
			byOracle[e.Oracle] = map[eval.Condition]map[key]eval.Episode{}
		}
		if byOracle[e.Oracle][e.Condition] == nil {
			byOracle[e.Oracle][e.Condition] = map[key]eval.Episode{}
		}
		byOracle[e.Oracle][e.Condition][key{e.TaskID, e.Seed}] = e
	}
	det := byOracle["deterministic"]
	var wantResp float64
	for _, sd := range seeds {
		var sum float64
		n := 0
		for k, d := range det[eval.Asker] {
			if k.seed != sd {
				continue
			}
			leak := byOracle["test_leaky_responder"][eval.Asker][k]
			// The rule: success under the leak is 1 iff a question was answered.
			wantLeak := *d.Success
			if len(d.Replies) > 0 {
				wantLeak = 1
			}
			if *leak.Success != wantLeak {
				t.Fatalf("%v: leaky-responder success %v, the rule says %v", k, *leak.Success, wantLeak)
			}
			sum += wantLeak - *d.Success
			n++
		}
		wantResp += sum / float64(n)
	}
	wantResp /= float64(len(seeds))
	if wantResp <= 0 {
		t.Fatalf("the fixture does not leak on the demo corpus: expected ΔJ_resp %v", wantResp)
	}

	leaky := rows["test_leaky_responder"].DJResp
	if leaky.Mean == nil || !approxEqual(*leaky.Mean, wantResp) || leaky.Lo == nil || *leaky.Lo <= 0 {
		t.Fatalf("ΔJ_resp of the leaky responder = %v [%v, %v], want %v with an interval above 0", ptr(leaky.Mean), ptr(leaky.Lo), ptr(leaky.Hi), wantResp)
	}
	credit := rows["test_credit_all"].DRecNone
	if credit.Mean == nil || *credit.Mean != 1 || credit.Lo == nil || *credit.Lo != 1 {
		t.Fatalf("ΔRec_none of credit-all = %v [%v, %v], want exactly 1", ptr(credit.Mean), ptr(credit.Lo), ptr(credit.Hi))
	}
	d := rows["deterministic"]
	for name, s := range map[string]eval.Summary{"ΔJ_resp": d.DJResp, "ΔJ_full": d.DJFull, "ΔRec_none": d.DRecNone} {
		if s.Mean == nil || *s.Mean != 0 || *s.Lo != 0 || *s.Hi != 0 {
			t.Errorf("deterministic %s = %v [%v, %v], want exactly 0", name, ptr(s.Mean), ptr(s.Lo), ptr(s.Hi))
		}
	}
	if r := rows["test_leaky_responder"].DRecNone; r.Mean == nil || *r.Mean != 0 {
		t.Errorf("the responder leak moved ΔRec_none: %v", ptr(r.Mean))
	}
	t.Logf("ΔJ_resp(leaky responder) = %.4f [%.4f, %.4f]; ΔRec_none(credit-all) = %v", *leaky.Mean, *leaky.Lo, *leaky.Hi, *credit.Mean)
}

func approxEqual(a, b float64) bool {
	d := a - b
	return d < 1e-12 && d > -1e-12
}

func ptr(x *float64) any {
	if x == nil {
		return "nil"
	}
	return *x
}

// TestDefaultAskerRevealsBothLeaks is issue 12's finding 6: without an
// asker, eval plays policy.Partial, under which the responder leak shows
// in ΔJ_resp and the matcher leak in ΔRec_none, each with an interval
// above 0. Under the full policy (the old default) the responder leak is
// invisible: every term is asked, so the hybrid succeeds as often as the
// leak does.
func TestDefaultAskerRevealsBothLeaks(t *testing.T) {
	s := testutil.StartServer(t, app.Config{TestOracles: true})
	oracles := []pb.OracleType{pb.OracleType_ORACLE_TYPE_DETERMINISTIC, pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER, pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL}
	analyze := func(asker policy.Player) map[string]eval.Row {
		t.Helper()
		dir := t.TempDir()
		_, err := eval.Run(context.Background(), s.Client.Env, eval.Config{
			Asker: asker, Oracles: oracles, Seeds: []uint64{0, 1, 2},
			Conditions: []eval.Condition{eval.Asker, eval.NoneAdv}, Dir: dir,
		})
		if err != nil {
			t.Fatal(err)
		}
		eps, err := eval.ReadEpisodes(dir)
		if err != nil {
			t.Fatal(err)
		}
		opt := eval.AnalyzeOptions{BootstrapSeed: 11}
		om, err := eval.ReadOracleMap(dir)
		if err != nil || om == nil {
			t.Fatalf("the run directory's oracle map: %v, %v", om, err)
		}
		om.Apply(&opt)
		rep, err := eval.Analyze(eps, opt)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]eval.Row{}
		for _, r := range rep.Rows {
			rows[r.Oracle] = r
		}
		return rows
	}
	rows := analyze(nil)
	resp := rows["test_leaky_responder"].DJResp
	if resp.Mean == nil || *resp.Mean <= 0 || resp.Lo == nil || *resp.Lo <= 0 {
		t.Errorf("default asker: ΔJ_resp of the leaky responder = %v [%v, …], want an interval above 0", ptr(resp.Mean), ptr(resp.Lo))
	}
	none := rows["test_credit_all"].DRecNone
	if none.Mean == nil || *none.Mean <= 0 || none.Lo == nil || *none.Lo <= 0 {
		t.Errorf("default asker: ΔRec_none of credit-all = %v [%v, …], want an interval above 0", ptr(none.Mean), ptr(none.Lo))
	}
	if d := rows["deterministic"].DJResp; d.Mean == nil || *d.Mean != 0 {
		t.Errorf("default asker: deterministic ΔJ_resp = %v, want 0", ptr(d.Mean))
	}
	full := analyze(policy.Scripted(probe.Full))["test_leaky_responder"].DJResp
	if full.Mean == nil || *full.Mean != 0 {
		t.Errorf("full asker: ΔJ_resp of the leaky responder = %v, want 0 (why full is not the default)", ptr(full.Mean))
	}
	t.Logf("default asker: ΔJ_resp(leaky responder) = %.3f [%.3f, %.3f]; ΔRec_none(credit-all) = %.3f", *resp.Mean, *resp.Lo, *resp.Hi, *none.Mean)
}
