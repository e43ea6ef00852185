package env

import (
	"regexp"
	"strings"

	"avtgym/corpus"
	pb "avtgym/proto/avtgym/v1"
)

// PublicView builds a task's public specification: the request, the
// evidence and the database's public context, with the knowledge entries
// the task masks removed. Nothing from the resolutions or the verification
// assets is copied into it.
func PublicView(t *corpus.Task) *pb.TaskView {
	db := &pb.DatabaseView{
		Id:             t.DB.Spec.ID,
		Dialect:        t.DB.Engine.Dialect(),
		Schema:         t.DB.Schema,
		ColumnMeanings: t.DB.Spec.ColumnMeanings,
	}
	for _, k := range t.PublicKnowledge {
		db.Knowledge = append(db.Knowledge, &pb.KnowledgeEntry{Id: k.ID, Name: k.Name, Definition: k.Definition})
	}
	return &pb.TaskView{
		Corpus:   t.Corpus.Name,
		TaskId:   t.ID,
		Split:    t.Split,
		Request:  t.Request,
		Evidence: t.Evidence,
		Database: db,
	}
}

// agentView is the reset's task view under BIRD_A: v without the
// database's schema, column meanings and knowledge entries, which the
// a-Interact agent buys with its tools (get_schema, get_all_column_meanings,
// get_knowledge_definition, …). The harnesses' first observation is the
// user's query with the database's name and the budget: the batch runner's
// build_initial_agent_prompt (bird_interact_agent/batch_run_bird_interact/
// prompt_utils.py: the ReAct instructions, a toy demo and "User's
// Question: …") and the ADK's initial message (BIRD-Interact-ADK/
// orchestrator/ainteract.py: "Database: …", "Task ID: …", "User Query:
// …"). The request's evidence (public hint text; BIRD-Interact's records
// have none) stays: no tool could sell it. v itself, shared by every
// protocol's resets, is not changed.
func agentView(v *pb.TaskView) *pb.TaskView {
	if v == nil {
		return nil
	}
	return &pb.TaskView{
		Corpus:   v.Corpus,
		TaskId:   v.TaskId,
		Split:    v.Split,
		Request:  v.Request,
		Evidence: v.Evidence,
		Database: &pb.DatabaseView{Id: v.GetDatabase().GetId(), Dialect: v.GetDatabase().GetDialect()},
	}
}

// tideView is the reset's task view under TIDE_F and TIDE_P: v with the
// database's schema reduced to its DDL (DDLOnly). TIDE's agent "receives
// the database DDL, the rewritten evidence … and the dialogue history"
// (TIDE-Bench Appendix D); the example rows the other protocols show
// (BIRD-Interact's schema carries them) are not part of it. v itself,
// shared by every protocol's resets and served by GetTask, is not
// changed: GetTask describes a task, not a protocol's episode, so it
// keeps the full schema.
func tideView(v *pb.TaskView) *pb.TaskView {
	db := v.GetDatabase()
	if db == nil {
		return v
	}
	out := &pb.TaskView{
		Corpus:   v.Corpus,
		TaskId:   v.TaskId,
		Split:    v.Split,
		Request:  v.Request,
		Evidence: v.Evidence,
		Database: &pb.DatabaseView{
			Id:             db.GetId(),
			Dialect:        db.GetDialect(),
			Schema:         DDLOnly(db.GetSchema()),
			ColumnMeanings: db.GetColumnMeanings(),
			Knowledge:      db.GetKnowledge(),
		},
	}
	return out
}

var (
	// exampleRowsStart is the second line of an example-rows comment block
	// of the derived schema (sqlexec/sqlite and sqlexec/postgres Schema:
	// "/*", "3 example rows from "t":", the header, the rows, "*/").
	exampleRowsStart = regexp.MustCompile(`^\d+ example rows? from .*:$`)
	// rowsNote is a one-line note of the derived schema in place of rows.
	rowsNote = regexp.MustCompile(`^/\* (.* has no rows|rows of .* cannot be read: .*) \*/$`)
	// firstRows opens BIRD-Interact's sample rows ("First 3 rows:", then a
	// header and the rows up to a blank line).
	firstRows = regexp.MustCompile(`^(?i:first \d+ rows?):\s*$`)
)

// DDLOnly returns schema text without its sample rows: the example-rows
// comment blocks and row notes of the derived schema (Engine.Schema with
// sample rows), and the "First N rows:" sections of BIRD-Interact's
// schema files, up to the blank line or CREATE statement that ends them.
// The CREATE statements are kept as written. The derived schema's
// example cells cannot end the comment early (their "*/" is written
// "* /"), so a block ends at its own "*/" line.
func DDLOnly(schema string) string {
	lines := strings.SplitAfter(schema, "\n")
	var b strings.Builder
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\r\n")
		switch {
		case l == "/*" && i+1 < len(lines) && exampleRowsStart.MatchString(strings.TrimRight(lines[i+1], "\r\n")):
			i = blockEnd(lines, i+1)
		case rowsNote.MatchString(l):
		case firstRows.MatchString(l):
			i = rowsEnd(lines, i)
		default:
			b.WriteString(lines[i])
		}
	}
	return b.String()
}

// blockEnd is the index of the "*/" line closing the comment block whose
// body starts at lines[i] (the last line when none closes it).
func blockEnd(lines []string, i int) int {
	for ; i < len(lines)-1; i++ {
		if strings.TrimRight(lines[i], "\r\n") == "*/" {
			return i
		}
	}
	return len(lines) - 1
}

// rowsEnd is the index of the last line of a "First N rows:" section
// opened at lines[i]: the line before the next blank line or CREATE.
func rowsEnd(lines []string, i int) int {
	for i+1 < len(lines) {
		next := strings.TrimSpace(lines[i+1])
		if next == "" || strings.HasPrefix(strings.ToUpper(next), "CREATE ") {
			break
		}
		i++
	}
	return i
}

// Summary builds a task's listing entry.
func Summary(t *corpus.Task) *pb.TaskSummary {
	n := int32(1)
	if t.FollowUp != nil {
		n = 2
	}
	return &pb.TaskSummary{Corpus: t.Corpus.Name, TaskId: t.ID, Split: t.Split, Database: t.DB.Spec.ID, Request: t.Request, Subtasks: n, SampleType: t.SampleType}
}

// resetPrivileged is the privileged data of a reset: the ambiguities with
// their resolutions and the reference.
func resetPrivileged(t *corpus.Task) *pb.Privileged {
	p := &pb.Privileged{AvtId: t.AVTID, Interpretation: t.Interpretation, ReferenceSql: t.Reference.SQL, Tide: tideInfo(t)}
	for i, a := range t.Ambiguities {
		p.Ambiguities = append(p.Ambiguities, &pb.AmbiguityInfo{
			Index:      int32(i),
			Term:       a.Term,
			Kind:       kindToProto(a.Kind),
			Counted:    a.Kind.Counted(),
			Resolution: a.Resolution,
			Aliases:    a.Aliases,
		})
	}
	return p
}

func kindToProto(k corpus.Kind) pb.AmbiguityKind {
	switch k {
	case corpus.Critical:
		return pb.AmbiguityKind_AMBIGUITY_KIND_CRITICAL
	case corpus.Knowledge:
		return pb.AmbiguityKind_AMBIGUITY_KIND_KNOWLEDGE
	case corpus.NonCritical:
		return pb.AmbiguityKind_AMBIGUITY_KIND_NON_CRITICAL
	}
	return pb.AmbiguityKind_AMBIGUITY_KIND_UNSPECIFIED
}
