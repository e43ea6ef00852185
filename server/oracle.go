package server

import (
	"context"

	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// oracleService implements OracleService over the same environment as
// EnvService (same corpora, same oracles, same errors).
type oracleService struct {
	pb.UnimplementedOracleServiceServer
	env *env.Env
}

// refuseHidden is Server.refuseHidden for the oracle service.
func (o *oracleService) refuseHidden(ctx context.Context, corpusName, id string) error {
	if id == "" || entitled(ctx) {
		return nil
	}
	return o.env.RefuseHidden(corpusName, id)
}

// Ask implements OracleService.Ask.
func (o *oracleService) Ask(ctx context.Context, req *pb.AskRequest) (*pb.AskResponse, error) {
	if err := o.refuseHidden(ctx, req.GetCorpus(), req.GetTaskId()); err != nil {
		return nil, err
	}
	return o.env.Ask(ctx, req)
}
