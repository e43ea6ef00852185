package env

import (
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
