package server

import (
	"go.uber.org/zap"

	pb "avtgym/proto/avtgym/v1"
)

// logFailed writes a warning for a step that ended its episode in ERROR:
// the episode, its task and the cause — the privileged verifier reason
// (the endpoint's or the database's error), which the policy's notice
// leaves out and which an operator needs to fix what failed. Each such
// step is logged, a retried one again.
func (s *Server) logFailed(resp *pb.StepResponse) {
	if resp.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		return
	}
	tr, err := s.env.Transcript(resp.GetToken())
	if err != nil {
		s.log.Warn("episode ended in ERROR; its token could not be read for the cause", zap.Error(err))
		return
	}
	s.log.Warn("episode ended in ERROR", zap.String("episode_id", tr.EpisodeID), zap.String("corpus", tr.Corpus),
		zap.String("task", tr.TaskID), zap.String("cause", tr.Privileged.GetVerifierReason()))
}
