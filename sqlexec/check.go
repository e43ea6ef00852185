package sqlexec

import (
	"context"
	"fmt"
)

// Verdict is the outcome of checking one predicted SQL.
type Verdict struct {
	// Success is true when the prediction's result agrees with the reference's.
	Success bool
	// Reason explains a failure (a comparison mismatch or the prediction's error); empty
	// on success.
	Reason string
	// Err is the prediction's *Error when it failed to run (syntax, denied, timeout, caps,
	// execution); nil otherwise.
	Err error
}

// CacheKey returns the cache key Check uses for the reference result of refKey under p:
// refKey itself when p rewrites nothing, else refKey with the rewrite switches appended
// (the rewritten reference is a different query); under p.Harness, refKey with
// "\x00harness" appended (the harness's rewrite, execution and cells).
func CacheKey(refKey string, p Policy) string {
	if p.Harness {
		return refKey + "\x00harness"
	}
	if !p.rewrites() {
		return refKey
	}
	b := func(v bool) byte {
		if v {
			return '1'
		}
		return '0'
	}
	return refKey + "\x00rewrite:" + string([]byte{b(p.StripComments), b(p.StripDistinct), b(p.StripRound)})
}

// Check verifies predicted SQL against the reference SQL (PROTOCOL §4). It applies
// p.Rewrite to both texts, gets the reference result through cache (key CacheKey(refKey,
// p)), runs the prediction on eng, resolves OrderAuto against the reference and compares.
// When the rewritten prediction is the rewritten reference up to comments, whitespace
// and the case of unquoted words (NormalizeSQL), the cached reference result is reused
// and the prediction is not executed.
//
// A prediction that fails to run is a failed Verdict with Err set and a nil error. The
// returned error is reserved for failures that are not the prediction's: the reference
// failed (the record is invalid, e.g. it exceeds a cap), the database is unavailable or
// saturated (KindBusy: no slot to run the query in time), or ctx ended.
//
// Under p.Harness (a BirdInteract record, COMPARISON_HARNESS) on PostgreSQL,
// the check is BIRD-Interact's test_case_default (checkHarness, harness.go);
// on another engine p.Harness is dropped and the sound variant decides
// (the harness is PostgreSQL's).
func Check(ctx context.Context, eng Engine, cache *Cache, refKey string, p Policy, predicted string, reference string, lim Limits) (Verdict, error) {
	if p.Harness {
		if eng.Dialect() == "postgres" {
			return checkHarness(ctx, eng, cache, refKey, p, predicted, reference, lim)
		}
		p.Harness = false
	}
	predSQL, predToks := p.rewrite(predicted)
	key := CacheKey(refKey, p)
	rf := cache.refForm(key, p, reference)
	kept, err := cache.get(ctx, key, func(ctx context.Context) (*Result, error) {
		return eng.Query(ctx, rf.sql, lim)
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("sqlexec: reference %q failed: %w", refKey, err)
	}
	ref, rp := kept.res, rf.policy
	pred := ref
	// The prediction is not run when it is the reference up to whitespace,
	// comments and case. Its rewritten tokens rule most predictions out
	// without lexing again; a match is confirmed on the text itself.
	if !normalEquals(predToks, rf.norm) || NormalizeSQL(predSQL) != rf.norm {
		pred, err = eng.Query(ctx, predSQL, lim)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return Verdict{}, fmt.Errorf("sqlexec: checking prediction: %w", cerr)
			}
			switch KindOf(err) {
			case 0, KindUnavailable, KindBusy:
				return Verdict{}, fmt.Errorf("sqlexec: running prediction: %w", err)
			}
			return Verdict{Success: false, Reason: err.Error(), Err: err}, nil
		}
	}
	ok, reason := compareWith(rp, pred, ref, kept.prepared(rp))
	return Verdict{Success: ok, Reason: reason}, nil
}

// checkHarness is Check under p.Harness: test_case_default and ex_base
// (BIRD-Interact's evaluation/src/eval_bird_interact.py). Both texts are
// rewritten (HarnessRewrite) and run with the harness's limits
// (harnessLimits); an error or a timeout on either side is a failed
// verdict (ex_base's 0), not an error, except the environment's own
// failures (KindUnavailable, KindBusy, ctx ending). Rows compare as lists
// under OrderOrdered (conditions["order"]), else as sets.
func checkHarness(ctx context.Context, eng Engine, cache *Cache, refKey string, p Policy, predicted string, reference string, lim Limits) (Verdict, error) {
	predSQL, err := HarnessRewrite(predicted)
	if err != nil {
		return Verdict{Success: false, Reason: "prediction: " + err.Error()}, nil
	}
	refSQL, err := HarnessRewrite(reference)
	if err != nil {
		return Verdict{Success: false, Reason: "reference: " + err.Error()}, nil
	}
	kept, err := cache.get(ctx, CacheKey(refKey, p), func(ctx context.Context) (*Result, error) {
		return eng.Query(ctx, refSQL, harnessLimits(refSQL, lim))
	})
	if err != nil {
		if envErr := environmentError(ctx, err, "reference"); envErr != nil {
			return Verdict{}, envErr
		}
		return Verdict{Success: false, Reason: "the reference failed, which the harness scores 0: " + err.Error()}, nil
	}
	ref, pred := kept.res, kept.res
	if NormalizeSQL(predSQL) != NormalizeSQL(refSQL) {
		pred, err = eng.Query(ctx, predSQL, harnessLimits(predSQL, lim))
		if err != nil {
			if envErr := environmentError(ctx, err, "prediction"); envErr != nil {
				return Verdict{}, envErr
			}
			return Verdict{Success: false, Reason: err.Error(), Err: err}, nil
		}
	}
	ok, reason := compareHarness(p.Order == OrderOrdered, pred, ref)
	return Verdict{Success: ok, Reason: reason}, nil
}

// environmentError is err as Check's error when it is not the SQL's fault
// (ctx ended, the database unavailable or saturated, or not an *Error),
// else nil.
func environmentError(ctx context.Context, err error, side string) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("sqlexec: checking %s: %w", side, cerr)
	}
	switch KindOf(err) {
	case 0, KindUnavailable, KindBusy:
		return fmt.Errorf("sqlexec: running %s: %w", side, err)
	}
	return nil
}
