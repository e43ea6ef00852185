// Package llm owns the project's one client for OpenAI-compatible chat
// completion endpoints (vLLM, SGLang, OpenAI, llama.cpp, ollama): per-call
// deadlines, retries with jittered backoff, a concurrency limit that adapts
// to the endpoint (so that a server answering one request at a time is not
// flooded past its deadlines) or stays fixed, sampling controls, JSON
// output with a
// tolerant parser, context-length checks, usage metrics and a response cache
// (in memory or an append-only file) that lets a run be replayed without the
// endpoint. It also hides what thinking models add: a reply's
// <think>…</think> blocks are stripped (StripThinking), the template's
// thinking step can be turned off (Config.DisableThinking), and a reply the
// endpoint ended at the completion limit says so (Response.CutOff), so that
// callers regenerate it instead of serving half an answer.
//
// The client tells the endpoint's failures (errors, timeouts, answers that
// are not a chat completion: retried, then an *Error) from the model's
// output (any readable completion, however unusable its content: returned,
// for the caller to judge), so that callers never score an endpoint's
// failure as a model's answer, nor a model's answer as an endpoint's
// failure.
//
// The client speaks the wire format with net/http rather than through an
// SDK, so that retries, deadlines and the concurrency limit are all in one
// place and testable against an httptest server.
package llm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultAPIKeyEnv = "OPENAI_API_KEY"
	// DefaultTimeout is one attempt's deadline: room for a long reply
	// (a solver's 2048 tokens at 20 tokens a second) with the queue at the
	// server kept short by the adaptive concurrency limit.
	DefaultTimeout    = 120 * time.Second
	DefaultMaxRetries = 4
	// DefaultConcurrency is the most requests in flight; the adaptive
	// limit starts at DefaultInitialConcurrency (see Config.Concurrency).
	DefaultConcurrency = 16
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffMax  = 20 * time.Second
	// DefaultMaxTokens is the completion limit sent when neither the
	// config nor the request sets one: every request carries max_tokens,
	// so that an endpoint never writes until its context is full.
	DefaultMaxTokens = 2048
	// DefaultMaxReplyBytes bounds a reply's content (Config.MaxReplyBytes).
	DefaultMaxReplyBytes = 16 << 10
	// MaxMaxReplyBytes is the largest Config.MaxReplyBytes New accepts.
	MaxMaxReplyBytes = 16 << 20
)

// bodyMargin is what a response body may hold besides its content: the
// JSON framing, the usage report, a reasoning text. See Client.bodyLimit.
const bodyMargin = 64 << 10

// Config configures a Client. Zero fields take the defaults above.
type Config struct {
	// BaseURL is the endpoint's API root, e.g. "http://localhost:8000/v1";
	// requests go to BaseURL + "/chat/completions". Required.
	BaseURL string
	// Model is the model name sent with every request. Required.
	Model string
	// APIKeyEnv names the environment variable holding the API key (read
	// once, by New); when it is set, requests carry "Authorization: Bearer".
	APIKeyEnv string
	// Timeout is the deadline of one attempt (default DefaultTimeout),
	// applied within the caller's context, from when the request is sent:
	// the wait for a concurrency slot in the client is not in it.
	Timeout time.Duration
	// MaxRetries is the number of retries after the first attempt on 429,
	// 5xx, transport failures, timeouts and answers that are not a
	// readable chat completion (KindUnreadable) (default 4; negative:
	// none).
	MaxRetries int
	// Concurrency is the maximum number of requests in flight at the
	// endpoint from this client (default DefaultConcurrency). Unless
	// FixedConcurrency is set, the limit adapts below it (see limiter):
	// it starts at DefaultInitialConcurrency, grows while replies come
	// well within Timeout and their time does not grow with the number in
	// flight, and shrinks when an attempt runs out of Timeout, is answered
	// 429 or takes more than half of it — so that the retry of a request
	// that timed out in a server's queue waits in the client instead of
	// joining that queue again.
	Concurrency int
	// FixedConcurrency keeps the limit at Concurrency, exactly, whatever
	// the endpoint's times: for a server known to batch (vLLM, SGLang).
	FixedConcurrency bool
	// ContextTokens is the model's context length in tokens; 0 means
	// unknown and disables the check before the call.
	ContextTokens int
	// Temperature is the sampling temperature (default 0), sent with every
	// request: a server's own default is rarely 0.
	Temperature float64
	// TopP, FrequencyPenalty, PresencePenalty and RepetitionPenalty are
	// sampling controls, sent only when not zero (zero leaves the server's
	// default, which for the OpenAI-standard top_p, frequency_penalty and
	// presence_penalty is the neutral value). TopP is in (0, 1]; the two
	// OpenAI penalties in [-2, 2]. RepetitionPenalty (neutral 1; above 1
	// penalises repeats) is not OpenAI's: it goes out as vLLM's and
	// SGLang's "repetition_penalty" and as llama.cpp's "repeat_penalty"
	// (each server reads its own and ignores the other); OpenAI's API
	// rejects it.
	TopP              float64
	FrequencyPenalty  float64
	PresencePenalty   float64
	RepetitionPenalty float64
	// Stop are stop sequences (at most MaxStop), sent as "stop" when set.
	Stop []string
	// MaxTokens is the completion limit of requests that set none
	// (default DefaultMaxTokens); max_tokens is sent with every request.
	MaxTokens int
	// MaxReplyBytes bounds the content of a reply, in bytes (default
	// DefaultMaxReplyBytes, at most MaxMaxReplyBytes). Longer content, from
	// an endpoint that ignored max_tokens, is cut at a UTF-8 boundary and
	// the Response says so (Truncated). The response body is read up to
	// 6×MaxReplyBytes (the worst case of JSON escaping) plus 64 KiB of
	// framing; a longer body is not read further, and its content is
	// salvaged from what was read.
	MaxReplyBytes int
	// JSONMode asks the endpoint for response_format json_object on
	// requests with Request.JSON. If the endpoint answers 400 that it does
	// not support it, the client retries without it and stops asking.
	JSONMode bool
	// DisableThinking asks the endpoint's chat template to skip the
	// model's thinking step: every request carries chat_template_kwargs
	// {"enable_thinking": false}, which vLLM and SGLang hand to the
	// template (Qwen3's and other hybrid thinking models' templates read
	// it; others ignore it). If the endpoint answers 400 naming the field
	// (OpenAI's API does), the client retries without it and stops sending
	// it. Thinking that still reaches the content is stripped either way
	// (StripThinking).
	DisableThinking bool
	// Cache, when not nil, serves repeated requests without the endpoint.
	Cache Cache
	// Replay makes the client answer from Cache alone (required): a
	// request the cache does not hold fails with KindNotCached without a
	// call, and Ping asks the endpoint nothing (see CacheHolds).
	Replay bool
	// Version is the caller's prompt/oracle version; it is part of cache
	// keys so that a new prompt never reads an old reply.
	Version string
	// BackoffBase is the first retry's backoff (default 250ms); each retry
	// doubles it, with jitter.
	BackoffBase time.Duration
	// BackoffMax caps a backoff, Retry-After included (default 20s).
	BackoffMax time.Duration
	// Clock is how the client waits and tells the time for its behaviour:
	// the backoff before a retry and the reading of a Retry-After date.
	// Nil means real time. Tests inject a fake that records the waits and
	// returns at once. The per-attempt Timeout and the latency metric use
	// real time whatever the Clock.
	Clock Clock
}

// Clock is the time source of a Client's retry loop (Config.Clock).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx ends, when it returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the Clock of a Config without one: the time package.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one chat call.
type Request struct {
	// Messages are the prompt.
	Messages []Message
	// JSON asks for a JSON object as output (see Config.JSONMode); parse
	// the content with ParseJSON in either case.
	JSON bool
	// MaxTokens overrides Config.MaxTokens when positive.
	MaxTokens int
	// Purpose names the caller ("oracle.match", "solver", "asker"); it
	// labels metrics and is part of the cache key.
	Purpose string
	// CacheKey is extra key material (e.g. the record id); it is part of
	// the cache key and named in context-overflow errors.
	CacheKey string
}

// Response is the outcome of a chat call.
type Response struct {
	// Content is the first choice's message content: valid UTF-8 (invalid
	// bytes replaced by U+FFFD), at most Config.MaxReplyBytes bytes.
	Content string `json:"content"`
	// Truncated reports that the endpoint's content was longer than
	// Config.MaxReplyBytes (or its body longer than the client reads) and
	// Content is its beginning.
	Truncated bool `json:"truncated,omitempty"`
	// PromptTokens and CompletionTokens are the endpoint's usage report.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// Cached reports that the response came from the cache.
	Cached bool `json:"-"`
	// Model is the model that answered, as the endpoint named it.
	Model string `json:"model"`
	// FinishReason is the endpoint's finish_reason of the first choice:
	// "stop" when the model ended its answer, "length" when it ran into
	// max_tokens (the answer is cut off), "" when the endpoint sent none.
	FinishReason string `json:"finish_reason,omitempty"`
	// ThinkingStripped reports that StripThinking removed a thinking block
	// (or the thinking before a lone </think>) from Content.
	ThinkingStripped bool `json:"thinking_stripped,omitempty"`
}

// CutOff reports that Content is not the model's whole answer: the
// endpoint stopped it at the completion limit (FinishReason "length") or
// the client cut it to Config.MaxReplyBytes (Truncated). A thinking model
// cut off inside its thinking has an empty Content and is CutOff. Callers
// never serve a cut-off reply as it is: they regenerate it or fall back.
func (r *Response) CutOff() bool { return r.Truncated || r.FinishReason == "length" }

// Client calls one OpenAI-compatible endpoint. It is safe for concurrent use.
type Client struct {
	cfg     Config
	url     string
	apiKey  string
	http    *http.Client
	lim     *limiter
	jsonOff atomic.Bool // the endpoint rejected response_format
	// thinkOff: the endpoint rejected chat_template_kwargs.
	thinkOff atomic.Bool
	metrics  *metrics
	stats    struct{ calls, cutOff, repetitive, thinking, unreadable atomic.Int64 }
}

// Stats counts what a client's replies looked like (cache hits included),
// for a quick check of a model (avtgym probe): how many were cut
// off and how many carried thinking.
type Stats struct {
	// Replies is the number of successful Chat calls.
	Replies int64
	// CutOff counts replies that were cut off (Response.CutOff).
	CutOff int64
	// CutOffRepeating counts the cut-off replies whose text ends in a
	// repeated stretch (Response.Degenerate): a model in a loop, which a
	// larger limit only lets loop longer.
	CutOffRepeating int64 `json:"cut_off_repeating"`
	// ThinkingStripped counts replies whose thinking was stripped.
	ThinkingStripped int64
	// Unreadable counts the outputs the callers could not read and
	// reported (CountUnreadable).
	Unreadable int64 `json:"unreadable"`
}

// Stats returns the client's reply counts so far.
func (c *Client) Stats() Stats {
	return Stats{Replies: c.stats.calls.Load(), CutOff: c.stats.cutOff.Load(), CutOffRepeating: c.stats.repetitive.Load(),
		ThinkingStripped: c.stats.thinking.Load(), Unreadable: c.stats.unreadable.Load()}
}

// CountUnreadable counts one output of the model that its caller could not
// read — after its own retries, the output it gives up on: role is the
// caller ("oracle", "solver", "asker"), stage its step ("match",
// "respond", "solve"), reason why ("unparsed": no answer in it;
// "cut_off": cut off at the limit, also with the larger one; "repeating":
// cut off in a loop, Response.Degenerate). It is the metric
// avtgym_llm_unreadable_total and Stats.Unreadable: nothing unreadable
// is silent.
func (c *Client) CountUnreadable(role, stage, reason string) {
	c.stats.unreadable.Add(1)
	c.metrics.unreadable.WithLabelValues(role, stage, reason).Inc()
}

// New checks cfg, applies the defaults and returns a client. Its metrics are
// registered on reg (nil: no metrics); clients sharing a registerer share
// the metrics.
func New(cfg Config, reg prometheus.Registerer) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("llm: BaseURL is required")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.Model == "" {
		return nil, errors.New("llm: Model is required")
	}
	if cfg.Timeout < 0 || cfg.Concurrency < 0 || cfg.ContextTokens < 0 || cfg.MaxTokens < 0 || cfg.MaxReplyBytes < 0 || cfg.BackoffBase < 0 || cfg.BackoffMax < 0 {
		return nil, errors.New("llm: Timeout, Concurrency, ContextTokens, MaxTokens, MaxReplyBytes and backoffs must not be negative")
	}
	if err := checkSampling(cfg); err != nil {
		return nil, err
	}
	if cfg.Replay && cfg.Cache == nil {
		return nil, errors.New("llm: Replay needs a Cache to replay")
	}
	if cfg.MaxReplyBytes > MaxMaxReplyBytes {
		return nil, fmt.Errorf("llm: MaxReplyBytes %d is more than %d", cfg.MaxReplyBytes, MaxMaxReplyBytes)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.MaxReplyBytes == 0 {
		cfg.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if cfg.APIKeyEnv == "" {
		cfg.APIKeyEnv = DefaultAPIKeyEnv
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	} else if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = cfg.Concurrency
	cfg.Stop = slices.Clone(cfg.Stop)
	return &Client{
		cfg:     cfg,
		url:     strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		apiKey:  os.Getenv(cfg.APIKeyEnv),
		http:    &http.Client{Transport: tr},
		lim:     newLimiter(cfg.Concurrency, cfg.FixedConcurrency, cfg.Timeout),
		metrics: m,
	}, nil
}

// MaxStop is the most stop sequences a Config may set (OpenAI's limit).
const MaxStop = 4

// checkSampling checks the sampling controls of cfg.
func checkSampling(cfg Config) error {
	switch {
	case cfg.Temperature < 0 || cfg.Temperature > 2:
		return fmt.Errorf("llm: Temperature %g is not in [0, 2]", cfg.Temperature)
	case cfg.TopP < 0 || cfg.TopP > 1:
		return fmt.Errorf("llm: TopP %g is not in (0, 1] (0: the server's default)", cfg.TopP)
	case cfg.FrequencyPenalty < -2 || cfg.FrequencyPenalty > 2:
		return fmt.Errorf("llm: FrequencyPenalty %g is not in [-2, 2]", cfg.FrequencyPenalty)
	case cfg.PresencePenalty < -2 || cfg.PresencePenalty > 2:
		return fmt.Errorf("llm: PresencePenalty %g is not in [-2, 2]", cfg.PresencePenalty)
	case cfg.RepetitionPenalty < 0:
		return fmt.Errorf("llm: RepetitionPenalty %g is negative (0: the server's default; 1: neutral)", cfg.RepetitionPenalty)
	case len(cfg.Stop) > MaxStop:
		return fmt.Errorf("llm: %d stop sequences, at most %d", len(cfg.Stop), MaxStop)
	}
	for _, s := range cfg.Stop {
		if s == "" {
			return errors.New("llm: a stop sequence is empty")
		}
	}
	return nil
}

// Config returns the client's configuration with the defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Chat sends req and returns the first choice. In order: a prompt that
// cannot fit Config.ContextTokens fails with KindContextOverflow before any
// call; a cache hit returns the cached response (Cached set) without the
// endpoint; otherwise the endpoint is called, with retries, and a success is
// stored in the cache. When two identical requests race, both return the
// response the cache kept, so a replay reproduces the run. The content is
// bounded by Config.MaxReplyBytes and made valid UTF-8, from the endpoint
// and from the cache alike.
//
// Chat tells the endpoint's failure from the model's answer. An HTTP 200
// whose body is not a readable chat completion (see KindUnreadable) is the
// endpoint failing: retried like a 5xx, then an error. A readable
// completion is returned whatever its content — empty, prose where JSON
// was asked for, cut off, with invalid UTF-8 (replaced): that is the
// model's output, which a prompt can steer, and the caller's to judge.
func (c *Client) Chat(ctx context.Context, req Request) (*Response, error) {
	purpose := req.Purpose
	if purpose == "" {
		purpose = "unspecified"
	}
	resp, err := c.chat(ctx, req, purpose)
	outcome := "ok"
	switch {
	case err != nil:
		outcome = KindOf(err).String()
	case resp.Cached:
		outcome = "cached"
	}
	c.metrics.calls.WithLabelValues(purpose, outcome).Inc()
	if resp != nil {
		c.stats.calls.Add(1)
		if resp.Truncated {
			c.metrics.truncated.WithLabelValues(purpose).Inc()
		}
		if resp.CutOff() {
			c.stats.cutOff.Add(1)
			c.metrics.cutOff.WithLabelValues(purpose).Inc()
			if resp.Degenerate() {
				c.stats.repetitive.Add(1)
				c.metrics.repetitive.WithLabelValues(purpose).Inc()
			}
		}
		if resp.ThinkingStripped {
			c.stats.thinking.Add(1)
			c.metrics.thinking.WithLabelValues(purpose).Inc()
		}
	}
	return resp, err
}

func (c *Client) chat(ctx context.Context, req Request, purpose string) (*Response, error) {
	if len(req.Messages) == 0 {
		return nil, errorf(KindBadRequest, 0, nil, "purpose %q key %q: no messages", purpose, req.CacheKey)
	}
	maxTokens := c.cfg.MaxTokens
	if req.MaxTokens > 0 {
		maxTokens = req.MaxTokens
	}
	if c.cfg.ContextTokens > 0 {
		est := EstimatePromptTokens(req.Messages)
		if est+maxTokens > c.cfg.ContextTokens {
			return nil, errorf(KindContextOverflow, 0, nil,
				"purpose %q key %q: prompt of ~%d tokens (estimated) + %d max tokens exceeds the context of %d tokens",
				purpose, req.CacheKey, est, maxTokens, c.cfg.ContextTokens)
		}
	}
	var key string
	if c.cfg.Cache != nil {
		key = c.cacheKey(req, purpose, maxTokens)
		if r, ok := c.cfg.Cache.Get(key); ok {
			c.metrics.cacheHits.WithLabelValues(purpose).Inc()
			r.Cached = true
			c.bound(&r) // a cache written under a larger limit
			return &r, nil
		}
		c.metrics.cacheMisses.WithLabelValues(purpose).Inc()
		if c.cfg.Replay {
			return nil, errorf(KindNotCached, 0, nil, "purpose %q key %q: the request is not in the response cache, and the client replays it only (Replay)", purpose, req.CacheKey)
		}
	}
	start := time.Now()
	resp, err := c.call(ctx, req, purpose, maxTokens)
	c.metrics.latency.WithLabelValues(purpose).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	c.metrics.promptTokens.WithLabelValues(purpose).Add(float64(resp.PromptTokens))
	c.metrics.completionTokens.WithLabelValues(purpose).Add(float64(resp.CompletionTokens))
	if c.cfg.Cache != nil {
		if err := c.cfg.Cache.Put(key, *resp); err != nil {
			return resp, errorf(KindCache, 0, err, "purpose %q key %q: storing the response", purpose, req.CacheKey)
		}
		if kept, ok := c.cfg.Cache.Get(key); ok {
			c.bound(&kept)
			return &kept, nil
		}
	}
	return resp, nil
}

// Ping checks that the endpoint answers: one short request (a few
// tokens), never served from or stored in the cache, with the client's
// retries. A pre-flight calls it so that a run stops with one message
// instead of failing every episode. A client that replays (Config.Replay)
// needs no endpoint: its Ping asks nothing, and fails only when its cache
// holds no response at all.
func (c *Client) Ping(ctx context.Context) error {
	if c.cfg.Replay {
		if !c.cacheNonEmpty() {
			return errorf(KindNotCached, 0, nil, "the client replays its response cache only (Replay), and the cache is empty")
		}
		return nil
	}
	req := Request{Messages: []Message{{Role: "user", Content: "Reply with the word OK."}}, Purpose: "preflight"}
	_, err := c.call(ctx, req, req.Purpose, 8)
	return err
}

// CacheHolds reports whether the client may do without its endpoint: it
// replays (Config.Replay) and its cache holds at least one response. A
// warm cache alone is not enough — a run that was not asked to replay
// needs the endpoint for every request the cache lacks, so a pre-flight
// that skipped the endpoint for a warm cache (an earlier run's) would let
// a run go ahead with the endpoint down.
func (c *Client) CacheHolds() bool { return c.cfg.Replay && c.cacheNonEmpty() }

// cacheNonEmpty reports whether the cache holds at least one response (a
// cache that cannot tell counts as holding some).
func (c *Client) cacheNonEmpty() bool {
	if c.cfg.Cache == nil {
		return false
	}
	if l, ok := c.cfg.Cache.(interface{ Len() int }); ok {
		return l.Len() > 0
	}
	return true
}

// ConcurrencyLimit returns the concurrency limit now: Config.Concurrency
// with FixedConcurrency, else the adaptive limit's current value.
func (c *Client) ConcurrencyLimit() int { return c.lim.current() }

// cacheKey hashes everything that determines a reply.
func (c *Client) cacheKey(req Request, purpose string, maxTokens int) string {
	material := struct {
		Version     string    `json:"version"`
		Model       string    `json:"model"`
		Purpose     string    `json:"purpose"`
		CacheKey    string    `json:"cache_key"`
		Temperature float64   `json:"temperature"`
		JSON        bool      `json:"json"`
		MaxTokens   int       `json:"max_tokens"`
		Messages    []Message `json:"messages"`
		// NoThinking and the sampling controls are left out when unset, so
		// that the keys of a client that does not set them are what they
		// always were.
		NoThinking        bool     `json:"no_thinking,omitempty"`
		TopP              float64  `json:"top_p,omitempty"`
		FrequencyPenalty  float64  `json:"frequency_penalty,omitempty"`
		PresencePenalty   float64  `json:"presence_penalty,omitempty"`
		RepetitionPenalty float64  `json:"repetition_penalty,omitempty"`
		Stop              []string `json:"stop,omitempty"`
	}{c.cfg.Version, c.cfg.Model, purpose, req.CacheKey, c.cfg.Temperature, req.JSON, maxTokens, req.Messages, c.cfg.DisableThinking,
		c.cfg.TopP, c.cfg.FrequencyPenalty, c.cfg.PresencePenalty, c.cfg.RepetitionPenalty, c.cfg.Stop}
	b, _ := json.Marshal(material) // cannot fail: plain strings and numbers
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// EstimatePromptTokens conservatively estimates the tokens of a prompt:
// EstimateTokens of each content plus a few tokens of framing per message.
func EstimatePromptTokens(msgs []Message) int {
	n := 3
	for _, m := range msgs {
		n += 4 + EstimateTokens(m.Role) + EstimateTokens(m.Content)
	}
	return n
}

// EstimateTokens conservatively estimates the tokens of s as its length in
// bytes divided by 3.5, rounded up. Real tokenizers average about 4 bytes a
// token on English and SQL, so the estimate errs on the side of overflow.
func EstimateTokens(s string) int {
	return (2*len(s) + 6) / 7
}

// wire types of the chat completions API.
type (
	wireRequest struct {
		Model          string          `json:"model"`
		Messages       []Message       `json:"messages"`
		Temperature    float64         `json:"temperature"`
		MaxTokens      int             `json:"max_tokens"`
		ResponseFormat *responseFormat `json:"response_format,omitempty"`
		// The sampling controls, sent only when set (Config.TopP …);
		// RepetitionPenalty goes out under vLLM's and llama.cpp's names.
		TopP              float64  `json:"top_p,omitempty"`
		FrequencyPenalty  float64  `json:"frequency_penalty,omitempty"`
		PresencePenalty   float64  `json:"presence_penalty,omitempty"`
		RepetitionPenalty float64  `json:"repetition_penalty,omitempty"`
		RepeatPenalty     float64  `json:"repeat_penalty,omitempty"`
		Stop              []string `json:"stop,omitempty"`
		// ChatTemplateKwargs are vLLM's and SGLang's extra template
		// arguments (Config.DisableThinking).
		ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	}
	responseFormat struct {
		Type string `json:"type"`
	}
	wireResponse struct {
		Model   string `json:"model"`
		Choices []struct {
			// Message is nil when the choice has none (or null).
			Message *struct {
				Content *string `json:"content"`
				// ReasoningContent and Reasoning are where vLLM's and
				// SGLang's reasoning parsers put a thinking model's
				// thinking (vLLM renamed the field "reasoning" in v0.11);
				// they are not read, only noticed: a reply that is all
				// thinking has no content.
				ReasoningContent *string `json:"reasoning_content"`
				Reasoning        *string `json:"reasoning"`
				// Refusal and ToolCalls are the API's other answers
				// without content (a model's refusal under structured
				// outputs, tool calls); noticed, not read.
				Refusal   *string           `json:"refusal"`
				ToolCalls []json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
)

// call runs the attempts of one request.
func (c *Client) call(ctx context.Context, req Request, purpose string, maxTokens int) (*Response, error) {
	wr := wireRequest{Model: c.cfg.Model, Messages: req.Messages, Temperature: c.cfg.Temperature, MaxTokens: maxTokens,
		TopP: c.cfg.TopP, FrequencyPenalty: c.cfg.FrequencyPenalty, PresencePenalty: c.cfg.PresencePenalty,
		RepetitionPenalty: c.cfg.RepetitionPenalty, RepeatPenalty: c.cfg.RepetitionPenalty, Stop: c.cfg.Stop}
	for attempt := 0; ; attempt++ {
		jsonFormat := req.JSON && c.cfg.JSONMode && !c.jsonOff.Load()
		wr.ResponseFormat = nil
		if jsonFormat {
			wr.ResponseFormat = &responseFormat{Type: "json_object"}
		}
		noThinking := c.cfg.DisableThinking && !c.thinkOff.Load()
		wr.ChatTemplateKwargs = nil
		if noThinking {
			wr.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
		}
		body, err := json.Marshal(wr)
		if err != nil {
			return nil, errorf(KindBadRequest, 0, err, "purpose %q key %q: encoding the request", purpose, req.CacheKey)
		}
		resp, retryAfter, err := c.attempt(ctx, body)
		if err == nil {
			return resp, nil
		}
		e := err.(*Error)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, callerDone(ctxErr, purpose, req.CacheKey)
		}
		if e.Kind == KindBadRequest && jsonFormat && jsonUnsupported(e.Msg) {
			// The endpoint does not support response_format: remember, and
			// send again without it (not counted as a retry).
			c.jsonOff.Store(true)
			attempt--
			continue
		}
		if e.Kind == KindBadRequest && noThinking && thinkingUnsupported(e.Msg) {
			// The endpoint does not take chat_template_kwargs (OpenAI's
			// API): remember, and send again without them.
			c.thinkOff.Store(true)
			attempt--
			continue
		}
		retryable := e.Kind == KindRateLimited || e.Kind == KindServer || e.Kind == KindTimeout || e.Kind == KindUnreadable
		if !retryable || attempt >= c.cfg.MaxRetries {
			if retryable {
				e.Msg = fmt.Sprintf("%s (after %d attempts)", e.Msg, attempt+1)
			}
			e.Msg = fmt.Sprintf("purpose %q key %q: %s", purpose, req.CacheKey, e.Msg)
			return nil, e
		}
		c.metrics.retries.WithLabelValues(purpose, e.Kind.String()).Inc()
		if err := c.cfg.Clock.Sleep(ctx, c.backoff(attempt, retryAfter)); err != nil {
			return nil, callerDone(err, purpose, req.CacheKey)
		}
	}
}

func callerDone(err error, purpose, key string) *Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errorf(KindTimeout, 0, err, "purpose %q key %q: the caller's deadline expired", purpose, key)
	}
	return errorf(KindCanceled, 0, err, "purpose %q key %q: canceled by the caller", purpose, key)
}

// backoff returns the wait before retry number attempt+1: Retry-After when
// the endpoint sent one, else an exponential backoff with jitter (a random
// point in its upper half); both capped by BackoffMax.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := retryAfter
	if d <= 0 {
		d = c.cfg.BackoffBase << min(attempt, 30)
		if d <= 0 || d > c.cfg.BackoffMax {
			d = c.cfg.BackoffMax
		}
		d = d/2 + rand.N(d/2+1)
	}
	return min(d, c.cfg.BackoffMax)
}

// attempt makes one HTTP request, holding a concurrency slot while it is in
// flight, classifies its outcome and tells the concurrency limit how it
// went (limiter).
func (c *Client) attempt(ctx context.Context, body []byte) (*Response, time.Duration, error) {
	if err := c.lim.acquire(ctx); err != nil {
		return nil, 0, errorf(KindCanceled, 0, err, "waiting for a concurrency slot")
	}
	defer c.lim.release()
	start := time.Now()
	resp, wait, err := c.send(ctx, body)
	var e *Error
	switch {
	case err == nil:
		c.lim.succeeded(start, time.Since(start))
	case !errors.As(err, &e):
	case e.Kind == KindTimeout && ctx.Err() == nil, e.Kind == KindRateLimited,
		e.Kind == KindServer && e.Status == http.StatusServiceUnavailable:
		// Overloaded: the request ran out of its deadline (as a rule,
		// waiting in the server's queue) or was refused for the load.
		c.lim.overloaded(start)
	}
	return resp, wait, err
}

// send makes one HTTP request and classifies its outcome.
func (c *Client) send(ctx context.Context, body []byte) (*Response, time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, errorf(KindBadRequest, 0, err, "building the request")
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return nil, 0, transportError(actx, err, c.cfg.Timeout)
	}
	defer hresp.Body.Close()
	limit := c.bodyLimit()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, limit+1))
	if err != nil {
		return nil, 0, transportError(actx, err, c.cfg.Timeout)
	}
	cut := int64(len(data)) > limit
	if cut {
		data = data[:limit]
	}
	status := hresp.StatusCode
	switch {
	case status == http.StatusOK:
		resp, err := c.completion(hresp.Header.Get("Content-Type"), data, cut, limit)
		return resp, 0, err
	case status == http.StatusTooManyRequests:
		return nil, retryAfter(hresp.Header.Get("Retry-After"), c.cfg.Clock.Now()), errorf(KindRateLimited, status, nil, "rate limited: %q", excerpt(data))
	case status >= 500:
		return nil, retryAfter(hresp.Header.Get("Retry-After"), c.cfg.Clock.Now()), errorf(KindServer, status, nil, "server error: %q", excerpt(data))
	case status >= 400:
		if contextExceeded(string(data)) {
			return nil, 0, errorf(KindContextOverflow, status, nil, "the endpoint reports the prompt exceeds the model's context: %q", excerpt(data))
		}
		return nil, 0, errorf(KindBadRequest, status, nil, "request rejected: %q", excerpt(data))
	default:
		return nil, 0, errorf(KindUnreadable, status, nil, "unexpected status, not a chat completion: %q", excerpt(data))
	}
}

// completion reads the body of an HTTP 200: a chat completion, or the
// endpoint failing (KindUnreadable). A body longer than limit was cut to it
// (cut): the endpoint ignored max_tokens, and the content's beginning is
// salvaged rather than read on. What the model wrote is the model's answer
// however unusable (the caller decides); only what is not a chat
// completion is an error: a media type that is not JSON, a body that is
// not JSON (or, cut, not the beginning of a JSON object), no choices, a
// first choice without a message, or a message whose content is missing
// or null with nothing to account for it — no thinking (reasoning_content
// or reasoning), no refusal, no tool calls, and a finish_reason that is
// not "length" or "content_filter" (the model stopped, or was stopped,
// before it wrote content: an empty answer).
func (c *Client) completion(contentType string, data []byte, cut bool, limit int64) (*Response, error) {
	if !jsonMediaType(contentType) {
		return nil, errorf(KindUnreadable, http.StatusOK, nil, "the response is %q, not JSON: %q", excerpt([]byte(contentType)), excerpt(data))
	}
	data = bytes.TrimPrefix(data, utf8BOM)
	if cut {
		p, ok := salvage(data, c.cfg.MaxReplyBytes)
		switch {
		case ok:
		case p.thinkingCut:
			// A thinking model's thinking ran past the read limit before
			// its content: an empty answer, cut off.
			p.contentCut = true
		default:
			return nil, errorf(KindUnreadable, http.StatusOK, nil, "the response body is over %d bytes and has no readable choices[0].message.content in them: %q", limit, excerpt(data))
		}
		resp := c.response(p)
		resp.Truncated = resp.Truncated || p.contentCut
		return resp, nil
	}
	var wr wireResponse
	if err := json.Unmarshal(data, &wr); err != nil {
		what := "JSON"
		if !utf8.Valid(data) {
			what = "UTF-8 JSON"
		}
		return nil, errorf(KindUnreadable, http.StatusOK, err, "the response body is not %s: %q", what, excerpt(data))
	}
	if len(wr.Choices) == 0 {
		return nil, errorf(KindUnreadable, http.StatusOK, nil, "the response has no choices: %q", excerpt(data))
	}
	ch := wr.Choices[0]
	modelStopped := ch.FinishReason == "length" || ch.FinishReason == "content_filter"
	content := ""
	switch m := ch.Message; {
	case m == nil && !modelStopped:
		return nil, errorf(KindUnreadable, http.StatusOK, nil, "the response's choices[0] has no message: %q", excerpt(data))
	case m == nil:
	case m.Content != nil:
		content = *m.Content
	case m.ReasoningContent == nil && m.Reasoning == nil && m.Refusal == nil && len(m.ToolCalls) == 0 && !modelStopped:
		return nil, errorf(KindUnreadable, http.StatusOK, nil, "the response has no choices[0].message.content: %q", excerpt(data))
	default:
		// A thinking model behind a reasoning parser that wrote only
		// thinking (cut off at max_tokens, as a rule), a refusal, tool
		// calls, a content filter: an empty answer, which the caller
		// regenerates or refuses — not an endpoint failure.
	}
	return c.response(partial{
		model: wr.Model, content: content, finishReason: ch.FinishReason,
		promptTokens: wr.Usage.PromptTokens, completionTokens: wr.Usage.CompletionTokens,
	}), nil
}

// utf8BOM is the byte order mark some servers put before a UTF-8 body;
// JSON parsers may ignore it (RFC 8259 §8.1), and the client does.
var utf8BOM = []byte("\xef\xbb\xbf")

// jsonMediaType reports whether a response's Content-Type may hold a
// chat completion: JSON (application/json, any +json type), or a type
// that says nothing about the body — none, text/plain (what a server that
// sets none sniffs) or application/octet-stream. An HTML page, an event
// stream or XML is not one.
func jsonMediaType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	switch mt = strings.ToLower(strings.TrimSpace(mt)); {
	case mt == "", mt == "application/json", mt == "text/json", strings.HasSuffix(mt, "+json"),
		mt == "text/plain", mt == "application/octet-stream":
		return true
	}
	return false
}

// transportError classifies a failed round trip: the attempt's own deadline
// is a timeout, the caller's context ends the call, anything else is a
// connection failure reported as a server error.
func transportError(actx context.Context, err error, timeout time.Duration) *Error {
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		return errorf(KindTimeout, 0, err, "no answer within the %v per-call deadline", timeout)
	}
	if actx.Err() != nil {
		return errorf(KindCanceled, 0, err, "canceled")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errorf(KindTimeout, 0, err, "network timeout")
	}
	return errorf(KindServer, 0, err, "connection failed")
}

// retryAfter parses a Retry-After header: seconds (integer or decimal) or
// an HTTP date, which is read against now.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil {
		if s <= 0 || s > 1e6 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

func contextExceeded(body string) bool {
	b := strings.ToLower(body)
	return strings.Contains(b, "context length") || strings.Contains(b, "maximum context") ||
		strings.Contains(b, "context_length_exceeded") || strings.Contains(b, "context window")
}

// thinkingUnsupported reports whether a 400's message says the endpoint
// does not take chat_template_kwargs (OpenAI: "Unrecognized request
// argument supplied: chat_template_kwargs").
func thinkingUnsupported(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "chat_template_kwargs") || strings.Contains(m, "enable_thinking")
}

func jsonUnsupported(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "response_format") || strings.Contains(m, "json_object") ||
		strings.Contains(m, "json mode") || strings.Contains(m, "guided_json")
}

// excerpt shortens a body for an error message, at a UTF-8 boundary and
// with invalid bytes replaced, so that the message is valid UTF-8 (it may
// end up in a protobuf string).
func excerpt(b []byte) string {
	const n = 300
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	s, _ := cutUTF8(strings.ToValidUTF8(string(b[:n]), "\uFFFD"), n)
	return s + "…"
}
