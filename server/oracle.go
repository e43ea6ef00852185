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

// Ask implements OracleService.Ask.
func (o *oracleService) Ask(ctx context.Context, req *pb.AskRequest) (*pb.AskResponse, error) {
	return o.env.Ask(ctx, req)
}
