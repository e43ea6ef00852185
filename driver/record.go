package driver

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "avtgym/proto/avtgym/v1"
	"avtgym/record"
)

// The episode record lives in package record, which the server's episode
// log shares; these names keep the driver's callers as they were.
type (
	// Record is what one played episode comes to (record.Episode).
	Record = record.Episode
	// RecordOptions, RecordTurn, RecordCredit, Verdict and ServerInfo are
	// the record's parts.
	RecordOptions = record.Options
	RecordTurn    = record.Turn
	RecordCredit  = record.Credit
	Verdict       = record.Verdict
	ServerInfo    = record.ServerInfo
)

// RecordSchema is the schema name every record carries (record.Schema).
const RecordSchema = record.Schema

// The record's spellings of the wire's enums, and its helpers.
var (
	ProtocolName    = record.ProtocolName
	ParseProtocol   = record.ParseProtocol
	ComparisonName  = record.ComparisonName
	ParseComparison = record.ParseComparison
	StatusName      = record.StatusName
	EnumName        = record.EnumName
	OptionsOf       = record.OptionsOf
	TurnOf          = record.TurnOf
	CreditsOf       = record.CreditsOf
	PrivilegedJSON  = record.PrivilegedJSON
	ServerInfoFor   = record.ServerInfoFor
)

// noteForRecord keeps what a step tells the record beyond its turns: the
// credits of its oracle reply, the verdict on its SQL, and the end.
func (e *Episode) noteForRecord(first int, resp *pb.StepResponse) {
	priv := resp.GetPrivileged()
	turns := resp.GetObservation().GetTurns()
	for i, t := range turns {
		switch {
		case t.GetRole() == pb.Role_ROLE_ORACLE && len(priv.GetCredits()) > 0:
			if e.credits == nil {
				e.credits = map[int][]*pb.Credit{}
			}
			e.credits[first+i] = priv.GetCredits()
		case t.GetRole() == pb.Role_ROLE_POLICY && t.GetKind() == pb.TurnKind_TURN_KIND_SQL:
			v := Verdict{SQL: t.GetText(), Reason: priv.GetVerifierReason()}
			var fb []string
			for _, u := range turns[i+1:] {
				if u.GetRole() == pb.Role_ROLE_POLICY {
					break
				}
				if k := u.GetKind(); k == pb.TurnKind_TURN_KIND_FEEDBACK || k == pb.TurnKind_TURN_KIND_NOTICE {
					fb = append(fb, u.GetText())
				}
			}
			v.Feedback = strings.Join(fb, "\n")
			e.verdicts = append(e.verdicts, v)
		}
	}
	if resp.GetDone() && e.finished.IsZero() {
		e.finished = time.Now()
	}
}

// Record sums the episode up. An episode that has not ended gets status
// RPC_FAILED with err's text (or "the episode did not end"); err, when
// set, is the error that stopped the play.
func (e *Episode) Record(err error) *Record {
	obs := e.reset.GetObservation()
	r := &Record{
		Corpus: obs.GetTask().GetCorpus(), TaskID: obs.GetTask().GetTaskId(), DB: obs.GetTask().GetDatabase().GetId(), Split: obs.GetTask().GetSplit(),
		EpisodeID: e.reset.GetEpisodeId(), Seed: e.reset.GetSeed(),
		Questions: nonNil(e.questions), Replies: nonNil(e.replies), CreditedTerms: []string{},
		FallbackStop: e.FallbackStop, FallbackSQL: e.FallbackSQL,
		Comparison: ComparisonName(e.opts.GetComparison()),
		Schema:     RecordSchema, EpisodeUID: e.reset.GetEpisodeUid(), GroupIndex: e.reset.GetGroupIndex(),
		Tags: e.tags, Options: OptionsOf(e.opts), Verdicts: slices.Clone(e.verdicts),
		StartedAt: e.started.UTC().Format(time.RFC3339Nano),
	}
	r.Turns = make([]RecordTurn, len(e.turns))
	for i, t := range e.turns {
		r.Turns[i] = TurnOf(t, e.credits[i])
	}
	if !e.finished.IsZero() {
		r.FinishedAt = e.finished.UTC().Format(time.RFC3339Nano)
		r.DurationMS = float64(e.finished.Sub(e.started).Microseconds()) / 1000
	}
	if priv := e.reset.GetPrivileged(); priv != nil {
		p := proto.CloneOf(priv)
		if last := e.last.GetPrivileged(); last != nil {
			p.EpisodeCredits, p.VerifierReason = last.GetEpisodeCredits(), last.GetVerifierReason()
		}
		if len(e.followUpSQL) > 0 {
			p.FollowUpReferenceSql = e.followUpSQL
		}
		r.Privileged = PrivilegedJSON(p)
	}
	if p := e.Protocol(); p != pb.Protocol_PROTOCOL_AMBITAB {
		r.Protocol = ProtocolName(p)
	}
	if IsBird(e.Protocol()) {
		r.Subtask = e.subtask
		if b := e.allowance; b != nil && b.GetUnit() == pb.BudgetUnit_BUDGET_UNIT_TURNS {
			r.TurnsUsed, r.TurnBudget = int(b.GetUsedMilli()/1000), int(b.GetTotalMilli()/1000)
		}
	}
	if IsTide(e.Protocol()) {
		if b := e.allowance; b != nil && b.GetUnit() == pb.BudgetUnit_BUDGET_UNIT_TURNS {
			r.TurnsUsed, r.TurnBudget = int(b.GetUsedMilli()/1000), int(b.GetTotalMilli()/1000)
		}
		r.Subtask = e.subtask
		r.TideLabels(e.Tide())
		r.SQLs, r.Routings = slices.Clone(e.sqls), slices.Clone(e.routings)
	}
	if e.Protocol() == pb.Protocol_PROTOCOL_BIRD_A {
		if e.Coins() {
			total, used := e.CoinBudget()
			r.CoinBudget, r.CoinsUsed = &total, &used
		}
		r.CoinsSpent, r.Actions = e.CoinsSpent(), e.ActionCounts()
		if r.Actions == nil {
			r.Actions = map[string]int{}
		}
	}
	priv := e.reset.GetPrivileged()
	r.AVTID = priv.GetAvtId()
	if r.AVTID == "" {
		r.AVTID = r.TaskID
	}
	for _, a := range priv.GetAmbiguities() {
		if a.GetCounted() {
			r.Counted++
		}
	}
	switch {
	case err != nil:
		r.Status, r.Error = "RPC_FAILED", err.Error()
		return r
	case !e.Done():
		r.Status, r.Error = "RPC_FAILED", "the episode did not end (phase "+e.phase.String()+")"
		return r
	}
	last := e.last
	r.Status = statusName(last.GetStatus())
	if r.Status == "ERROR" {
		// The server says why only on the privileged channel (the reason
		// may describe the reference).
		r.Error = last.GetPrivileged().GetVerifierReason()
		if r.Error == "" {
			r.Error = "the environment failed (reset with the privileged channel for the reason)"
		}
	}
	for _, c := range last.GetPrivileged().GetEpisodeCredits() {
		if c.GetCounted() && !slices.Contains(r.CreditedTerms, c.GetTerm()) {
			r.CreditedTerms = append(r.CreditedTerms, c.GetTerm())
		}
	}
	r.SetReward(last.GetReward())
	return r
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}
