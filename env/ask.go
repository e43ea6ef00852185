package env

import (
	"context"

	"avtgym/corpus"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// Ask answers one question outside any episode (OracleService): the task
// is named by id, or by AVT id and interpretation label. It keeps no state;
// the caller sends the dialogue so far.
func (e *Env) Ask(ctx context.Context, req *pb.AskRequest) (*pb.AskResponse, error) {
	t, err := e.askTask(req)
	if err != nil {
		return nil, err
	}
	if err := checkText("question", req.GetQuestion(), maxQuestionBytes); err != nil {
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
	reply, err := o.Ask(ctx, t.Record, history, req.GetQuestion())
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errorf(Unavailable, ReasonOracleFailed, "", "the oracle failed: %v", err)
	}
	resp := &pb.AskResponse{Reply: reply.Text}
	if req.GetIncludePrivileged() {
		var mask uint64
		for _, c := range reply.Credits {
			if c >= 0 && c < len(t.Ambiguities) && c < corpus.MaxAmbiguities {
				mask |= 1 << c
			}
		}
		ep := &episode{task: t}
		resp.Privileged = &pb.AskPrivileged{Credits: ep.credits(mask), OracleAction: reply.Action}
	}
	return resp, nil
}

func (e *Env) askTask(req *pb.AskRequest) (*corpus.Task, error) {
	if id := req.GetTaskId(); id != "" {
		return e.Task(req.GetCorpus(), id)
	}
	c, err := e.Corpus(req.GetCorpus())
	if err != nil {
		return nil, err
	}
	if req.GetAvtId() == "" {
		return nil, errorf(InvalidArgument, ReasonInvalidAction, "task_id", "name the task by task_id, or by avt_id and interpretation")
	}
	for _, t := range c.Interpretations(req.GetAvtId()) {
		if t.Interpretation == req.GetInterpretation() {
			return t, nil
		}
	}
	return nil, errorf(NotFound, ReasonUnknownTask, "interpretation", "corpus %q has no AVT %q with interpretation %q", c.Name, req.GetAvtId(), req.GetInterpretation())
}
