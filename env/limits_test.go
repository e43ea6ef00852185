package env

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
)

// worstState is an episode state with every shared field at its largest
// encoding (negative enums and int32s: 10-byte varints; the widest seed;
// every text at its limit) and the given protocol state message, itself at
// its largest (worstRules).
func worstState(corpusBytes, idBytes, answered int, rulesState func(*statepb.EpisodeState)) *statepb.EpisodeState {
	st := &statepb.EpisodeState{
		Version:        math.MaxUint32,
		Corpus:         strings.Repeat("c", corpusBytes),
		RecordId:       strings.Repeat("r", idBytes),
		RecordHashHi:   math.MaxUint64,
		RecordHashLo:   1,
		Seed:           math.MaxUint64,
		GroupIndex:     -1,
		Reward:         pb.RewardType(-1),
		Solver:         pb.Solver(-1),
		Oracle:         pb.OracleType(-1),
		Budget:         -1,
		Phase:          pb.Phase(-1),
		Status:         pb.EpisodeStatus(-1),
		Attempted:      -1,
		SolutionSql:    strings.Repeat("s", MaxSQLBytes),
		Verified:       true,
		Outcome:        true,
		VerifierReason: strings.Repeat("v", MaxNoticeBytes),
		IssuedUnix:     -1,
		StrictCredit:   true,
		Protocol:       pb.Protocol(-1),
		Prefilled:      -1,
		Comparison:     pb.Comparison(-1),
		UidHi:          math.MaxUint64,
		UidLo:          1,
		Answered:       -1,
		HistoryBytes:   math.MaxUint32,
		HistoryTagHi:   1,
		HistoryTagLo:   1,
	}
	for i := range MaxTags {
		key := fmt.Sprintf("%02d", i) + strings.Repeat("k", MaxTagKeyBytes-2)
		st.Tags = append(st.Tags, &statepb.Tag{Key: key, Value: strings.Repeat("v", MaxTagValueBytes)})
	}
	for range answered {
		st.CreditMasks = append(st.CreditMasks, math.MaxUint64)
	}
	rulesState(st)
	return st
}

// worstHistory is a history of n answered questions, each text at its
// limit, not sealed yet.
func worstHistory(n int) *history {
	q, r := strings.Repeat("q", MaxQuestionBytes), strings.Repeat("a", MaxReplyBytes)
	h := &history{}
	for range n {
		h.added = append(h.added, answered{question: q, reply: r})
	}
	return h
}

// worstRules sets each protocol's state message with every field at its
// largest, by protocol: each rules value bounds its own message.
var worstRules = map[pb.Protocol]func(*statepb.EpisodeState){
	pb.Protocol_PROTOCOL_AMBITAB: func(st *statepb.EpisodeState) {
		st.Rules = &statepb.EpisodeState_Ambitab{Ambitab: &statepb.AmbiTabState{UnparsedInRow: -1}}
	},
	pb.Protocol_PROTOCOL_BIRD_C: worstBird,
	pb.Protocol_PROTOCOL_BIRD_A: worstBird,
	pb.Protocol_PROTOCOL_TIDE_F: worstTide,
	pb.Protocol_PROTOCOL_TIDE_P: worstTide,
}

func worstBird(st *statepb.EpisodeState) {
	st.Rules = &statepb.EpisodeState_Bird{Bird: &statepb.BirdState{
		Subtask:               -1,
		Subtask2FirstQuestion: -1,
		Phase1Sql:             strings.Repeat("p", MaxSQLBytes),
		Subtask1:              statepb.SubtaskResult(-1),
		Subtask2:              statepb.SubtaskResult(-1),
		TurnsTotal:            -1,
		TurnsUsed:             -1,
		RetryPending:          true,
		CoinsTotalMilli:       -1,
		CoinsUsedMilli:        -1,
		ActionLog:             make([]byte, maxActionLog),
		FollowUpState:         pb.FollowUpState(-1),
		Variant:               pb.BirdVariant(-1),
	}}
}

func worstTide(st *statepb.EpisodeState) {
	st.Rules = &statepb.EpisodeState_Tide{Tide: &statepb.TideState{
		TurnsUsed:       -1,
		UnparsedInRow:   -1,
		SqlsSubmitted:   -1,
		Sql1:            strings.Repeat("p", MaxSQLBytes),
		Sql1Outcome:     true,
		Sql1Ran:         true,
		DriftInjected:   true,
		Sql2Outcome:     true,
		DriftRecognized: true,
	}}
}

// TestStateBoundIsExact fills every field of the state to its limit, for
// each protocol's state message: the encoded size is exactly the shared
// bound plus the protocol's own (rules.stateBound), the largest of them is
// exactly StateBound, so the bounds cover every field and no term is
// counted twice.
func TestStateBoundIsExact(t *testing.T) {
	if len(worstRules) != len(protocols) {
		t.Fatalf("worstRules covers %d protocols, rulesOf knows %d", len(worstRules), len(protocols))
	}
	for _, ids := range [][2]int{{1, 1}, {4, 3}, {127, 128}, {300, 20000}} {
		largest := 0
		for _, p := range protocols {
			st := worstState(ids[0], ids[1], MaxAnswered, worstRules[p])
			if !rulesOf(p).holds(st) {
				t.Fatalf("%s: the worst state does not hold the protocol's message", p)
			}
			if got, want := st.SizeVT(), sharedStateBound(ids[0], ids[1])+rulesOf(p).stateBound(); got != want {
				t.Errorf("ids %v, %s: worst state is %d bytes, its bound says %d", ids, p, got, want)
			}
			largest = max(largest, st.SizeVT())
		}
		if want := StateBound(ids[0], ids[1]); largest != want {
			t.Errorf("ids %v: the largest worst state is %d bytes, StateBound says %d", ids, largest, want)
		}
		s, err := NewSealer(RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		h := worstHistory(MaxAnswered)
		if got := h.size(); got != historyBound {
			t.Errorf("the worst history is %d bytes, historyBound says %d", got, historyBound)
		}
		tok, _, _ := s.prepare(largest, h.size())
		if got, want := len(tok), TokenBound(ids[0], ids[1]); got != want {
			t.Errorf("ids %v: the worst state's token is %d bytes, TokenBound says %d", ids, got, want)
		}
	}
}

// TestSealRefusesStateAboveBound: a state the arithmetic does not cover is
// an Internal error, not a token.
func TestSealRefusesStateAboveBound(t *testing.T) {
	s, err := NewSealer(RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{cfg: Config{Sealer: s}, maxState: StateBound(8, 8), maxHistory: historyBound}
	for _, p := range protocols {
		st := worstState(8, 8, MaxAnswered, worstRules[p])
		st.Answered = MaxAnswered
		if _, err := e.seal(st, worstHistory(MaxAnswered)); err != nil {
			t.Fatalf("%s: the largest valid state: %v", p, err)
		}
	}
	_, err = e.seal(worstState(8, 8, MaxAnswered+1, worstBird), &history{})
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != Internal {
		t.Fatalf("a state above the bound: %v, want an Internal error", err)
	}
	_, err = e.seal(worstState(8, 8, 0, worstBird), worstHistory(MaxAnswered+1))
	if !errors.As(err, &ee) || ee.Code != Internal {
		t.Fatalf("a history above the bound: %v, want an Internal error", err)
	}
}

// TestStepResponseBoundIsExact builds the largest StepResponse of each
// shape a step can have on a task and checks it against
// StepResponseBound: the largest equals it, none exceeds it. For a task
// with a follow-up (BIRD_C) the shapes include the release step, with
// the follow-up's request (short or longer than a question) and its
// reference in the privileged field.
func TestStepResponseBoundIsExact(t *testing.T) {
	base := &corpus.Record{ID: "task-1", AVTID: "avt-one", Interpretation: "by amount", Ambiguities: []corpus.Ambiguity{
		{Term: "top region"}, {Term: "recent year"}, {Term: "é"},
	}}
	withFollowUp := func(request int) *corpus.Record {
		r := *base
		r.FollowUp = &corpus.FollowUp{Request: strings.Repeat("f", request), Reference: corpus.Reference{SQL: corpus.SQLList{"SELECT 1", "SELECT 2"}}}
		return &r
	}
	withDrift := func(utterance int) *corpus.Record {
		r := *base
		r.Drift = &corpus.Drift{Utterance: strings.Repeat("d", utterance), Reference: corpus.Reference{SQL: corpus.SQLList{"SELECT 3"}}}
		return &r
	}
	for name, rec := range map[string]*corpus.Record{
		"no follow-up": base, "short follow-up": withFollowUp(20), "long follow-up": withFollowUp(300 << 10),
		"short drift": withDrift(20), "long drift": withDrift(300 << 10),
	} {
		task := &corpus.Task{Record: rec, Corpus: &corpus.Corpus{Name: "tiny"}}
		checkStepBound(t, name, task)
	}
}

func checkStepBound(t *testing.T, taskName string, task *corpus.Task) {
	t.Helper()
	credits := func() []*pb.Credit {
		var out []*pb.Credit
		for _, a := range task.Ambiguities {
			out = append(out, &pb.Credit{Index: -1, Term: a.Term, Counted: true})
		}
		return out
	}
	turn := func(n int) *pb.Turn {
		return &pb.Turn{Role: pb.Role(-1), Kind: pb.TurnKind(-1), Text: strings.Repeat("x", n)}
	}
	shapes := map[string][]*pb.Turn{
		"ask":              {turn(MaxQuestionBytes), turn(MaxReplyBytes)},
		"ask at the limit": {turn(MaxQuestionBytes), turn(MaxReplyBytes), turn(MaxNoticeBytes)},
		"over budget":      {turn(MaxQuestionBytes), turn(MaxNoticeBytes), turn(MaxNoticeBytes)},
		"submit":           {turn(MaxSQLBytes), turn(MaxNoticeBytes)},
		"stop then verify": {turn(0), turn(MaxNoticeBytes)},
		"tool":             {turn(maxToolCallBytes), turn(MaxToolResultBytes)},
	}
	var fuRef []string
	if fu := task.FollowUp; fu != nil {
		shapes["release"] = []*pb.Turn{turn(MaxSQLBytes), turn(len(fu.Request))}
		fuRef = fu.Reference.SQL
	}
	if d := task.Drift; d != nil {
		shapes["drift"] = []*pb.Turn{turn(MaxSQLBytes), turn(len(d.Utterance)), turn(MaxNoticeBytes)}
	}
	bound := StepResponseBound(task)
	largest := 0
	for name, turns := range shapes {
		resp := &pb.StepResponse{
			Token: make([]byte, TokenBound(len(task.Corpus.Name), len(task.ID))),
			Observation: &pb.Observation{Turns: turns, Phase: pb.Phase(-1), QuestionBudget: -1, QuestionsAsked: -1, QuestionsRemaining: -1,
				Protocol: pb.Protocol(-1), Subtask: -1, SqlRequired: true,
				Budget: &pb.Budget{Unit: pb.BudgetUnit(-1), TotalMilli: -1, UsedMilli: -1, RemainingMilli: -1}},
			Done:   true,
			Status: pb.EpisodeStatus(-1),
			Reward: &pb.Reward{Type: pb.RewardType(-1), Value: 0.5, Components: allComponents()},
			Privileged: &pb.Privileged{
				AvtId: task.AVTID, Interpretation: task.Interpretation,
				Credits: credits(), EpisodeCredits: credits(),
				VerifierReason:       strings.Repeat("v", MaxNoticeBytes),
				SolverSql:            strings.Repeat("s", MaxSQLBytes),
				OracleAction:         strings.Repeat("o", MaxReplyBytes),
				FollowUpReferenceSql: fuRef,
				Routing:              strings.Repeat("L", maxRoutingBytes),
			},
		}
		n := resp.SizeVT()
		if n > bound {
			t.Errorf("%s, %s: the largest response is %d bytes, more than StepResponseBound %d", taskName, name, n, bound)
		}
		largest = max(largest, n)
	}
	if largest != bound {
		t.Errorf("%s: the largest response of any shape is %d bytes, StepResponseBound says %d", taskName, largest, bound)
	}
}

// allComponents is a reward's components map with every name a reward
// may carry.
func allComponents() map[string]float64 {
	m := map[string]float64{}
	for _, c := range reward.Components() {
		m[c.String()] = 1
	}
	return m
}

func TestBoundText(t *testing.T) {
	const max = 40
	long := strings.Repeat("é", 100) // 200 bytes
	cases := []struct {
		name, in string
		cut      bool
	}{
		{"short", "hello", false},
		{"exact", strings.Repeat("a", max), false},
		{"long ascii", strings.Repeat("a", 1000), true},
		{"long two-byte runes", long, true},
		{"long three-byte runes", strings.Repeat("€", 100), true},
		{"invalid bytes", "a\xffb\xfe", false},
		{"invalid run", strings.Repeat("\xff", 10_000), true},
		{"truncated rune at the end", "abc\xe2\x82", false},
		{"invalid that grows past max", strings.Repeat("a\xff", 20), true},
	}
	for _, tc := range cases {
		got := BoundText(tc.in, max)
		if len(got) > max || !utf8.ValidString(got) {
			t.Errorf("%s: %q (%d bytes, valid %v)", tc.name, got, len(got), utf8.ValidString(got))
		}
		if strings.HasSuffix(got, TruncationMarker) != tc.cut {
			t.Errorf("%s: %q: marker %v, want %v", tc.name, got, !tc.cut, tc.cut)
		}
		if utf8.ValidString(tc.in) && len(tc.in) <= max && got != tc.in {
			t.Errorf("%s: valid text within the limit changed: %q", tc.name, got)
		}
		if tc.cut && utf8.ValidString(tc.in) && !strings.HasPrefix(tc.in, strings.TrimSuffix(got, TruncationMarker)) {
			t.Errorf("%s: %q is not a prefix of the input plus the marker", tc.name, got)
		}
	}
	if got := BoundText("a\xffb", max); got != "a\uFFFDb" {
		t.Errorf("invalid byte: %q, want a replacement character", got)
	}
}

func TestPolicyFault(t *testing.T) {
	for in, want := range map[string]string{
		"What is X?":                           "",
		"":                                     "is empty",
		" \n\t\u00a0":                          "is empty",
		"bad \xff":                             "is not valid UTF-8 text",
		strings.Repeat("a", 17):                "is longer than the limit of 16 bytes",
		strings.Repeat("\xff", 17):             "is longer than the limit of 16 bytes",
		strings.Repeat(" ", 16):                "is empty",
		"exactly sixteen!":                     "",
		"ok\u00e9":                             "",
		string([]byte{0xe2, 0x82, 0xac}):       "",
		string([]byte{'a', 0xe2, 0x82}):        "is not valid UTF-8 text",
		strings.Repeat("x", 15) + "\u00e9"[:1]: "is not valid UTF-8 text",
	} {
		if got := policyFault(in, 16); got != want {
			t.Errorf("policyFault(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLimitsDocument checks that docs/limits.md states the numbers this
// file computes.
func TestLimitsDocument(t *testing.T) {
	doc, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(doc), ",", "")
	for name, n := range map[string]int{
		"history chunk":              chunkOverhead + answeredBound(),
		"history bound":              historyBound,
		"state bound (16, 64)":       StateBound(16, 64),
		"token bound (16, 64)":       TokenBound(16, 64),
		"step turns":                 stepTurnsBound(),
		"MaxAnswered":                MaxAnswered,
		"StateBound(0, 0)":           StateBound(0, 0),
		"MaxQuestionBytes":           MaxQuestionBytes,
		"MaxSQLBytes":                MaxSQLBytes,
		"MaxReplyBytes":              MaxReplyBytes,
		"MaxNoticeBytes":             MaxNoticeBytes,
		"token bound of idAllowance": TokenBound(idAllowance, idAllowance),
		"StepResponseBound(example)": StepResponseBound(exampleTask()),
	} {
		if !strings.Contains(text, strconv.Itoa(n)) {
			t.Errorf("docs/limits.md does not state %s = %d", name, n)
		}
	}
}

// exampleTask is the task docs/limits.md works its example on: a corpus
// name of 16 bytes, a record id of 64, an AVT id of 64, an interpretation
// label of 32, and 64 ambiguities with terms of 32 bytes.
func exampleTask() *corpus.Task {
	t := &corpus.Task{
		Record: &corpus.Record{ID: strings.Repeat("i", 64), AVTID: strings.Repeat("a", 64), Interpretation: strings.Repeat("l", 32)},
		Corpus: &corpus.Corpus{Name: strings.Repeat("c", 16)},
	}
	for range corpus.MaxAmbiguities {
		t.Ambiguities = append(t.Ambiguities, corpus.Ambiguity{Term: strings.Repeat("t", 32)})
	}
	return t
}
