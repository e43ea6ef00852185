// Package record is the one episode record (schema/episode.v1.json,
// docs/records.md) that every writer emits — eval, rollout, the server's
// episode log, reverify — and its spelling of the wire's enums. It depends
// on the wire contract only, so that the server and the clients share it.
package record

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	pb "avtgym/proto/avtgym/v1"

	"google.golang.org/protobuf/encoding/protojson"
)

// Episode is what one played episode comes to: a line of `avtgym rollout
// --episodes-out`, and, with eval's labels, of an evaluation run's
// episodes.jsonl. The reward's components are copied as the server
// reported them; a quantity PROTOCOL.md §6 leaves undefined is null.
//
// It is the one episode record (schema/episode.v1.json, docs/records.md):
// eval's episodes.jsonl, rollout's --episodes-out and serve's
// --episode-log write it, and the Python client's avtgym.records; Writer
// says which. The fields below Error are the schema's version 1 additions
// (the transcript, verdicts, tags, timings, the server); readers ignore
// fields they do not know.
type Episode struct {
	// Schema is Schema ("avtgym.episode/1").
	Schema string `json:"schema"`
	// Writer is what wrote the record: eval, rollout, serve, python, or
	// reverify (a replay of a saved record).
	Writer string `json:"writer,omitempty"`
	Corpus string `json:"corpus"`
	TaskID string `json:"task_id"`
	AVTID  string `json:"avt_id"`
	DB     string `json:"db,omitempty"`
	Split  string `json:"split,omitempty"`
	// EpisodeID names what was played (corpus/task/seed, Episode.episode_id);
	// EpisodeUID the one started episode (Episode.episode_uid: random,
	// drawn at reset). Two records with one uid are one episode: a retried
	// step, or a fork from one of its tokens.
	EpisodeID  string `json:"episode_id,omitempty"`
	EpisodeUID string `json:"episode_uid,omitempty"`
	Seed       uint64 `json:"seed"`
	GroupIndex int32  `json:"group_index"`
	// Status is TERMINATED, TRUNCATED or ERROR (the server's terminal
	// status), or, for an episode that could not be played, RPC_FAILED
	// (a call failed) or ASKER_FAILED (the policy itself failed, such as
	// the LLM asker's endpoint). Only TERMINATED and TRUNCATED are scored.
	Status string `json:"status"`
	// Counted is |Amb|, the task's counted ambiguities (from the privileged
	// field; 0 when the reset did not ask for it).
	Counted int `json:"counted"`
	// Questions are the questions asked, in order; Replies the oracle's
	// replies (and the environment's in the oracle's place), in order.
	Questions []string `json:"questions"`
	Replies   []string `json:"replies"`
	// CreditedTerms are the distinct counted terms credited over the
	// episode, in annotation order (privileged).
	CreditedTerms []string `json:"credited_terms"`
	// Reward is the reward's value; Precision, Recall, F1 and Success its
	// components precision, recall, question_f1 and outcome (F1 only when
	// the task has counted ambiguities, as PROTOCOL.md §6 defines it).
	Reward    *float64 `json:"reward"`
	Precision *float64 `json:"precision"`
	Recall    *float64 `json:"recall"`
	F1        *float64 `json:"f1"`
	Success   *float64 `json:"success"`
	// FallbackStop marks an episode that ended by a fallback STOP (the
	// policy's output could not be parsed): kept for the reward and SR,
	// omitted from recall and F1. FallbackSQL marks a placeholder SQL
	// submitted for unparsable output.
	FallbackStop bool `json:"fallback_stop,omitempty"`
	FallbackSQL  bool `json:"fallback_sql,omitempty"`
	// Protocol is the episode's protocol as `--protocol` names it
	// (ProtocolName), left out for AMBITAB so that its records read as
	// before.
	Protocol string `json:"protocol,omitempty"`
	// Under BIRD_C (and BIRD_A): Subtask is the last sub-task reached (2 when the
	// follow-up was released); Phase1 and Phase2 are the reward's
	// components phase1 (0.7, 0.5 after the debug retry, else 0) and
	// phase2 (0.3 / 0.2 / 0; null when the follow-up was never released);
	// TurnsUsed and TurnBudget are the turns spent and allowed (the one
	// added for the follow-up's SQL included).
	Subtask    int      `json:"subtask,omitempty"`
	Phase1     *float64 `json:"phase1,omitempty"`
	Phase2     *float64 `json:"phase2,omitempty"`
	TurnsUsed  int      `json:"turns_used,omitempty"`
	TurnBudget int      `json:"turn_budget,omitempty"`
	// Under BIRD_A (Subtask, Phase1 and Phase2 as under BIRD_C, Phase1 0.7
	// or 0, Phase2 0.3 or 0): CoinBudget and CoinsUsed are the coins
	// allowed and spent (thousandths exact); CoinsSpent the coins each
	// action type spent (by driver.ActionName: ask, submit_sql, execute,
	// get_schema, …; a free final submit spends 0) and Actions how many of
	// each the policy took.
	CoinBudget *float64           `json:"coin_budget,omitempty"`
	CoinsUsed  *float64           `json:"coins_used,omitempty"`
	CoinsSpent map[string]float64 `json:"coins_spent,omitempty"`
	Actions    map[string]int     `json:"actions,omitempty"`
	// Under TIDE_F and TIDE_P: SampleType, Cluster, DriftSubtype and
	// IntentSubtype are the task's TIDE labels (privileged, from the
	// reset); SQL1, SQL2, DriftRecognized, L1Identified, L2Identified and
	// Asked the reward's components sql1, sql2, drift_recognized,
	// l1_identified, l2_identified and asked (null where the task has no
	// such component: sql2 and drift_recognized without a drift, the
	// layers without a chain); SQLs the policy's SQL, in order; Routings
	// the chain routing of each question ("L1", "L2", "other").
	SampleType      string   `json:"sample_type,omitempty"`
	Cluster         string   `json:"cluster,omitempty"`
	DriftSubtype    string   `json:"drift_subtype,omitempty"`
	IntentSubtype   string   `json:"intent_subtype,omitempty"`
	SQL1            *float64 `json:"sql1,omitempty"`
	SQL2            *float64 `json:"sql2,omitempty"`
	DriftRecognized *float64 `json:"drift_recognized,omitempty"`
	L1Identified    *float64 `json:"l1_identified,omitempty"`
	L2Identified    *float64 `json:"l2_identified,omitempty"`
	Asked           *float64 `json:"asked,omitempty"`
	SQLs            []string `json:"sqls,omitempty"`
	Routings        []string `json:"routings,omitempty"`
	// Comparison is the comparison the episode's options chose
	// (EpisodeOptions.comparison, ComparisonName): "harness"
	// (COMPARISON_HARNESS, BIRD-Interact's ex_base exactly) or "sound" (the
	// server's default, also when the options leave it unset). It changes
	// the verification only on records whose comparison is BIRD-Interact's
	// default test (imported from BIRD-Interact); other records compare by
	// their own policy whatever it says. Empty in records written before
	// the option existed.
	Comparison string `json:"comparison,omitempty"`
	// Error explains an episode that could not be played or scored (for
	// ERROR, the server's reason when the reset was privileged).
	Error string `json:"error,omitempty"`

	// Tags are the trainer's tags of the reset (ResetRequest.tags).
	Tags map[string]string `json:"tags,omitempty"`
	// Options are the episode's options as names (Options).
	Options *Options `json:"options,omitempty"`
	// Components are the reward's components exactly as the server
	// reported them (the fields above interpret some of them).
	Components map[string]float64 `json:"components,omitempty"`
	// Turns are the dialogue in order, every role and kind, as the policy
	// was shown it (the request of a spec-randomized episode is the
	// donor's); an oracle turn carries its credits when the writer read
	// the privileged channel.
	Turns []Turn `json:"turns"`
	// Verdicts are the environment's answer to each SQL submitted, in
	// order.
	Verdicts []Verdict `json:"verdicts,omitempty"`
	// Privileged is the task's privileged data with the episode's credits
	// and the verifier's reason (avtgym.v1.Privileged in protojson), when
	// the writer was entitled to it and asked for it; absent otherwise.
	Privileged json.RawMessage `json:"privileged,omitempty"`
	// StartedAt and FinishedAt are when the writer saw the reset and the
	// last step (RFC 3339, UTC); DurationMS the time between.
	StartedAt  string  `json:"started_at,omitempty"`
	FinishedAt string  `json:"finished_at,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	// Server says which server and corpus played the episode, when the
	// writer knows.
	Server *ServerInfo `json:"server,omitempty"`
}

// Replayable is the record without what differs between two plays of the
// same episode by nature: the uid drawn at reset, the clock and the server
// build. Two deterministic plays (the same task, seed, options, policy and
// oracle) give equal Replayable records.
func (r Episode) Replayable() Episode {
	r.EpisodeUID, r.StartedAt, r.FinishedAt, r.DurationMS, r.Server = "", "", "", 0, nil
	return r
}

// Schema is the schema name every record carries: version 1 of
// schema/episode.v1.json.
const Schema = "avtgym.episode/1"

// Options are an episode's options as records spell them: lower-case
// enum names without their prefix (question_f1, client, deterministic, …).
// Empty means the server's default.
// With the record's protocol and comparison they are what a replay of the
// episode needs (ToOptions; avtgym reverify).
type Options struct {
	Reward              string `json:"reward,omitempty"`
	Solver              string `json:"solver,omitempty"`
	Oracle              string `json:"oracle,omitempty"`
	StrictCredit        bool   `json:"strict_credit,omitempty"`
	ExtraQuestions      *int32 `json:"extra_questions,omitempty"`
	ZeroAmbiguityBudget *int32 `json:"zero_ambiguity_budget,omitempty"`
	Patience            *int32 `json:"patience,omitempty"`
	FollowUpState       string `json:"follow_up_state,omitempty"`
	BirdVariant         string `json:"bird_variant,omitempty"`
}

// ToOptions is the inverse of OptionsOf, with the record's protocol and
// comparison: the options to reset the same episode with. A name no enum
// holds is an error naming the field.
func (r *Episode) ToOptions() (*pb.EpisodeOptions, error) {
	o := &pb.EpisodeOptions{}
	if r.Protocol != "" {
		p, err := ParseProtocol(r.Protocol)
		if err != nil {
			return nil, err
		}
		o.Protocol = p
	}
	if r.Comparison != "" {
		c, err := ParseComparison(r.Comparison)
		if err != nil {
			return nil, err
		}
		o.Comparison = c
	}
	ro := r.Options
	if ro == nil {
		return o, nil
	}
	enum := func(field, name, prefix string, values map[string]int32) (int32, error) {
		if name == "" {
			return 0, nil
		}
		v, ok := values[prefix+strings.ToUpper(name)]
		if !ok {
			return 0, fmt.Errorf("options.%s: unknown value %q", field, name)
		}
		return v, nil
	}
	var err error
	var v int32
	if v, err = enum("reward", ro.Reward, "REWARD_TYPE_", pb.RewardType_value); err != nil {
		return nil, err
	}
	o.Reward = pb.RewardType(v)
	if v, err = enum("solver", ro.Solver, "SOLVER_", pb.Solver_value); err != nil {
		return nil, err
	}
	o.Solver = pb.Solver(v)
	if v, err = enum("oracle", ro.Oracle, "ORACLE_TYPE_", pb.OracleType_value); err != nil {
		return nil, err
	}
	o.Oracle = pb.OracleType(v)
	if v, err = enum("follow_up_state", ro.FollowUpState, "FOLLOW_UP_STATE_", pb.FollowUpState_value); err != nil {
		return nil, err
	}
	o.FollowUpState = pb.FollowUpState(v)
	if v, err = enum("bird_variant", ro.BirdVariant, "BIRD_VARIANT_", pb.BirdVariant_value); err != nil {
		return nil, err
	}
	o.BirdVariant = pb.BirdVariant(v)
	o.StrictCredit = ro.StrictCredit
	o.ExtraQuestions, o.ZeroAmbiguityBudget, o.Patience = ro.ExtraQuestions, ro.ZeroAmbiguityBudget, ro.Patience
	return o, nil
}

// Turn is one turn of a recorded dialogue.
type Turn struct {
	// Role is policy, oracle, environment or prefilled; Kind request,
	// question, reply, stop, sql, feedback, notice, refusal, unparsed,
	// tool_call, tool_result or drift ("" where the writer does not know:
	// serve's oracle turns before the last step).
	Role string `json:"role"`
	Kind string `json:"kind,omitempty"`
	Text string `json:"text"`
	// Credits are the terms the question before this reply was credited
	// with (privileged; oracle turns only).
	Credits []Credit `json:"credits,omitempty"`
}

// Credit is one credited ambiguity.
type Credit struct {
	Index   int32  `json:"index"`
	Term    string `json:"term"`
	Counted bool   `json:"counted"`
}

// Verdict is the environment's answer to one submitted SQL: the feedback
// turns the policy was shown after it, and the verifier's reason
// (privileged: it may describe the reference).
type Verdict struct {
	SQL      string `json:"sql"`
	Feedback string `json:"feedback,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ServerInfo names the server build and the corpus content
// (ListCorporaResponse.server_version, CorpusInfo.content_hash).
type ServerInfo struct {
	Version    string `json:"version,omitempty"`
	CorpusHash string `json:"corpus_hash,omitempty"`
}

// EnumName is a proto enum value's record spelling: its name without the
// type's prefix, in lower case (ROLE_POLICY → "policy"); "" for the zero
// value.
func EnumName(name, prefix string) string {
	if strings.HasSuffix(name, "_UNSPECIFIED") {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// OptionsOf spells an episode's options for a record.
func OptionsOf(o *pb.EpisodeOptions) *Options {
	return &Options{
		Reward:              EnumName(o.GetReward().String(), "REWARD_TYPE_"),
		Solver:              EnumName(o.GetSolver().String(), "SOLVER_"),
		Oracle:              EnumName(o.GetOracle().String(), "ORACLE_TYPE_"),
		StrictCredit:        o.GetStrictCredit(),
		ExtraQuestions:      optionalInt(o != nil && o.ExtraQuestions != nil, o.GetExtraQuestions()),
		ZeroAmbiguityBudget: optionalInt(o != nil && o.ZeroAmbiguityBudget != nil, o.GetZeroAmbiguityBudget()),
		Patience:            optionalInt(o != nil && o.Patience != nil, o.GetPatience()),
		FollowUpState:       EnumName(o.GetFollowUpState().String(), "FOLLOW_UP_STATE_"),
		BirdVariant:         EnumName(o.GetBirdVariant().String(), "BIRD_VARIANT_"),
	}
}

func optionalInt(set bool, v int32) *int32 {
	if !set {
		return nil
	}
	return &v
}

// TurnOf spells one turn for a record.
func TurnOf(t *pb.Turn, credits []*pb.Credit) Turn {
	rt := Turn{Role: EnumName(t.GetRole().String(), "ROLE_"), Kind: EnumName(t.GetKind().String(), "TURN_KIND_"), Text: t.GetText()}
	rt.Credits = CreditsOf(credits)
	return rt
}

// CreditsOf spells credits for a record (nil for none).
func CreditsOf(cs []*pb.Credit) []Credit {
	var out []Credit
	for _, c := range cs {
		out = append(out, Credit{Index: c.GetIndex(), Term: c.GetTerm(), Counted: c.GetCounted()})
	}
	return out
}

// privilegedJSON writes privileged data for a record: every field, with the
// proto's names.
var privilegedJSON = protojson.MarshalOptions{UseProtoNames: true}

// PrivilegedJSON is p in the record's spelling (nil for nil).
func PrivilegedJSON(p *pb.Privileged) json.RawMessage {
	if p == nil {
		return nil
	}
	b, err := privilegedJSON.Marshal(p)
	if err != nil {
		return nil // unreachable: a proto message always marshals
	}
	return b
}

// Scored reports whether the episode counts in metrics.
func (r *Episode) Scored() bool { return r.Status == "TERMINATED" || r.Status == "TRUNCATED" }

// SetReward copies a final reward into the record: its value, its
// components as reported, and the components the record names (F1 and
// recall only when the task has counted ambiguities: set Counted first).
// A nil reward (an ERROR episode) leaves them null.
func (r *Episode) SetReward(rw *pb.Reward) {
	if rw == nil {
		return
	}
	v := rw.GetValue()
	r.Reward = &v
	if len(rw.GetComponents()) > 0 {
		r.Components = maps.Clone(rw.GetComponents())
	}
	get := func(k string) *float64 {
		if x, ok := rw.GetComponents()[k]; ok {
			return &x
		}
		return nil
	}
	r.Precision, r.Recall, r.Success = get("precision"), get("recall"), get("outcome")
	r.Phase1, r.Phase2 = get("phase1"), get("phase2")
	r.SQL1, r.SQL2, r.DriftRecognized = get("sql1"), get("sql2"), get("drift_recognized")
	r.L1Identified, r.L2Identified, r.Asked = get("l1_identified"), get("l2_identified"), get("asked")
	if r.Counted > 0 {
		r.F1 = get("question_f1")
	} else {
		r.Recall = nil
	}
}

// StatusName is a terminal status's record spelling: TERMINATED, TRUNCATED,
// ERROR (RUNNING for an episode not done).
func StatusName(s pb.EpisodeStatus) string {
	return strings.TrimPrefix(s.String(), "EPISODE_STATUS_")
}

// TideLabels fills the record's TIDE labels from a task's TIDE info.
func (r *Episode) TideLabels(ti *pb.TideInfo) {
	if ti != nil {
		r.SampleType, r.Cluster, r.DriftSubtype, r.IntentSubtype = SampleTypeLabel(ti), ti.GetCluster(), DriftSubtypeLabel(ti), ti.GetIntentSubtype()
	}
}

// ProtocolName is a protocol's name as `--protocol` spells it: ambitab,
// bird-c, bird-a, tide-f or tide-p (UNSPECIFIED is AMBITAB, the default).
func ProtocolName(p pb.Protocol) string {
	if p == pb.Protocol_PROTOCOL_UNSPECIFIED {
		p = pb.Protocol_PROTOCOL_AMBITAB
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(p.String(), "PROTOCOL_")), "_", "-")
}

// ParseProtocol maps a `--protocol` name (ambitab, bird-c, bird-a, tide-f,
// tide-p; case and "_" for "-" tolerated) to its protocol. Whether the
// server serves it is the server's to say.
func ParseProtocol(s string) (pb.Protocol, error) {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	v, ok := pb.Protocol_value["PROTOCOL_"+name]
	if !ok || v == 0 {
		return 0, fmt.Errorf("unknown protocol %q (want ambitab, bird-c, bird-a, tide-f or tide-p)", s)
	}
	return pb.Protocol(v), nil
}

// ComparisonName is a comparison's name as `avtgym eval --comparison` and
// the records spell it: "sound" or "harness" (UNSPECIFIED is the server's
// default, SOUND).
func ComparisonName(c pb.Comparison) string {
	if c == pb.Comparison_COMPARISON_UNSPECIFIED {
		c = pb.Comparison_COMPARISON_SOUND
	}
	return strings.ToLower(strings.TrimPrefix(c.String(), "COMPARISON_"))
}

// ParseComparison maps a comparison name (sound or harness, case
// tolerated) to its enum value.
func ParseComparison(s string) (pb.Comparison, error) {
	v, ok := pb.Comparison_value["COMPARISON_"+strings.ToUpper(strings.TrimSpace(s))]
	if !ok || v == 0 {
		return 0, fmt.Errorf("unknown comparison %q (want sound or harness)", s)
	}
	return pb.Comparison(v), nil
}

// ServerInfoFor asks the server which build it is and the content hash of
// corpus ("" for its first), for the records of a run; nil when it cannot
// say (an older server, or a failed call: the records then go without).
func ServerInfoFor(ctx context.Context, c pb.EnvServiceClient, corpus string) *ServerInfo {
	resp, err := c.ListCorpora(ctx, &pb.ListCorporaRequest{})
	if err != nil {
		return nil
	}
	info := &ServerInfo{Version: resp.GetServerVersion()}
	for i, ci := range resp.GetCorpora() {
		if ci.GetName() == corpus || corpus == "" && i == 0 {
			info.CorpusHash = ci.GetContentHash()
		}
	}
	if info.Version == "" && info.CorpusHash == "" {
		return nil
	}
	return info
}

// SampleTypeLabel is TideInfo's sample type, from its enum (the string for
// an older server).
func SampleTypeLabel(ti *pb.TideInfo) string {
	switch ti.GetSampleTypeEnum() {
	case pb.SampleType_SAMPLE_TYPE_CHAIN_ONLY:
		return "chain_only"
	case pb.SampleType_SAMPLE_TYPE_DRIFT_ONLY:
		return "drift_only"
	case pb.SampleType_SAMPLE_TYPE_JOINT:
		return "joint"
	}
	return ti.GetSampleType()
}

// DriftSubtypeLabel is TideInfo's drift subtype, from its enum (the string
// for an older server).
func DriftSubtypeLabel(ti *pb.TideInfo) string {
	switch ti.GetDriftSubtypeEnum() {
	case pb.DriftSubtype_DRIFT_SUBTYPE_VALUE:
		return "value"
	case pb.DriftSubtype_DRIFT_SUBTYPE_CONSTRAINT:
		return "constraint"
	case pb.DriftSubtype_DRIFT_SUBTYPE_PROJECTION:
		return "projection"
	}
	return ti.GetDriftSubtype()
}
