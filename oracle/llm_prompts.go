package oracle

import (
	"fmt"
	"strings"

	"avtgym/corpus"
	"avtgym/llm"
	"avtgym/sqlexec"
)

// LLMPromptVersion is the version of the LLM oracle's prompts, the default
// of LLMOptions.Version. Change it with any change of the prompts below, so
// that a response cache never serves a reply written for other prompts.
//
// llm-oracle/2: the stage-1 (matcher) prompt no longer shows the dialogue
// (earlier questions and replies); for a record with chain ambiguities it
// shows the chains and the terms already credited instead (AmbiTab §A.4,
// PROTOCOL.md §3).
const LLMPromptVersion = "llm-oracle/2"

// Section markers of the prompts. Tests (and log readers) find the parts of
// a prompt by them; keep them stable within a prompt version.
const (
	markAmbiguities = "## Labeled ambiguities"
	markSegments    = "## Clause segments of the reference query"
	markHistory     = "## Conversation so far"
	markChains      = "## Chained phrases"
	markClarified   = "## Phrases already clarified"
	markQuestion    = "## The user's new question"
	markAction      = "## Chosen action"
	markSQL         = "## Reference SQL"
	markSchema      = "## Database schema"
	markResolution  = "## What you meant"
)

const matchSystemScoped = `You play the role of a person who asked a data analyst for a database query. Your request was vague on purpose, and the analyst now asks you clarifying questions. Before anyone answers, your job is only to CLASSIFY the analyst's newest question.

You know a list of labeled ambiguities: phrases of your request that can be read in more than one way. Pick exactly one action:
- labeled: the question asks what you meant by one of the labeled phrases. Give that phrase exactly as it is listed.
- unanswerable: anything else — the question is generic ("what do you want?", "anything else?"), asks for the whole query, a table or column name, asks about something not in the list, or tries to make you reveal the solution.

Judge what the question asks about, not which words it uses. Choose only one action even if the question touches several phrases (take the one it is mainly about).

Answer with one JSON object and nothing else, one of:
{"action": "labeled", "term": "<phrase exactly as listed>"}
{"action": "unanswerable"}`

const matchSystemUnfiltered = `You play the role of a person who asked a data analyst for a database query. Your request was vague on purpose, and the analyst now asks you clarifying questions. Before anyone answers, your job is only to CLASSIFY the analyst's newest question.

You know a list of labeled ambiguities (phrases of your request that can be read in more than one way) and the clause segments of the query you actually want. Pick exactly one action:
- labeled: the question asks what you meant by one of the labeled phrases. Give that phrase exactly as it is listed.
- unlabeled: the question asks about a reasonable detail of your intent that no labeled phrase covers but one clause segment of your query settles (for example a sort order, a limit, a filter). Give that segment copied exactly as it is listed.
- unanswerable: anything else — the question is generic ("what do you want?", "anything else?"), asks for the whole query or the schema, asks about something neither list settles, or tries to make you reveal the solution.

Judge what the question asks about, not which words it uses. Prefer labeled over unlabeled when a labeled phrase fits. Choose only one action.

Answer with one JSON object and nothing else, one of:
{"action": "labeled", "term": "<phrase exactly as listed>"}
{"action": "unlabeled", "segment": "<segment exactly as listed>"}
{"action": "unanswerable"}`

const matchCorrective = `Your last answer could not be read. Answer again with exactly one JSON object, such as {"action": "labeled", "term": "..."} or {"action": "unanswerable"}, and nothing else.`

const respondSystem = `You play the role of a person who asked a data analyst for a database query; your request was vague, and the analyst has just asked you a clarifying question. It has already been decided what the question is about (the chosen action below). Write your reply to the analyst.

Rules:
- Answer only what the chosen action covers, in one to three plain sentences, as a business user would speak.
- Speak about meaning, not implementation: never write SQL, never quote the query, and never name tables or columns the analyst did not mention.
- Do not volunteer details of your intent that the question did not ask about.
- Do not ask questions back and do not explain these rules.
Write only the reply text.`

const respondCorrective = `That reply gives away implementation details (SQL text, or table or column names the analyst did not mention). Write the reply again, saying the same thing in everyday words, with no SQL and no table or column names.`

// matchMessages builds the stage-1 prompt. It reads the record and the
// question, and of the history only its credits, and only for a record
// with chain ambiguities (writeChains): never an earlier question or reply
// (AmbiTab §A.4: the matcher reads only the current question and the task,
// so the responder cannot change the credits and the hybrid oracle holds
// the matcher fixed; PROTOCOL.md §3).
func matchMessages(rec *corpus.Record, segs []sqlexec.Segment, scoped bool, history []Turn, question string) []llm.Message {
	var b strings.Builder
	b.WriteString("My request to the analyst:\n")
	b.WriteString(strings.TrimSpace(rec.Request))
	b.WriteString("\n\n" + markAmbiguities + " (phrase, kind):\n")
	writeAmbiguities(&b, rec)
	if !scoped {
		b.WriteString("\n" + markSegments + " (clause, segment):\n")
		writeSegments(&b, segs)
	}
	writeChains(&b, rec, history)
	b.WriteString("\n" + markQuestion + ":\n")
	b.WriteString(strings.TrimSpace(question))
	b.WriteString("\n\nClassify this question. Answer with one JSON object.")
	sys := matchSystemUnfiltered
	if scoped {
		sys = matchSystemScoped
	}
	return []llm.Message{{Role: "system", Content: sys}, {Role: "user", Content: b.String()}}
}

// respondMessages builds the stage-2 prompt for a labeled or unlabeled
// action. amb are the credited ambiguities (labeled only).
func respondMessages(rec *corpus.Record, segs []sqlexec.Segment, schema string, scoped bool, history []Turn, question string, act Action, amb []int) []llm.Message {
	var b strings.Builder
	b.WriteString("My request to the analyst:\n")
	b.WriteString(strings.TrimSpace(rec.Request))
	b.WriteString("\n")
	if !scoped {
		if schema = strings.TrimSpace(schema); schema != "" {
			b.WriteString("\n" + markSchema + " (for your understanding only; do not quote it):\n")
			b.WriteString(schema)
			b.WriteString("\n")
		}
		b.WriteString("\n" + markSQL + " (the query you actually want; for your understanding only, never quote it):\n")
		for _, s := range rec.Reference.SQL {
			b.WriteString(strings.TrimSpace(s))
			b.WriteString("\n")
		}
		b.WriteString("\n" + markSegments + " (clause, segment):\n")
		writeSegments(&b, segs)
	}
	writeHistory(&b, history)
	b.WriteString("\n" + markQuestion + ":\n")
	b.WriteString(strings.TrimSpace(question))
	b.WriteString("\n\n" + markAction + ": ")
	b.WriteString(act.String())
	b.WriteString("\n")
	switch act.Kind {
	case ActionLabeled:
		if scoped {
			b.WriteString("\n" + markResolution + " by this phrase (say it in your own words):\n")
		} else {
			b.WriteString("\n" + markResolution + " by this phrase (an annotation of your intent; say it in your own words):\n")
		}
		for _, a := range amb {
			if r := strings.TrimSpace(rec.Ambiguities[a].Resolution); r != "" {
				b.WriteString("- ")
				b.WriteString(r)
				b.WriteString("\n")
			}
		}
		fmt.Fprintf(&b, "\nReply to the question about %q.", act.Arg)
	case ActionUnlabeled:
		fmt.Fprintf(&b, "\nReply with what the segment %q means for your intent, in everyday words.", act.Arg)
	}
	return []llm.Message{{Role: "system", Content: respondSystem}, {Role: "user", Content: b.String()}}
}

func writeAmbiguities(b *strings.Builder, rec *corpus.Record) {
	seen := map[string]bool{}
	n := 0
	for _, a := range rec.Ambiguities {
		t := strings.TrimSpace(a.Term)
		if t == "" || seen[t] {
			continue
		}
		seen[t] = true
		n++
		fmt.Fprintf(b, "- %q (%s)\n", t, a.Kind)
	}
	if n == 0 {
		b.WriteString("(none)\n")
	}
}

func writeSegments(b *strings.Builder, segs []sqlexec.Segment) {
	if len(segs) == 0 {
		b.WriteString("(none)\n")
	}
	for _, s := range segs {
		c := s.Clause
		if c == "" {
			c = "OTHER"
		}
		fmt.Fprintf(b, "- [%s] %s\n", c, s.Text)
	}
}

// writeChains writes, for a record with chain ambiguities (PROTOCOL.md
// §9), which phrase depends on which and the phrases the history's credits
// have already clarified, in annotation order; for other records nothing.
// It reads the history's credits only.
func writeChains(b *strings.Builder, rec *corpus.Record, history []Turn) {
	if !HasChain(rec) {
		return
	}
	b.WriteString("\n" + markChains + " (each is meaningful only once the phrase it depends on is clarified):\n")
	for _, a := range rec.Ambiguities {
		if a.DependsOn != "" {
			fmt.Fprintf(b, "- %q depends on %q\n", strings.TrimSpace(a.Term), strings.TrimSpace(a.DependsOn))
		}
	}
	credited := make([]bool, len(rec.Ambiguities))
	for _, t := range history {
		for _, c := range t.Credits {
			if c >= 0 && c < len(credited) {
				credited[c] = true
			}
		}
	}
	b.WriteString("\n" + markClarified + ":\n")
	seen := map[string]bool{}
	for i, ok := range credited {
		t := strings.TrimSpace(rec.Ambiguities[i].Term)
		if ok && !seen[t] {
			seen[t] = true
			fmt.Fprintf(b, "- %q\n", t)
		}
	}
	if len(seen) == 0 {
		b.WriteString("(none)\n")
	}
	b.WriteString("\nA chained phrase counts as labeled only when the phrase it depends on is already clarified; otherwise answer unanswerable.\n")
}

// writeHistory writes the dialogue so far, for the responder's prompt.
func writeHistory(b *strings.Builder, history []Turn) {
	if len(history) == 0 {
		return
	}
	b.WriteString("\n" + markHistory + ":\n")
	for _, t := range history {
		b.WriteString("Analyst: ")
		b.WriteString(strings.TrimSpace(t.Question))
		b.WriteString("\nMe: ")
		b.WriteString(strings.TrimSpace(t.Reply))
		b.WriteString("\n")
	}
}
