package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// LLMAsker is the evaluated asking policy of issue 4 (item 6): a model
// behind an OpenAI-compatible endpoint that reads the public task and the
// dialogue so far and answers each turn with one JSON object: a question
// ({"type": "clarification", "question": ...}), STOP ({"type": "done"}) or,
// when the episode waits for the client's SQL (the outcome reward with the
// client solver), the solution ({"type": "sql", "sql": ...}).
//
// Output that cannot be used is retried once with a corrective message;
// when the retry fails too, the episode ends by a fallback stop and is
// marked FallbackStop. An endpoint failure is an *AskerError: the episode
// is not played (Rollout reports it as ASKER_FAILED).
//
// The asker resets with the privileged channel only to fill the episode
// record (AVT id, |Amb|, credits); its prompts are built from the public
// observation alone.
type LLMAsker struct {
	client *llm.Client
	style  AskerStyle
}

// NewLLMAsker returns an asker that calls c with the prompt style ("" is
// the default, checklist_ledger).
func NewLLMAsker(c *llm.Client, style AskerStyle) (*LLMAsker, error) {
	if c == nil {
		return nil, errors.New("policy: the LLM asker needs an llm client")
	}
	st, err := ParseAskerStyle(string(style))
	if err != nil {
		return nil, err
	}
	return &LLMAsker{client: c, style: st}, nil
}

// Style returns the asker's prompt style.
func (a *LLMAsker) Style() AskerStyle { return a.style }

// PolicyName implements Player: "llm:<style>".
func (a *LLMAsker) PolicyName() string { return "llm:" + string(a.style) }

// AskerError is a failure of the asker's model endpoint (after the llm
// client's own retries): the episode cannot be played, and is never a
// fallback stop.
type AskerError struct{ Err error }

func (e *AskerError) Error() string { return "asker endpoint: " + e.Err.Error() }

func (e *AskerError) Unwrap() error { return e.Err }

// fallbackSQL is submitted when the asker's SQL output cannot be parsed in
// the solving phase: a valid query whose result matches no reference, so
// that the episode ends as a failed solution (outcome 0).
const fallbackSQL = "SELECT NULL WHERE 0"

// decision is one parsed asker output.
type decision struct {
	kind     string // "clarification", "done" or "sql"
	question string
	sql      string
}

// parseDecision parses and checks one model output. offerSQL says whether
// "sql" is allowed; solving, that it is the only thing allowed.
func parseDecision(content string, offerSQL, solving bool) (decision, error) {
	var raw struct {
		Type     *string `json:"type"`
		Question any     `json:"question"`
		Output   any     `json:"output"`
		SQL      any     `json:"sql"`
	}
	if err := llm.ParseJSON(content, &raw); err != nil {
		return decision{}, err
	}
	if raw.Type == nil {
		return decision{}, errors.New(`the JSON object has no "type" field`)
	}
	str := func(v any) string {
		if s, ok := v.(string); ok {
			return strings.TrimSpace(s)
		}
		return ""
	}
	typ := strings.ToLower(strings.TrimSpace(*raw.Type))
	switch {
	case typ == "sql" && (offerSQL || solving):
		sql := str(raw.SQL)
		if sql == "" {
			sql = str(raw.Output)
		}
		if sql == "" {
			return decision{}, errors.New(`"type": "sql" needs a non-empty string "sql" field`)
		}
		return decision{kind: "sql", sql: sql}, nil
	case solving:
		return decision{}, fmt.Errorf(`"type" is %q, but asking has ended: answer with "type": "sql"`, typ)
	case typ == "clarification":
		q := str(raw.Question)
		if q == "" {
			q = str(raw.Output) // the field name of the BIRD-Interact format
		}
		if q == "" {
			return decision{}, errors.New(`"type": "clarification" needs a non-empty string "question" field`)
		}
		return decision{kind: "clarification", question: q}, nil
	case typ == "done":
		return decision{kind: "done"}, nil
	default:
		want := `"clarification" or "done"`
		if offerSQL {
			want = `"clarification", "done" or "sql"`
		}
		return decision{}, fmt.Errorf(`"type" is %q; it must be %s`, typ, want)
	}
}

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// decide asks the model for one decision, retrying once with a corrective
// message when the output cannot be used. ok is false when the retry
// failed too; err is an endpoint failure.
func (a *LLMAsker) decide(ctx context.Context, st *promptState, cacheKey string) (d decision, ok bool, err error) {
	msgs := buildMessages(a.style, st)
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := a.client.Chat(ctx, llm.Request{Messages: msgs, JSON: true, Purpose: "asker", CacheKey: cacheKey})
		if err != nil {
			return decision{}, false, &AskerError{Err: err}
		}
		d, perr := parseDecision(resp.Content, st.offerSQL, st.solving)
		if perr == nil {
			return d, true, nil
		}
		msgs = append(slices.Clone(msgs),
			llm.Message{Role: "assistant", Content: resp.Content},
			llm.Message{Role: "user", Content: correction(perr, st)})
	}
	return decision{}, false, nil
}

// correction is the corrective message of the one retry.
func correction(err error, st *promptState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Your reply could not be used: %v.\n", err)
	b.WriteString("Reply again with exactly one JSON object and no other text, one of:\n")
	if st.solving {
		b.WriteString(`{"type": "sql", "sql": "<one SQL query>"}` + "\n")
		return b.String()
	}
	if st.remaining > 0 {
		b.WriteString(`{"type": "clarification", "question": "<exactly one question>"}` + "\n")
	}
	b.WriteString(`{"type": "done"}` + "\n")
	if st.offerSQL {
		b.WriteString(`{"type": "sql", "sql": "<one SQL query>"}` + "\n")
	}
	return b.String()
}

// needsClientSQL says whether an episode with these options waits for the
// client's SQL after STOP: the outcome reward with the client solver (the
// server's default solver).
func needsClientSQL(o *pb.EpisodeOptions) bool {
	return o.GetReward() == pb.RewardType_REWARD_TYPE_OUTCOME &&
		(o.GetSolver() == pb.Solver_SOLVER_UNSPECIFIED || o.GetSolver() == pb.Solver_SOLVER_CLIENT)
}

// PlayEpisode implements Player.
func (a *LLMAsker) PlayEpisode(ctx context.Context, env pb.EnvServiceClient, reset *pb.ResetRequest) (*Episode, error) {
	ep, out, err := resetEpisode(ctx, env, reset)
	if err != nil {
		return nil, err
	}
	obs := ep.GetObservation()
	// Only public data from here on: the task view, the turns and the
	// budget counters of the observations.
	ps := &promptState{
		task:      obs.GetTask(),
		turns:     append([]*pb.Turn(nil), obs.GetTurns()...),
		budget:    int(obs.GetQuestionBudget()),
		asked:     int(obs.GetQuestionsAsked()),
		remaining: int(obs.GetQuestionsRemaining()),
		offerSQL:  needsClientSQL(reset.GetOptions()),
	}
	cacheKey := fmt.Sprintf("%s|%s|%s/%s|seed=%d", AskerPromptVersion, a.style, ps.task.GetCorpus(), ps.task.GetTaskId(), ep.GetSeed())
	st := &stepper{env: env, token: ep.GetToken()}
	phase := obs.GetPhase()
	observe := func() {
		o := st.last.GetObservation()
		ps.turns = append(ps.turns, o.GetTurns()...)
		ps.asked, ps.remaining = int(o.GetQuestionsAsked()), int(o.GetQuestionsRemaining())
		if b := o.GetQuestionBudget(); b > 0 {
			ps.budget = int(b)
		}
		phase = o.GetPhase()
	}
	stop := &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}
	// Each ask is answered or ends asking (the server truncates past the
	// budget), so the loop ends; the bound guards against a server that
	// would not.
	for decisions := 0; phase == pb.Phase_PHASE_ASKING; decisions++ {
		if decisions > ps.budget+1 {
			if err := st.step(ctx, stop); err != nil {
				return nil, fmt.Errorf("stop: %w", err)
			}
			observe()
			break
		}
		d, ok, err := a.decide(ctx, ps, cacheKey)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok:
			out.FallbackStop = true
			if err := st.step(ctx, stop); err != nil {
				return nil, fmt.Errorf("fallback stop: %w", err)
			}
		case d.kind == "clarification":
			if err := st.step(ctx, &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: d.question}}}); err != nil {
				return nil, fmt.Errorf("ask: %w", err)
			}
			out.Questions = append(out.Questions, d.question)
		case d.kind == "sql":
			if err := st.step(ctx, &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: d.sql}}}); err != nil {
				return nil, fmt.Errorf("submit_sql: %w", err)
			}
		default:
			if err := st.step(ctx, stop); err != nil {
				return nil, fmt.Errorf("stop: %w", err)
			}
		}
		observe()
		if st.last.GetDone() {
			break
		}
	}
	if (st.last == nil || !st.last.GetDone()) && phase == pb.Phase_PHASE_SOLVING {
		// The episode waits for the client's SQL: one more decision.
		ps.solving = true
		d, ok, err := a.decide(ctx, ps, cacheKey)
		if err != nil {
			return nil, err
		}
		sql := d.sql
		if !ok {
			out.FallbackSQL = true
			sql = fallbackSQL
		}
		if err := st.step(ctx, &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}); err != nil {
			return nil, fmt.Errorf("submit_sql: %w", err)
		}
		observe()
	}
	if st.last == nil || !st.last.GetDone() {
		return nil, fmt.Errorf("the episode did not end (phase %s)", phase)
	}
	finishEpisode(out, st.last)
	return out, nil
}
