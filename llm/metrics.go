package llm

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client's Prometheus metrics, labelled by purpose.
type metrics struct {
	calls            *prometheus.CounterVec
	retries          *prometheus.CounterVec
	promptTokens     *prometheus.CounterVec
	completionTokens *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	cacheHits        *prometheus.CounterVec
	cacheMisses      *prometheus.CounterVec
	truncated        *prometheus.CounterVec
	cutOff           *prometheus.CounterVec
	repetitive       *prometheus.CounterVec
	thinking         *prometheus.CounterVec
	unreadable       *prometheus.CounterVec
}

// newMetrics builds the metrics and registers them on reg (when not nil).
// A collector already registered by another client is reused.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_calls_total", Help: "LLM chat calls, by purpose and outcome (ok, cached, or the error kind).",
		}, []string{"purpose", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_retries_total", Help: "LLM attempts retried, by purpose and the failed attempt's error kind.",
		}, []string{"purpose", "reason"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_prompt_tokens_total", Help: "Prompt tokens reported by the endpoint, by purpose (cache hits excluded).",
		}, []string{"purpose"}),
		completionTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_completion_tokens_total", Help: "Completion tokens reported by the endpoint, by purpose (cache hits excluded).",
		}, []string{"purpose"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "avtgym_llm_call_seconds", Help: "Time of LLM calls that reached the endpoint, retries included, by purpose.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"purpose"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_cache_hits_total", Help: "LLM calls answered from the response cache, by purpose.",
		}, []string{"purpose"}),
		cacheMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_cache_misses_total", Help: "LLM calls not found in the response cache, by purpose.",
		}, []string{"purpose"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_replies_truncated_total", Help: "LLM replies whose content was cut to the reply byte limit (cache hits included), by purpose.",
		}, []string{"purpose"}),
		cutOff: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_replies_cut_off_total", Help: "LLM replies that were not the model's whole answer: stopped at max_tokens (finish_reason length) or cut to the reply byte limit (cache hits included), by purpose.",
		}, []string{"purpose"}),
		repetitive: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_replies_cut_off_repeating_total", Help: "Cut-off LLM replies whose text ends in a repeated stretch (a model in a loop: not asked again with a larger limit; cache hits included), by purpose.",
		}, []string{"purpose"}),
		thinking: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_thinking_stripped_total", Help: "LLM replies from which a thinking block was stripped (cache hits included), by purpose.",
		}, []string{"purpose"}),
		unreadable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "avtgym_llm_unreadable_total", Help: "Model outputs their caller could not read after its own retries (the oracle's unanswerable(), the responder's fallback, the solver's failed solution), by role, stage and reason (unparsed, cut_off, repeating).",
		}, []string{"role", "stage", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, p := range []**prometheus.CounterVec{&m.calls, &m.retries, &m.promptTokens, &m.completionTokens, &m.cacheHits, &m.cacheMisses, &m.truncated, &m.cutOff, &m.repetitive, &m.thinking, &m.unreadable} {
		if err := register(reg, p); err != nil {
			return nil, err
		}
	}
	if err := register(reg, &m.latency); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c, or replaces it with the equal collector already
// registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}
