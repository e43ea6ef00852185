package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"avtgym/server"
)

// frontDoor loads what the server's front door needs: TLS, principals,
// tracing and the episode log.
func (a *App) frontDoor(ctx context.Context, o *server.Options) error {
	cfg, log := a.cfg, a.cfg.Logger
	if cfg.TLSCert != "" {
		t, err := server.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA)
		if err != nil {
			return err
		}
		o.TLS = t
	}
	if cfg.AuthFile != "" {
		p, err := server.LoadPrincipals(cfg.AuthFile)
		if err != nil {
			return fmt.Errorf("--auth-file: %w", err)
		}
		o.Principals = p
		log.Info("principals", zap.String("file", cfg.AuthFile), zap.Int("principals", p.Len()))
		if cfg.TLSCert == "" {
			log.Warn("bearer tokens travel in clear without TLS (--tls-cert, --tls-key): use this only on loopback or inside an encrypted network (a service mesh)")
		}
	}
	if cfg.OTLPEndpoint != "" {
		t, err := newTracing(ctx, cfg)
		if err != nil {
			return fmt.Errorf("--otlp-endpoint: %w", err)
		}
		a.tracing, o.TracerProvider = t, t.provider
		log.Info("tracing", zap.String("otlp_endpoint", cfg.OTLPEndpoint), zap.Float64("sample", cfg.TraceSample))
	}
	if cfg.EpisodeLog != "" {
		l, err := server.OpenEpisodeLog(cfg.EpisodeLog, server.EpisodeLogOptions{MaxBytes: cfg.EpisodeLogMaxBytes})
		if err != nil {
			return fmt.Errorf("--episode-log: %w", err)
		}
		a.EpisodeLog, o.EpisodeLog = l, l
		log.Info("episode log", zap.String("dir", cfg.EpisodeLog))
	}
	return nil
}

// listen binds addr. A listener that authenticates nobody must be on a
// loopback address unless --insecure-listen-any: the name is checked
// before binding (localhost or a loopback IP; "" and 0.0.0.0 are every
// interface) and the bound address after.
func (a *App) listen(addr, flag string, authenticated bool) (net.Listener, error) {
	guard := !authenticated && !a.cfg.InsecureListenAny
	why := "the gRPC listener authenticates nobody without --auth-file or --client-ca"
	if flag != "--listen" {
		why = flag + " never authenticates"
	}
	refuse := func() error {
		return fmt.Errorf("%s %s: not a loopback address, and %s: listen on 127.0.0.1 or [::1], or pass --insecure-listen-any to accept anyone who can reach it", flag, addr, why)
	}
	if guard && !loopbackName(addr) {
		return nil, refuse()
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if tcp, ok := lis.Addr().(*net.TCPAddr); guard && (!ok || !tcp.IP.IsLoopback()) {
		lis.Close()
		return nil, refuse()
	}
	return lis, nil
}

// loopbackName reports whether addr's host is localhost or a loopback IP.
func loopbackName(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tracing is the OpenTelemetry tracer provider that exports to OTLP.
type tracing struct {
	provider *sdktrace.TracerProvider
	once     sync.Once
	err      error
}

// newTracing builds a tracer provider exporting to cfg.OTLPEndpoint
// (host:port, or a URL: http:// means without TLS) in batches, sampling
// root calls at cfg.TraceSample and following the caller's decision.
func newTracing(ctx context.Context, cfg Config) (*tracing, error) {
	var opts []otlptracegrpc.Option
	if strings.Contains(cfg.OTLPEndpoint, "://") {
		opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint))
	} else {
		opts = append(opts, otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint))
	}
	if cfg.OTLPInsecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	res := resource.NewSchemaless(
		attribute.String("service.name", "avtgym"),
		attribute.String("service.instance.id", host+"-"+strconv.Itoa(os.Getpid())),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.TraceSample))),
	)
	return &tracing{provider: tp}, nil
}

// shutdown flushes the spans and stops the exporter (once).
func (t *tracing) shutdown(ctx context.Context) error {
	t.once.Do(func() { t.err = t.provider.Shutdown(ctx) })
	return t.err
}
