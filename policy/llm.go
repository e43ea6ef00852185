package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"avtgym/driver"
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
// Output is read as real models write it (the client strips thinking; a
// JSON object's raw newlines are repaired; prose around it is skipped): a
// reply cut off at the completion limit is asked for again with twice the
// limit, a JSON object copied from the user's answers is never taken for
// the decision, and an output with several different decisions is
// unusable. Output that cannot be used is retried once with a corrective
// message; when the retry fails too, the episode ends by a fallback stop
// and is marked FallbackStop. An endpoint failure is an *AskerError: the episode
// is not played (its record says ASKER_FAILED).
//
// Its prompts are built from the public observation alone (the episode may
// have been reset with the privileged channel, for the record's AVT id,
// |Amb| and credits; the asker never reads it).
type LLMAsker struct {
	client *llm.Client
	style  AskerStyle
}

// NewLLMAsker returns an asker that calls c with the prompt style ("" is
// the default, chat: the shared prompt of the trainer adapters).
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

// Preflight implements Preflighter: the model endpoint must answer, unless
// the client's cache already holds replies (a replay needs no endpoint;
// a miss then fails its episode alone).
func (a *LLMAsker) Preflight(ctx context.Context) error {
	return preflight(ctx, a.client)
}

// Style returns the asker's prompt style.
func (a *LLMAsker) Style() AskerStyle { return a.style }

// Name implements Player: "llm:<style>".
func (a *LLMAsker) Name() string { return "llm:" + string(a.style) }

// ErrAmbiTabOnly says that the LLM asker plays AMBITAB only: its prompts
// know neither BIRD_C's turn budget and debug retry nor the follow-up.
var ErrAmbiTabOnly = errors.New("the LLM asker plays the ambitab protocol only: its prompts show neither the debug retry nor the follow-up")

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
	return parseDecisionSaid(content, offerSQL, solving, "")
}

// parseDecisionSaid is parseDecision for a prompt that showed the model
// said, the oracle's replies (folded by foldSpace): a JSON object of the
// output found verbatim in them is an echo of the oracle's text, never the
// asker's decision. Of the other objects with a "type", there must be
// exactly one decision (repeats count once); an output with several is
// unusable, like one with none.
func parseDecisionSaid(content string, offerSQL, solving bool, said string) (decision, error) {
	objs := llm.JSONObjects(content)
	if len(objs) == 0 {
		var v struct{}
		return decision{}, llm.ParseJSON(content, &v) // says why there is none
	}
	var (
		found    []decision
		firstErr error
	)
	for _, obj := range objs {
		if said != "" && strings.Contains(said, foldSpace(obj)) {
			continue // copied from an oracle reply
		}
		d, err := decodeDecision(obj, offerSQL, solving)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if len(found) == 0 || found[0] != d {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 1 && firstErr == nil:
		return found[0], nil
	case len(found) > 1:
		return decision{}, errors.New("the reply holds several different decisions; give exactly one JSON object")
	case firstErr != nil:
		return decision{}, firstErr
	}
	return decision{}, errors.New("the reply only repeats JSON from the user's answers; give your own decision")
}

// foldSpace lower-cases s and folds its runs of white space into one space.
func foldSpace(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

// decodeDecision decodes and checks one JSON object of a model output.
func decodeDecision(obj string, offerSQL, solving bool) (decision, error) {
	var raw struct {
		Type     *string `json:"type"`
		Question any     `json:"question"`
		Output   any     `json:"output"`
		SQL      any     `json:"sql"`
	}
	if err := json.Unmarshal([]byte(obj), &raw); err != nil {
		return decision{}, fmt.Errorf("the JSON object does not decode: %v", err)
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

// decide asks the model for one decision. A reply cut off at the
// completion limit is asked for once more, unchanged, with twice the
// limit; an output that cannot be used (a cut-off one included) is retried
// once with a corrective message. ok is false when the retry failed too;
// err is an endpoint failure.
func (a *LLMAsker) decide(ctx context.Context, st *promptState, cacheKey string) (d decision, ok bool, err error) {
	msgs := buildMessages(a.style, st)
	said := st.said()
	maxTokens, regenerated := 0, false
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := a.client.Chat(ctx, llm.Request{Messages: msgs, JSON: true, MaxTokens: maxTokens, Purpose: "asker", CacheKey: cacheKey})
		if err != nil {
			return decision{}, false, &AskerError{Err: err}
		}
		if resp.CutOff() && !regenerated {
			regenerated = true
			maxTokens = 2 * a.client.Config().MaxTokens // the same request, with room to finish
			attempt--
			continue
		}
		perr := errCutOff
		if !resp.CutOff() {
			d, perr = parseDecisionSaid(resp.Content, st.offerSQL, st.solving, said)
			if perr == nil {
				return d, true, nil
			}
		}
		msgs = append(slices.Clone(msgs),
			llm.Message{Role: "assistant", Content: resp.Content},
			llm.Message{Role: "user", Content: correction(perr, st)})
	}
	return decision{}, false, nil
}

// errCutOff is the corrective's reason for a reply cut off twice.
var errCutOff = errors.New("it was cut off at the length limit; answer with the JSON object alone, briefly")

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

// Play implements Player. It reads only public data: the task view the
// episode shows, its turns and its budget counters.
func (a *LLMAsker) Play(ctx context.Context, ep *driver.Episode) error {
	if p := ep.Protocol(); p != pb.Protocol_PROTOCOL_AMBITAB {
		return &AskerError{Err: fmt.Errorf("%w (protocol %s)", ErrAmbiTabOnly, driver.ProtocolName(p))}
	}
	ps := &promptState{task: ep.Task(), offerSQL: ep.NeedsSQL(), allowance: ep.Allowance()}
	cacheKey := fmt.Sprintf("%s|%s|%s/%s|seed=%d", AskerPromptVersion, a.style, ps.task.GetCorpus(), ps.task.GetTaskId(), ep.Reset().GetSeed())
	observe := func() {
		ps.turns = ep.Turns()
		ps.budget, ps.asked, ps.remaining = ep.Budget(), ep.Asked(), ep.Remaining()
	}
	observe()
	// Each ask is answered or ends asking (the server truncates past the
	// budget), so the loop ends; the bound guards against a server that
	// would not.
	for decisions := 0; ep.Asking(); decisions++ {
		if decisions > ps.budget+1 {
			if err := ep.Stop(ctx); err != nil {
				return err
			}
			break
		}
		d, ok, err := a.decide(ctx, ps, cacheKey)
		if err != nil {
			return err
		}
		switch {
		case !ok:
			ep.FallbackStop = true
			err = ep.Stop(ctx)
		case d.kind == "clarification":
			err = ep.Ask(ctx, d.question)
		case d.kind == "sql":
			err = ep.SubmitSQL(ctx, d.sql)
		default:
			err = ep.Stop(ctx)
		}
		if err != nil {
			return err
		}
		observe()
	}
	if !ep.Done() && ep.Phase() == pb.Phase_PHASE_SOLVING {
		// The episode waits for the client's SQL: one more decision.
		ps.solving = true
		observe()
		d, ok, err := a.decide(ctx, ps, cacheKey)
		if err != nil {
			return err
		}
		sql := d.sql
		if !ok {
			ep.FallbackSQL = true
			sql = fallbackSQL
		}
		if err := ep.SubmitSQL(ctx, sql); err != nil {
			return err
		}
	}
	if !ep.Done() {
		return fmt.Errorf("the episode did not end (phase %s)", ep.Phase())
	}
	return nil
}

// preflight is the LLM policies' Preflight: the endpoint answers, or every
// call the run needs is already in the client's response cache (a replay).
func preflight(ctx context.Context, c *llm.Client) error {
	if err := c.Ping(ctx); err != nil && !c.CacheHolds() {
		return &AskerError{Err: err}
	}
	return nil
}
