package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"

	pb "avtgym/proto/avtgym/v1"
)

// Metrics are the server's Prometheus metrics, on a registry of their own.
type Metrics struct {
	registry        *prometheus.Registry
	rpcs            *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	steps           *prometheus.CounterVec
	episodesStarted prometheus.Counter
	episodesEnded   *prometheus.CounterVec
	rewards         *prometheus.HistogramVec
	children        stepChildren
	// episodeLogErrors counts episodes the episode log failed to write.
	episodeLogErrors prometheus.Counter
}

// NewMetrics registers the metrics (and the Go and process collectors) on
// a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_rpcs_total", Help: "Unary RPCs handled, by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "avtgym_rpc_seconds", Help: "Unary RPC handling time, by method.",
			Buckets: prometheus.ExponentialBuckets(20e-6, 4, 10),
		}, []string{"method"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_steps_total", Help: "Episode steps applied, by action.",
		}, []string{"action"}),
		episodesStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "avtgym_episodes_started_total", Help: "Episodes started by Reset and ResetBatch.",
		}),
		episodesEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_episodes_ended_total", Help: "Episodes that reached a terminal status, by status. A forked token counts each time it ends.",
		}, []string{"status"}),
		rewards: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "avtgym_episode_reward", Help: "Terminal rewards, by reward type.",
			Buckets: []float64{0, 0.2, 0.4, 0.6, 0.8, 0.999, 1},
		}, []string{"type"}),
	}
	m.episodeLogErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "avtgym_episode_log_errors_total", Help: "Finished episodes the episode log (serve --episode-log) failed to write.",
	})
	m.registry.MustRegister(m.rpcs, m.latency, m.steps, m.episodesStarted, m.episodesEnded, m.rewards, m.episodeLogErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.resolveChildren()
	return m
}

// watch exports a server's admission and drain state. A Metrics serves
// one Server.
func (m *Metrics) watch(s *Server) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "avtgym_inflight_items", Help: "Work in flight, in items (a unary call is 1, a batch its items)."},
			func() float64 { return float64(s.admit.stats().InFlight) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_admitted_total", Help: "Calls admitted by admission control."},
			func() float64 { return float64(s.admit.admitted.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_overloaded_total", Help: "Calls refused by admission control, by the limit that refused them (scope server: --max-inflight; principal: --max-inflight-per-principal): RESOURCE_EXHAUSTED / OVERLOADED.", ConstLabels: prometheus.Labels{"scope": "server"}},
			func() float64 { return float64(s.admit.rejectedServer.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_overloaded_total", Help: "Calls refused by admission control, by the limit that refused them (scope server: --max-inflight; principal: --max-inflight-per-principal): RESOURCE_EXHAUSTED / OVERLOADED.", ConstLabels: prometheus.Labels{"scope": "principal"}},
			func() float64 { return float64(s.admit.rejectedPrincipal.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_unauthenticated_total", Help: "Calls refused for missing or invalid credentials (UNAUTHENTICATED)."},
			func() float64 { return float64(s.unauthenticated.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "avtgym_draining", Help: "1 while the server drains (after SIGTERM), else 0."},
			func() float64 {
				if s.draining.Load() {
					return 1
				}
				return 0
			}),
	)
	if l := s.opt.EpisodeLog; l != nil {
		m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_episode_log_dropped_total",
			Help: "Finished episodes the episode log failed to write (a full disk, a file that would not open): missing from its files, which keep only whole lines."},
			func() float64 { return float64(l.Stats().Dropped) }))
	}
}

// Registerer is the registry, for other components' metrics (the LLM
// clients').
func (m *Metrics) Registerer() prometheus.Registerer { return m.registry }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func (m *Metrics) observeRPC(method string, err error, took time.Duration) {
	m.rpcs.WithLabelValues(method, status.Code(err).String()).Inc()
	m.latency.WithLabelValues(method).Observe(took.Seconds())
}

// observeStep counts a step. It runs on every step, so the children of the
// labelled vectors are looked up once, in stepChildren, not per call.
func (m *Metrics) observeStep(req *pb.StepRequest, resp *pb.StepResponse) {
	c := &m.children
	switch req.GetAction().GetKind().(type) {
	case *pb.Action_Ask_:
		c.ask.Inc()
	case *pb.Action_Stop_:
		c.stop.Inc()
	case *pb.Action_SubmitSql_:
		c.submit.Inc()
	}
	if resp.GetDone() {
		if e, ok := c.ended[resp.GetStatus()]; ok {
			e.Inc()
		}
		if r := resp.GetReward(); r != nil {
			if o, ok := c.rewards[r.GetType()]; ok {
				o.Observe(r.GetValue())
			}
		}
	}
}

// stepChildren are the pre-resolved children of the step metrics.
type stepChildren struct {
	ask, stop, submit prometheus.Counter
	ended             map[pb.EpisodeStatus]prometheus.Counter
	rewards           map[pb.RewardType]prometheus.Observer
}

func (m *Metrics) resolveChildren() {
	c := &m.children
	c.ask = m.steps.WithLabelValues("ask")
	c.stop = m.steps.WithLabelValues("stop")
	c.submit = m.steps.WithLabelValues("submit_sql")
	c.ended = map[pb.EpisodeStatus]prometheus.Counter{}
	for _, s := range []pb.EpisodeStatus{pb.EpisodeStatus_EPISODE_STATUS_TERMINATED, pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED, pb.EpisodeStatus_EPISODE_STATUS_ERROR} {
		c.ended[s] = m.episodesEnded.WithLabelValues(s.String())
	}
	c.rewards = map[pb.RewardType]prometheus.Observer{}
	for _, t := range []pb.RewardType{pb.RewardType_REWARD_TYPE_QUESTION_F1, pb.RewardType_REWARD_TYPE_OUTCOME} {
		c.rewards[t] = m.rewards.WithLabelValues(t.String())
	}
}
