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
// as "" (a failed solution, not an error); endpoint failures are errors.
// When the prompt is over the model's context, the schema is cut at table
// boundaries and the call retried once; if it still does not fit the error
// names the task.
func (s *LLMSolver) Solve(ctx context.Context, t *corpus.Task, dialogue []oracle.Turn) (string, error) {
	schema := t.DB.Schema
	for attempt := 0; ; attempt++ {
		resp, err := s.client.Chat(ctx, llm.Request{
			Messages: solverMessages(t, schema, dialogue),
			JSON:     true,
			Purpose:  "solver",
			CacheKey: t.Corpus.Name + "/" + t.ID,
		})
		if llm.KindOf(err) == llm.KindContextOverflow && attempt == 0 {
			budget := s.client.Config().ContextTokens/2 - s.client.Config().MaxTokens
			if cut, truncated := llm.TruncateSchema(schema, budget); truncated {
				schema = cut
				continue
			}
		}
		if err != nil {
			return "", fmt.Errorf("task %s: %w", t.ID, err)
		}
		return extractSQL(resp.Content), nil
	}
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
// that, text that starts like a query.
func extractSQL(content string) string {
	var v struct {
		SQL string `json:"sql"`
	}
	if err := llm.ParseJSON(content, &v); err == nil && strings.TrimSpace(v.SQL) != "" {
		return strings.TrimSpace(v.SQL)
	}
	if m := fence.FindStringSubmatch(content); m != nil {
		return strings.TrimSpace(m[1])
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
