package env

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"avtgym/corpus"
	"avtgym/llm"
	"avtgym/oracle"
)

// LLMSolver is the fixed solver behind SOLVER_LLM: a model behind an
// OpenAI-compatible endpoint writes the SQL from the task's public
// specification and the clarification dialogue (the solver prompt after
// AmbiTab's appendix, in this project's own words). It never sees
// resolutions or references except as the oracle's replies in the
// dialogue.
type LLMSolver struct {
	client *llm.Client
}

// NewLLMSolver returns a solver that calls client.
func NewLLMSolver(client *llm.Client) *LLMSolver { return &LLMSolver{client: client} }

const solverSystem = `You write SQL for a data analyst. You get a database schema, a request from a user, ` +
	`and the clarifying questions that were asked and the user's answers. Write ONE query in the given SQL dialect ` +
	`that answers the request as the user clarified it. Where the answers say nothing, choose the most plausible reading. ` +
	`Reply with a JSON object only: {"sql": "<the query>"}.`

// Solve asks the model for the SQL. A reply without usable SQL is returned
// as "" (a failed solution, not an error): no SQL in it, SQL in a reply cut
// to the client's reply limit, or SQL longer than the environment accepts
// (maxSQLBytes). Endpoint failures are errors.
//
// A prompt over the model's context: the schema is cut at table boundaries
// (SolverSchema) and the call made once more. If it still does not fit,
// the dialogue is to blame when the prompt without it fits — decided from
// the estimate when the client estimated the overflow, else by sending
// that prompt once — and the solution fails (""): a policy that talks too
// much is scored, not dropped. Otherwise (the task's own prompt does not
// fit) the error names the task.
func (s *LLMSolver) Solve(ctx context.Context, t *corpus.Task, dialogue []oracle.Turn) (string, error) {
	cfg := s.client.Config()
	schema := t.DB.Schema
	for attempt := 0; ; attempt++ {
		resp, err := s.chat(ctx, t, schema, dialogue, "solver")
		if llm.KindOf(err) == llm.KindContextOverflow {
			if attempt == 0 {
				if cut, truncated := SolverSchema(t, cfg.ContextTokens, cfg.MaxTokens); truncated {
					schema = cut
					continue
				}
			}
			if len(dialogue) == 0 {
				return "", fmt.Errorf("task %s: the solver's prompt does not fit the model's context without any dialogue (see avtgym corpus check --solver-context-tokens): %w", t.ID, err)
			}
			if err := s.blame(ctx, t, schema, err); err != nil {
				return "", err
			}
			return "", nil // the dialogue is too long: a failed solution
		}
		if err != nil {
			return "", fmt.Errorf("task %s: %w", t.ID, err)
		}
		sql := extractSQL(resp.Content, resp.Truncated)
		if len(sql) > maxSQLBytes {
			return "", nil
		}
		return sql, nil
	}
}

func (s *LLMSolver) chat(ctx context.Context, t *corpus.Task, schema string, dialogue []oracle.Turn, purpose string) (*llm.Response, error) {
	return s.client.Chat(ctx, llm.Request{
		Messages: solverMessages(t, schema, dialogue),
		JSON:     true,
		Purpose:  purpose,
		CacheKey: t.Corpus.Name + "/" + t.ID,
	})
}

// blame decides whether a prompt that overflowed (overflow) would fit
// without the dialogue: nil when it would (the dialogue is to blame), else
// an error naming the task.
func (s *LLMSolver) blame(ctx context.Context, t *corpus.Task, schema string, overflow error) error {
	cfg := s.client.Config()
	if llm.OverflowEstimated(overflow) {
		if need := llm.EstimatePromptTokens(solverMessages(t, schema, nil)) + cfg.MaxTokens; need > cfg.ContextTokens {
			return fmt.Errorf("task %s: the solver's prompt needs ~%d tokens (estimated, %d of them for the reply) without any dialogue, more than the context of %d tokens (see avtgym corpus check --solver-context-tokens): %w",
				t.ID, need, cfg.MaxTokens, cfg.ContextTokens, overflow)
		}
		return nil
	}
	_, err := s.chat(ctx, t, schema, nil, "solver.probe")
	switch {
	case err == nil:
		return nil
	case llm.KindOf(err) == llm.KindContextOverflow:
		return fmt.Errorf("task %s: the solver's prompt overflows the model's context even without any dialogue (see avtgym corpus check --solver-context-tokens): %w", t.ID, err)
	default:
		return fmt.Errorf("task %s: checking whether the solver's prompt fits without the dialogue: %w", t.ID, err)
	}
}

// SolverSchema returns the schema text the LLM solver uses for t once its
// prompt has overflowed a context of contextTokens tokens with maxTokens
// for the reply (0: llm.DefaultMaxTokens): the schema cut at table
// boundaries (llm.TruncateSchema) to half of what the context leaves after
// the reply and the rest of the prompt without dialogue, so that the other
// half stays for the dialogue. It reports false, with t's whole schema,
// when the schema fits that budget already, no context is configured or
// the budget is not positive.
func SolverSchema(t *corpus.Task, contextTokens, maxTokens int) (string, bool) {
	if contextTokens <= 0 {
		return t.DB.Schema, false
	}
	if maxTokens <= 0 {
		maxTokens = llm.DefaultMaxTokens
	}
	rest := llm.EstimatePromptTokens(solverMessages(t, "", nil))
	budget := (contextTokens - maxTokens - rest) / 2
	if budget < 1 {
		return t.DB.Schema, false
	}
	return llm.TruncateSchema(t.DB.Schema, budget)
}

// SolverBaseTokens returns the context, in tokens, that the LLM solver's
// prompt for t needs without any dialogue: the estimate of the prompt with
// t's schema — or, when that does not fit contextTokens, with the schema
// SolverSchema cuts — plus maxTokens (0: llm.DefaultMaxTokens) for the
// reply. A task whose base exceeds the context cannot be solved by the
// model: its episodes end in ERROR when the solver is called.
func SolverBaseTokens(t *corpus.Task, contextTokens, maxTokens int) int {
	if maxTokens <= 0 {
		maxTokens = llm.DefaultMaxTokens
	}
	need := llm.EstimatePromptTokens(solverMessages(t, t.DB.Schema, nil)) + maxTokens
	if contextTokens <= 0 || need <= contextTokens {
		return need
	}
	if cut, truncated := SolverSchema(t, contextTokens, maxTokens); truncated {
		need = llm.EstimatePromptTokens(solverMessages(t, cut, nil)) + maxTokens
	}
	return need
}

func solverMessages(t *corpus.Task, schema string, dialogue []oracle.Turn) []llm.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "Dialect: %s\n\nSchema:\n%s\n", t.DB.Engine.Dialect(), schema)
	if len(t.DB.Spec.ColumnMeanings) > 0 {
		b.WriteString("\nColumn meanings:\n")
		for _, k := range sortedKeys(t.DB.Spec.ColumnMeanings) {
			fmt.Fprintf(&b, "- %s: %s\n", k, t.DB.Spec.ColumnMeanings[k])
		}
	}
	if len(t.PublicKnowledge) > 0 {
		b.WriteString("\nDomain knowledge:\n")
		for _, k := range t.PublicKnowledge {
			fmt.Fprintf(&b, "- %s: %s\n", k.Name, k.Definition)
		}
	}
	if t.Evidence != "" {
		fmt.Fprintf(&b, "\nHint: %s\n", t.Evidence)
	}
	fmt.Fprintf(&b, "\nRequest: %s\n", t.Request)
	if len(dialogue) == 0 {
		b.WriteString("\nNo clarifying questions were asked.\n")
	} else {
		b.WriteString("\nClarifications:\n")
		for i, d := range dialogue {
			fmt.Fprintf(&b, "Q%d: %s\nA%d: %s\n", i+1, d.Question, i+1, d.Reply)
		}
	}
	return []llm.Message{{Role: "system", Content: solverSystem}, {Role: "user", Content: b.String()}}
}

var fence = regexp.MustCompile("(?s)```(?:sql)?\\s*(.*?)```")

// extractSQL reads {"sql": ...}; failing that, a fenced code block; failing
// that, text that starts like a query — unless the content was truncated,
// when such text is only the beginning of a query.
func extractSQL(content string, truncated bool) string {
	var v struct {
		SQL string `json:"sql"`
	}
	if err := llm.ParseJSON(content, &v); err == nil && strings.TrimSpace(v.SQL) != "" {
		return strings.TrimSpace(v.SQL)
	}
	if m := fence.FindStringSubmatch(content); m != nil {
		return strings.TrimSpace(m[1])
	}
	if truncated {
		return ""
	}
	trimmed := strings.TrimSpace(content)
	upper := strings.ToUpper(trimmed)
	if strings.HasPrefix(upper, "SELECT") || strings.HasPrefix(upper, "WITH") {
		return trimmed
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
