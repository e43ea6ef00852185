package server

import (
	"context"

	"avtgym/corpus"
	pb "avtgym/proto/avtgym/v1"
)

// The proto's TIDE labels are strings (sample_type, drift_subtype,
// routing) with enum fields beside them; the strings stay for old clients
// and are deprecated. env writes the strings; the server fills each enum
// from its string on every response, so that both always agree.

var (
	sampleTypeEnum = map[string]pb.SampleType{
		corpus.SampleChainOnly: pb.SampleType_SAMPLE_TYPE_CHAIN_ONLY,
		corpus.SampleDriftOnly: pb.SampleType_SAMPLE_TYPE_DRIFT_ONLY,
		corpus.SampleJoint:     pb.SampleType_SAMPLE_TYPE_JOINT,
	}
	driftSubtypeEnum = map[string]pb.DriftSubtype{
		"value":      pb.DriftSubtype_DRIFT_SUBTYPE_VALUE,
		"constraint": pb.DriftSubtype_DRIFT_SUBTYPE_CONSTRAINT,
		"projection": pb.DriftSubtype_DRIFT_SUBTYPE_PROJECTION,
	}
	routingEnum = map[string]pb.ChainRouting{
		"L1":    pb.ChainRouting_CHAIN_ROUTING_L1,
		"L2":    pb.ChainRouting_CHAIN_ROUTING_L2,
		"other": pb.ChainRouting_CHAIN_ROUTING_OTHER,
	}
)

// fillLabels sets the enum beside each TIDE label string of a response.
func fillLabels(resp any) {
	switch r := resp.(type) {
	case *pb.ResetResponse:
		fillPrivileged(r.GetSharedPrivileged())
		for _, e := range r.GetEpisodes() {
			fillPrivileged(e.GetPrivileged())
		}
	case *pb.StepResponse:
		fillPrivileged(r.GetPrivileged())
	case *pb.GetTaskResponse:
		fillPrivileged(r.GetPrivileged())
	case *pb.ListTasksResponse:
		for _, t := range r.GetTasks() {
			t.SampleTypeEnum = sampleTypeEnum[t.GetSampleType()]
		}
	case *pb.ResetBatchResponse:
		for _, it := range r.GetResults() {
			fillLabels(it.GetResponse())
		}
	case *pb.StepBatchResponse:
		for _, it := range r.GetResults() {
			fillLabels(it.GetResponse())
		}
	}
}

func fillPrivileged(p *pb.Privileged) {
	if p == nil {
		return
	}
	p.RoutingEnum = routingEnum[p.GetRouting()]
	if ti := p.GetTide(); ti != nil {
		ti.SampleTypeEnum = sampleTypeEnum[ti.GetSampleType()]
		ti.DriftSubtypeEnum = driftSubtypeEnum[ti.GetDriftSubtype()]
	}
}

// entitled reports whether the call's principal may read privileged data
// (an unauthenticated server's anonymous principal may).
func entitled(ctx context.Context) bool {
	p := PrincipalFrom(ctx)
	return p == nil || p.mayReadPrivileged()
}

// refuseHidden answers a principal that may not read privileged data and
// names a TIDE sample by its record id (which may encode the sample type)
// as if the task did not exist (env.RefuseHidden).
func (s *Server) refuseHidden(ctx context.Context, corpusName, id string) error {
	return (&oracleService{env: s.env}).refuseHidden(ctx, corpusName, id)
}
