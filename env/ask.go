package env

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// Bounds of an OracleService request's dialogue, checked before any work.
const (
	// MaxHistoryTurns bounds the turns of AskRequest.history: the largest
	// question budget of an episode, corpus.MaxAmbiguities counted
	// ambiguities plus the most extra questions (maxExtraQuestions), so
	// that any episode's dialogue can be replayed.
	MaxHistoryTurns = corpus.MaxAmbiguities + maxExtraQuestions
	// maxHistoryReplyBytes bounds each reply of AskRequest.history (a
	// question is bounded by maxQuestionBytes, like an episode's). It is at
	// least the longest reply an oracle gives (the LLM client's default
	// reply limit, llm.DefaultMaxReplyBytes, and the episode's own cap on
	// replies), so that any episode's dialogue can be replayed.
	maxHistoryReplyBytes = 16 << 10
)

// Ask answers one question outside any episode (OracleService): the task
// is named by id, or by AVT id and interpretation label (the request's
// task oneof). It keeps no state;
// the caller sends the dialogue so far. The question (non-empty, at most
// maxQuestionBytes) and the history (at most MaxHistoryTurns turns, each
// question at most maxQuestionBytes and each reply at most
// maxHistoryReplyBytes, all valid UTF-8) are checked first:
// INVALID_ARGUMENT naming the field ("history[3].reply"). Unlike in an
// episode, where a malformed question is the policy's scored turn, a
// malformed request here is the caller's error. strict_credit applies the
// strict-credit rule (oracle.StrictMatch) to the question, and for a
// record with chains to the recomputed credits of the history.
func (e *Env) Ask(ctx context.Context, req *pb.AskRequest) (*pb.AskResponse, error) {
	if err := checkAskText("question", req.GetQuestion(), maxQuestionBytes, false); err != nil {
		return nil, err
	}
	if err := checkHistory(req.GetHistory()); err != nil {
		return nil, err
	}
	t, err := e.askTask(req)
	if err != nil {
		return nil, err
	}
	kind := req.GetOracle()
	if kind == pb.OracleType_ORACLE_TYPE_UNSPECIFIED {
		kind = pb.OracleType_ORACLE_TYPE_DETERMINISTIC
	}
	o := e.cfg.Oracles[kind]
	if o == nil {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "oracle", "oracle %s is not available on this server", kind)
	}
	history := make([]oracle.Turn, len(req.GetHistory()))
	for i, h := range req.GetHistory() {
		history[i] = oracle.Turn{Question: h.GetQuestion(), Reply: h.GetReply()}
	}
	// The dialogue carries no credits: a record whose matcher reads them
	// (chains) has them recomputed from the questions.
	reply, err := o.AskWith(ctx, t.Record, history, req.GetQuestion(), oracle.AskOptions{StrictCredit: req.GetStrictCredit(), CreditHistory: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, oracle.ErrRecordTooLong) {
			// Retrying cannot help: the record does not fit the model.
			return nil, errorf(Internal, ReasonOracleFailed, "", "the oracle failed: %v", err)
		}
		return nil, errorf(Unavailable, ReasonOracleFailed, "", "the oracle failed: %v", err)
	}
	resp := &pb.AskResponse{Reply: reply.Text, Refused: reply.Refused}
	if req.GetIncludePrivileged() {
		var mask uint64
		for _, c := range reply.Credits {
			if c >= 0 && c < len(t.Ambiguities) && c < corpus.MaxAmbiguities {
				mask |= 1 << c
			}
		}
		ep := &episode{task: t}
		resp.Privileged = &pb.AskPrivileged{Credits: ep.credits(mask), OracleAction: reply.PrivilegedAction()}
	}
	return resp, nil
}

// askTask resolves the request's task oneof: a task id, or an AVT id and
// interpretation label.
func (e *Env) askTask(req *pb.AskRequest) (*corpus.Task, error) {
	switch k := req.GetTask().(type) {
	case *pb.AskRequest_TaskId:
		if k.TaskId == "" {
			return nil, errorf(InvalidArgument, ReasonInvalidAction, "task_id", "is empty")
		}
		return e.Task(req.GetCorpus(), k.TaskId)
	case *pb.AskRequest_Interpretation:
		in := k.Interpretation
		if in.GetAvtId() == "" {
			return nil, errorf(InvalidArgument, ReasonInvalidAction, "interpretation.avt_id", "is empty")
		}
		c, err := e.Corpus(req.GetCorpus())
		if err != nil {
			return nil, err
		}
		for _, t := range c.Interpretations(in.GetAvtId()) {
			if t.Interpretation == in.GetLabel() {
				return t, nil
			}
		}
		return nil, errorf(NotFound, ReasonUnknownTask, "interpretation.label", "corpus %q has no AVT %q with interpretation %q", c.Name, in.GetAvtId(), in.GetLabel())
	}
	return nil, errorf(InvalidArgument, ReasonInvalidAction, "task_id", "name the task by task_id, or by interpretation (avt_id and label)")
}

// checkHistory checks an AskRequest's dialogue against the bounds above.
func checkHistory(h []*pb.DialogueTurn) error {
	if len(h) > MaxHistoryTurns {
		return errorf(InvalidArgument, ReasonInvalidAction, "history", "has %d turns, more than %d", len(h), MaxHistoryTurns)
	}
	for i, turn := range h {
		if err := checkAskText(fmt.Sprintf("history[%d].question", i), turn.GetQuestion(), maxQuestionBytes, true); err != nil {
			return err
		}
		if err := checkAskText(fmt.Sprintf("history[%d].reply", i), turn.GetReply(), maxHistoryReplyBytes, true); err != nil {
			return err
		}
	}
	return nil
}

// checkAskText checks one text field of an AskRequest: its size, its
// encoding and (unless allowEmpty) that it is not blank.
func checkAskText(field, s string, max int, allowEmpty bool) error {
	switch {
	case !allowEmpty && strings.TrimSpace(s) == "":
		return errorf(InvalidArgument, ReasonInvalidAction, field, "is empty")
	case len(s) > max:
		return errorf(InvalidArgument, ReasonInvalidAction, field, "is %d bytes, more than %d", len(s), max)
	case !utf8.ValidString(s):
		return errorf(InvalidArgument, ReasonInvalidAction, field, "is not valid UTF-8")
	}
	return nil
}
