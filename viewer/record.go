package viewer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"

	"google.golang.org/protobuf/encoding/protojson"
)

// FullRecord is one episode record as any writer writes it: the driver's
// record with the fields eval (condition, oracle, …) and serve's episode
// log (key, replica, principal, …) add.
type FullRecord struct {
	driver.Record
	Condition          string `json:"condition,omitempty"`
	Oracle             string `json:"oracle,omitempty"`
	Donor              string `json:"donor,omitempty"`
	UnreadableOracle   int    `json:"unreadable_oracle,omitempty"`
	UnreadableSolver   int    `json:"unreadable_solver,omitempty"`
	Key                string `json:"key,omitempty"`
	Replica            string `json:"replica,omitempty"`
	Principal          string `json:"principal,omitempty"`
	QuestionBudget     *int32 `json:"question_budget,omitempty"`
	QuestionsAttempted *int32 `json:"questions_attempted,omitempty"`
	SolutionSQL        string `json:"solution_sql,omitempty"`
	Verified           *bool  `json:"verified,omitempty"`
	Outcome            *bool  `json:"outcome,omitempty"`
}

// turnView is one transcript turn as the episode page shows it.
type turnView struct {
	Index     int
	Role      string
	Kind      string
	Text      string
	Trainable bool // a trainer's loss mask: only the policy's own turns
}

// questionCredit is one question with the oracle's reply and what the
// matcher credited it with (privileged).
type questionCredit struct {
	N        int
	Question string
	Reply    string
	Credits  []driver.RecordCredit
	Routing  string
}

// verdictView is one submitted SQL beside the reference.
type verdictView struct {
	N                     int
	SQL, Feedback, Reason string
	Reference             string
	ReferenceLabel        string
	HasReference, HasPriv bool
}

// labelled is one name–value row of a details table.
type labelled struct{ Name, Value string }

// episodeView is everything the episode page renders.
type episodeView struct {
	Run        *Run
	N          int
	Summary    *Summary
	Rec        *FullRecord
	File       string
	Identity   []labelled
	Scores     []labelled
	Components []labelled
	Extra      []labelled
	Turns      []turnView
	Trainable  int
	Verdicts   []verdictView
	// Privileged is the record's privileged data parsed as
	// avtgym.v1.Privileged (nil when absent or unparsable: PrivRaw then
	// holds it as indented JSON).
	Privileged      *pb.Privileged
	HasPrivileged   bool
	PrivRaw         string
	PrivErr         string
	Ambiguities     []*pb.AmbiguityInfo
	QuestionCredits []questionCredit
	ReferenceSQL    string
	Tags            []Tag
	Prev, Next      string
	RawURL          string
}

func buildEpisodeView(run *Run, n int, rec *FullRecord) *episodeView {
	s := &run.Episodes[n-1]
	v := &episodeView{Run: run, N: n, Summary: s, Rec: rec, File: fmt.Sprintf("%s:%d", run.Files[s.File], s.Line), Tags: s.Tags}
	add := func(list *[]labelled, name, value string) {
		if value != "" {
			*list = append(*list, labelled{name, value})
		}
	}
	r := &rec.Record
	add(&v.Identity, "task", r.TaskID)
	add(&v.Identity, "AVT", r.AVTID)
	add(&v.Identity, "corpus", r.Corpus)
	add(&v.Identity, "database", r.DB)
	add(&v.Identity, "split", r.Split)
	add(&v.Identity, "seed", fmt.Sprint(r.Seed))
	add(&v.Identity, "group index", fmt.Sprint(r.GroupIndex))
	add(&v.Identity, "protocol", protocolLabel(r.Protocol))
	add(&v.Identity, "condition", rec.Condition)
	add(&v.Identity, "oracle", rec.Oracle)
	add(&v.Identity, "donor", rec.Donor)
	add(&v.Identity, "writer", r.Writer)
	add(&v.Identity, "episode id", r.EpisodeID)
	add(&v.Identity, "episode uid", r.EpisodeUID)
	add(&v.Identity, "key", rec.Key)
	add(&v.Identity, "replica", rec.Replica)
	add(&v.Identity, "principal", rec.Principal)
	add(&v.Identity, "comparison", r.Comparison)
	if o := r.Options; o != nil {
		var parts []string
		for _, kv := range [][2]string{{"reward", o.Reward}, {"solver", o.Solver}, {"oracle", o.Oracle}, {"follow_up_state", o.FollowUpState}, {"bird_variant", o.BirdVariant}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+"="+kv[1])
			}
		}
		if o.StrictCredit {
			parts = append(parts, "strict_credit")
		}
		for _, kv := range []struct {
			name string
			v    *int32
		}{{"extra_questions", o.ExtraQuestions}, {"zero_ambiguity_budget", o.ZeroAmbiguityBudget}, {"patience", o.Patience}} {
			if kv.v != nil {
				parts = append(parts, fmt.Sprintf("%s=%d", kv.name, *kv.v))
			}
		}
		add(&v.Identity, "options", strings.Join(parts, ", "))
	}
	add(&v.Identity, "started", r.StartedAt)
	add(&v.Identity, "finished", r.FinishedAt)
	if r.DurationMS > 0 {
		add(&v.Identity, "duration", fmt.Sprintf("%.1f ms", r.DurationMS))
	}
	if sv := r.Server; sv != nil {
		add(&v.Identity, "server version", sv.Version)
		add(&v.Identity, "corpus hash", sv.CorpusHash)
	}

	add(&v.Scores, "status", r.Status)
	add(&v.Scores, "reward", fmtPtr(r.Reward))
	add(&v.Scores, "precision", fmtPtr(r.Precision))
	add(&v.Scores, "recall", fmtPtr(r.Recall))
	add(&v.Scores, "F1", fmtPtr(r.F1))
	add(&v.Scores, "success (SR)", fmtPtr(r.Success))
	add(&v.Scores, "counted ambiguities", fmt.Sprint(r.Counted))
	add(&v.Scores, "questions", fmt.Sprint(len(r.Questions)))
	if len(r.CreditedTerms) > 0 {
		add(&v.Scores, "credited terms", strings.Join(r.CreditedTerms, ", "))
	}
	if r.FallbackStop {
		add(&v.Scores, "fallback stop", "yes (unparsable output; omitted from recall and F1)")
	}
	if r.FallbackSQL {
		add(&v.Scores, "fallback SQL", "yes (a placeholder was submitted for unparsable output)")
	}
	if r.Subtask != 0 {
		add(&v.Scores, "subtask", fmt.Sprint(r.Subtask))
	}
	for _, kv := range []struct {
		name string
		v    *float64
	}{{"phase 1", r.Phase1}, {"phase 2", r.Phase2}, {"coin budget", r.CoinBudget}, {"coins used", r.CoinsUsed},
		{"sql1", r.SQL1}, {"sql2", r.SQL2}, {"drift recognized", r.DriftRecognized}, {"L1 identified", r.L1Identified},
		{"L2 identified", r.L2Identified}, {"asked", r.Asked}} {
		if kv.v != nil {
			add(&v.Scores, kv.name, fmtPtr(kv.v))
		}
	}
	if r.TurnBudget != 0 {
		add(&v.Scores, "turns used / budget", fmt.Sprintf("%d / %d", r.TurnsUsed, r.TurnBudget))
	}
	if rec.QuestionBudget != nil {
		add(&v.Scores, "question budget", fmt.Sprint(*rec.QuestionBudget))
	}
	if rec.QuestionsAttempted != nil {
		add(&v.Scores, "questions attempted", fmt.Sprint(*rec.QuestionsAttempted))
	}
	if rec.Verified != nil {
		add(&v.Scores, "verified", fmt.Sprint(*rec.Verified))
	}
	if rec.Outcome != nil {
		add(&v.Scores, "outcome", fmt.Sprint(*rec.Outcome))
	}
	if rec.UnreadableOracle > 0 {
		add(&v.Scores, "unreadable oracle outputs", fmt.Sprint(rec.UnreadableOracle))
	}
	if rec.UnreadableSolver > 0 {
		add(&v.Scores, "unreadable solver output", fmt.Sprint(rec.UnreadableSolver))
	}
	add(&v.Scores, "error", r.Error)
	for _, k := range sortedKeys(r.Components) {
		v.Components = append(v.Components, labelled{k, fmtFloat(r.Components[k])})
	}
	for _, k := range sortedKeys(r.CoinsSpent) {
		add(&v.Extra, "coins spent: "+k, fmtFloat(r.CoinsSpent[k]))
	}
	for _, k := range sortedKeys(r.Actions) {
		add(&v.Extra, "actions: "+k, fmt.Sprint(r.Actions[k]))
	}
	for _, kv := range [][2]string{{"sample type", r.SampleType}, {"cluster", r.Cluster}, {"drift subtype", r.DriftSubtype}, {"intent subtype", r.IntentSubtype}} {
		add(&v.Extra, kv[0], kv[1])
	}
	add(&v.Extra, "solution SQL (serve)", rec.SolutionSQL)

	for i, t := range r.Turns {
		tv := turnView{Index: i + 1, Role: t.Role, Kind: t.Kind, Text: t.Text, Trainable: t.Role == "policy"}
		if tv.Trainable {
			v.Trainable++
		}
		v.Turns = append(v.Turns, tv)
	}

	v.HasPrivileged = len(r.Privileged) > 0 && !bytes.Equal(bytes.TrimSpace(r.Privileged), []byte("null"))
	if v.HasPrivileged {
		var p pb.Privileged
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r.Privileged, &p); err != nil {
			v.PrivErr = err.Error()
		} else {
			v.Privileged = &p
			v.Ambiguities = p.GetAmbiguities()
			v.ReferenceSQL = strings.Join(p.GetReferenceSql(), "\n\n")
		}
		var ind bytes.Buffer
		if json.Indent(&ind, r.Privileged, "", "  ") == nil {
			v.PrivRaw = ind.String()
		}
		v.QuestionCredits = questionCredits(r)
	}
	for i, vd := range r.Verdicts {
		vv := verdictView{N: i + 1, SQL: vd.SQL, Feedback: vd.Feedback, Reason: vd.Reason, HasPriv: v.HasPrivileged}
		if v.Privileged != nil {
			vv.Reference, vv.ReferenceLabel = v.ReferenceSQL, "reference SQL"
			// BIRD's follow-up is scored against its own reference: the
			// verdicts after the first belong to it when one was released.
			if fu := v.Privileged.GetFollowUpReferenceSql(); len(fu) > 0 && i > 0 {
				vv.Reference, vv.ReferenceLabel = strings.Join(fu, "\n\n"), "follow-up reference SQL"
			}
			vv.HasReference = vv.Reference != ""
		}
		v.Verdicts = append(v.Verdicts, vv)
	}
	if n > 1 {
		v.Prev = episodeURL(run.Name, n-1)
	}
	if n < len(run.Episodes) {
		v.Next = episodeURL(run.Name, n+1)
	}
	v.RawURL = episodeURL(run.Name, n) + "/raw"
	return v
}

// questionCredits pairs each question with the reply after it and that
// reply's credits (the oracle turn carries them), and with the TIDE
// routing of the question in the same order.
func questionCredits(r *driver.Record) []questionCredit {
	var out []questionCredit
	open := -1
	for _, t := range r.Turns {
		switch {
		case t.Role == "policy" && t.Kind == "question":
			out = append(out, questionCredit{N: len(out) + 1, Question: t.Text})
			open = len(out) - 1
		case open >= 0 && (t.Role == "oracle" || t.Role == "environment" && t.Kind == "reply"):
			out[open].Reply, out[open].Credits = t.Text, t.Credits
			open = -1
		case t.Role == "policy":
			open = -1
		}
	}
	for i := range out {
		if i < len(r.Routings) {
			out[i].Routing = r.Routings[i]
		}
	}
	return out
}

func protocolLabel(p string) string {
	if p == "" {
		return "ambitab"
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fmtFloat writes a score: up to four decimals, no trailing zeros.
func fmtFloat(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	s := fmt.Sprintf("%.4f", x)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmtFloat(*p)
}
