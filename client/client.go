// Package client is the Go client of an avtgym server: a connection whose
// calls are retried on UNAVAILABLE (safe, because resets and steps are
// idempotent on the episode token). Episodes are played through package
// driver (driver.Remote(c.Env)); the Python client lives in client/python.
package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"avtgym/internal/grpcpool"
	pb "avtgym/proto/avtgym/v1"
)

// Options configure a client.
type Options struct {
	// Attempts is how many times a call is tried when the server is
	// UNAVAILABLE; 0 means 5, 1 disables retries.
	Attempts int
	// Backoff is the first wait between attempts; it doubles each time,
	// with jitter, up to one second. Zero means 50 ms.
	Backoff time.Duration
	// CallTimeout, when positive, bounds each call that has no earlier
	// deadline of its own.
	CallTimeout time.Duration
	// DialOptions are added to the connection's options.
	DialOptions []grpc.DialOption
	// Sleep waits d between attempts, returning early with ctx's error;
	// nil means real time. Tests inject one to check the backoff without
	// waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Client is a connection to one avtgym server (or a load balancer in front
// of replicas sharing a token key).
type Client struct {
	// Env is the EnvService client; its calls are retried on UNAVAILABLE.
	Env pb.EnvServiceClient
	// Health is the standard health client.
	Health healthpb.HealthClient
	conn   *grpc.ClientConn
}

// Dial connects to addr (host:port) without TLS, as servers on a trusted
// network or loopback are run. The connection is lazy: the first call
// connects.
func Dial(addr string, opt Options) (*Client, error) {
	if opt.Attempts == 0 {
		opt.Attempts = 5
	}
	if opt.Backoff == 0 {
		opt.Backoff = 50 * time.Millisecond
	}
	if opt.Sleep == nil {
		opt.Sleep = sleep
	}
	dopts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retry(opt)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20), grpc.ForceCodecV2(grpcpool.Codec{})),
		experimental.WithBufferPool(grpcpool.Shared),
	}, opt.DialOptions...)
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, err
	}
	return &Client{Env: pb.NewEnvServiceClient(conn), Health: healthpb.NewHealthClient(conn), conn: conn}, nil
}

// Conn returns the underlying connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// retry retries calls that fail with UNAVAILABLE with jittered exponential
// backoff, within the call's deadline. Every EnvService call may be
// repeated: a step is a pure function of the token and the action.
func retry(opt Options) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if _, has := ctx.Deadline(); !has && opt.CallTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, opt.CallTimeout)
			defer cancel()
		}
		wait := opt.Backoff
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if status.Code(err) != codes.Unavailable || attempt >= opt.Attempts {
				return err
			}
			jittered := wait/2 + rand.N(wait/2+1)
			if opt.Sleep(ctx, jittered) != nil {
				return err
			}
			wait = min(2*wait, time.Second)
		}
	}
}
