package eval

import (
	"slices"

	"avtgym/driver"
)

// RolloutSummary aggregates the records of one policy's rollout (`avtgym
// rollout`) with the eligibility rules of PROTOCOL.md §6, through the same
// per-cell metrics as an evaluation (Cell): each mean is over the episodes
// where its quantity is defined, null when none is.
type RolloutSummary struct {
	Policy    string `json:"policy"`
	Corpus    string `json:"corpus"`
	Episodes  int    `json:"episodes"`
	Errors    int    `json:"errors"`
	Truncated int    `json:"truncated"`
	// FallbackStops counts the episodes that ended by a fallback stop;
	// they count for reward and success, not for recall and F1.
	FallbackStops int      `json:"fallback_stops"`
	Precision     *float64 `json:"precision"`
	Recall        *float64 `json:"recall"`
	F1            *float64 `json:"f1"`
	RewardMean    *float64 `json:"reward_mean"`
	SuccessRate   *float64 `json:"success_rate"`
	// NPrecision, NRecall, NF1, NReward and NSuccess are the means'
	// denominators: the scored episodes (Episodes; those that could not
	// be played or scored are in Errors, not counted as failures) where
	// each is defined. They differ from an evaluation's (eval's report,
	// "How each figure is counted"): there every task is played once per
	// seed with that seed and an episode that did not complete counts as
	// a failure; a rollout plays each task once, task i with seed --seed
	// + i, so a seeded choice (the lookup solver's guess among the
	// interpretations the dialogue left open) differs between the tasks of
	// an AVT.
	NPrecision int `json:"n_precision"`
	NRecall    int `json:"n_recall"`
	NF1        int `json:"n_f1"`
	NReward    int `json:"n_reward"`
	NSuccess   int `json:"n_success"`
	// MultiInterpretation restricts success to the tasks whose AVT has two
	// or more interpretations in this rollout, beside the success a
	// uniform guess among them would reach (the mean of 1/k).
	MultiInterpretation MultiSummary `json:"multi_interpretation"`
	// Protocol is the episodes' protocol when it is not ambitab (left out
	// for ambitab, so that its summary reads as before).
	Protocol string `json:"protocol,omitempty"`
	// BirdC holds BIRD-Interact's rates under bird-c and bird-a.
	BirdC *BirdCSummary `json:"bird_c,omitempty"`
	// Tide holds TIDE's metrics under tide-f and tide-p.
	Tide *TideRollout `json:"tide,omitempty"`
}

// TideRollout is a TIDE rollout's metrics (TIDE's Table 2, with the
// evaluation's definitions: tideMetric), over all its scored episodes, by
// sample type (chain_only, drift_only, joint), and DRA by drift subtype
// (value, constraint, projection). Unlike an evaluation it has no
// intervals, and ERROR episodes are left out rather than counted as
// failures.
type TideRollout struct {
	TideRates
	BySampleType   map[string]*TideRates `json:"by_sample_type"`
	DRAByDriftType map[string]*float64   `json:"dra_by_drift_subtype"`
}

// TideRates are TIDE's metrics over some episodes, each the mean over
// those of the sample types (and the protocol) it is defined on, null
// where there are none: DEA, every SQL matched; AR, some question asked;
// L1-IR and JIR (tide-f only: under tide-p L1 is pre-filled), a question
// routed to L1, and to both layers; L2-IR, a question routed to L2 (TIDE's
// L2-IRp under tide-p); DRR, the policy's two SQLs satisfy S(y1) ⊄ S(y2);
// DRA, DRR and the post-drift SQL matched.
type TideRates struct {
	Episodes int      `json:"episodes"`
	DEA      *float64 `json:"dea"`
	AR       *float64 `json:"ar"`
	L1IR     *float64 `json:"l1_ir"`
	L2IR     *float64 `json:"l2_ir"`
	JIR      *float64 `json:"jir"`
	DRR      *float64 `json:"drr"`
	DRA      *float64 `json:"dra"`
}

// tideRates computes TideRates over scored episodes of a protocol.
func tideRates(eps []Episode, protocol string) *TideRates {
	l2 := tideL2IRf
	if protocol == TideP {
		l2 = tideL2IRp
	}
	mean := func(m tideMetric) *float64 {
		if m.protocol != "" && m.protocol != protocol {
			return nil
		}
		var acc sum
		for i := range eps {
			if !slices.Contains(m.types, eps[i].SampleType) {
				continue
			}
			if v, ok := m.value(&eps[i]); ok {
				acc.add(&v)
			}
		}
		return acc.mean()
	}
	return &TideRates{Episodes: len(eps), DEA: mean(tideDEA), AR: mean(tideAR), L1IR: mean(tideL1IR), L2IR: mean(l2),
		JIR: mean(tideJIR), DRR: mean(tideDRR), DRA: mean(tideDRA)}
}

// summarizeTide computes a TideRollout over scored episodes.
func summarizeTide(eps []Episode, protocol string) *TideRollout {
	byType, byDrift := map[string][]Episode{}, map[string][]Episode{}
	for _, e := range eps {
		if e.SampleType != "" {
			byType[e.SampleType] = append(byType[e.SampleType], e)
		}
		if e.DriftSubtype != "" {
			byDrift[e.DriftSubtype] = append(byDrift[e.DriftSubtype], e)
		}
	}
	t := &TideRollout{TideRates: *tideRates(eps, protocol), BySampleType: map[string]*TideRates{}, DRAByDriftType: map[string]*float64{}}
	for k, es := range byType {
		t.BySampleType[k] = tideRates(es, protocol)
	}
	for k, es := range byDrift {
		t.DRAByDriftType[k] = tideRates(es, protocol).DRA
	}
	return t
}

// BirdCSummary is a rollout's BIRD-Interact results: phase-1 and phase-2
// success over the scored episodes (an episode whose phase 1 failed counts
// as a phase-2 failure, as BIRD-Interact counts it) and the normalised
// reward, the mean reward × 100.
type BirdCSummary struct {
	Phase1SR         *float64 `json:"phase1_sr"`
	Phase2SR         *float64 `json:"phase2_sr"`
	NormalizedReward *float64 `json:"normalized_reward"`
	// Released counts the episodes whose follow-up was released.
	Released int `json:"released"`
	// Under bird-a: CoinsUsed is the mean coins an episode spent, and
	// CoinsByAction the mean coins an episode spent per action type (0
	// for an episode that took none of it), over the scored episodes.
	CoinsUsed     *float64           `json:"coins_used,omitempty"`
	CoinsByAction map[string]float64 `json:"coins_by_action,omitempty"`
}

// MultiSummary is success on multi-interpretation AVTs against chance.
type MultiSummary struct {
	Episodes    int      `json:"episodes"`
	SuccessRate *float64 `json:"success_rate"`
	Chance      *float64 `json:"chance"`
}

// SummarizeRollout aggregates the records of a rollout. A record that could
// not be played (an error) counts in Errors only; ERROR episodes, which
// the environment did not score, are errors too.
func SummarizeRollout(policy string, rs []*driver.Record) *RolloutSummary {
	s := &RolloutSummary{Policy: policy}
	eps := make([]Episode, 0, len(rs))
	perAVT := map[string]int{}
	var reward, multi, chance sum
	for _, r := range rs {
		if s.Corpus == "" {
			s.Corpus = r.Corpus
		}
		if s.Protocol == "" {
			s.Protocol = r.Protocol
		}
		if !r.Scored() {
			s.Errors++
			continue
		}
		s.Episodes++
		perAVT[r.AVTID]++
		if r.Status == "TRUNCATED" {
			s.Truncated++
		}
		if r.FallbackStop {
			s.FallbackStops++
		}
		reward.add(r.Reward)
		eps = append(eps, Episode{Record: *r})
	}
	m := Cell(eps)
	s.Precision, s.Recall, s.F1, s.SuccessRate = m.Precision, m.Recall, m.F1, m.SR
	s.NPrecision, s.NRecall, s.NF1, s.NSuccess = m.NPrecision, m.NRecall, m.NF1, m.NSR
	s.RewardMean, s.NReward = reward.mean(), reward.n
	for _, e := range eps {
		if k := perAVT[e.AVTID]; k >= 2 && e.Success != nil {
			s.MultiInterpretation.Episodes++
			multi.add(e.Success)
			p := 1 / float64(k)
			chance.add(&p)
		}
	}
	s.MultiInterpretation.SuccessRate, s.MultiInterpretation.Chance = multi.mean(), chance.mean()
	if isBird(s.Protocol) {
		var p1, p2, coins sum
		b := &BirdCSummary{}
		for i := range eps {
			if v, ok := phase1Of(&eps[i]); ok {
				p1.add(&v)
			}
			if v, ok := phase2Of(&eps[i]); ok {
				p2.add(&v)
			}
			if eps[i].Phase2 != nil {
				b.Released++
			}
			coins.add(eps[i].CoinsUsed)
		}
		if s.Protocol == BirdA && coins.n > 0 {
			b.CoinsUsed, b.CoinsByAction = coins.mean(), map[string]float64{}
			for i := range eps {
				for a, c := range eps[i].CoinsSpent {
					b.CoinsByAction[a] += c
				}
			}
			for a := range b.CoinsByAction {
				b.CoinsByAction[a] /= float64(coins.n)
			}
		}
		b.Phase1SR, b.Phase2SR = p1.mean(), p2.mean()
		if m := s.RewardMean; m != nil {
			b.NormalizedReward = ptr(100 * *m)
		}
		s.BirdC = b
	}
	if isTide(s.Protocol) {
		s.Tide = summarizeTide(eps, s.Protocol)
	}
	return s
}

// sum accumulates a mean of defined values.
type sum struct {
	total float64
	n     int
}

func (m *sum) add(x *float64) {
	if x != nil {
		m.total += *x
		m.n++
	}
}

func (m *sum) mean() *float64 { return ratio(m.total, m.n) }
