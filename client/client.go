// Package client is the Go client of an avtgym server: a connection whose
// calls are retried when the server says a retry may succeed (safe, because
// resets and steps are idempotent on the episode token), with TLS and a
// bearer token when the server asks for them (set in Options or read from
// the AVTGYM_TLS* and AVTGYM_TOKEN* variables), balancing calls round-robin
// over a DNS name's addresses or a list of targets. Episodes are played
// through package driver (driver.Remote(c.Env)); the Python client lives in
// client/python.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/internal/grpcpool"
	pb "avtgym/proto/avtgym/v1"
)

// The environment variables that Dial reads when Options leave TLS and
// the token unset (and Options.NoEnv is false); the Python client reads
// the same ones. They let every command and trainer reach a server that
// requires TLS or a token without a flag of its own.
const (
	// EnvToken holds a bearer token.
	EnvToken = "AVTGYM_TOKEN"
	// EnvTokenFile names a file holding a bearer token (surrounding
	// whitespace is ignored).
	EnvTokenFile = "AVTGYM_TOKEN_FILE"
	// EnvTLS set to 1 or true connects with TLS, verifying the server
	// against the system's roots.
	EnvTLS = "AVTGYM_TLS"
	// EnvTLSCA names a PEM file of the CA that signed the server's
	// certificate (implies TLS).
	EnvTLSCA = "AVTGYM_TLS_CA"
	// EnvTLSCert and EnvTLSKey name the client's PEM certificate and key,
	// for mutual TLS (imply TLS).
	EnvTLSCert = "AVTGYM_TLS_CERT"
	EnvTLSKey  = "AVTGYM_TLS_KEY"
	// EnvTLSServerName overrides the name checked in the server's
	// certificate.
	EnvTLSServerName = "AVTGYM_TLS_SERVER_NAME"
)

// Options configure a client.
type Options struct {
	// Attempts is how many times a call is tried when the server says a
	// retry may succeed; 0 means 5, 1 disables retries.
	Attempts int
	// Backoff is the first wait between attempts of a call that failed
	// with UNAVAILABLE and no RetryInfo; it doubles each time, with
	// jitter, up to one second. Zero means 50 ms.
	Backoff time.Duration
	// CallTimeout, when positive, bounds each call that has no earlier
	// deadline of its own.
	CallTimeout time.Duration
	// TLS, when set, connects with TLS (TLSFiles builds one from PEM
	// files); nil means plaintext, unless the environment says otherwise.
	TLS *tls.Config
	// Token is a bearer token sent with every call ("authorization:
	// Bearer TOKEN"); empty means none, unless the environment has one.
	Token string
	// NoEnv ignores the AVTGYM_TOKEN* and AVTGYM_TLS* environment
	// variables.
	NoEnv bool
	// DialOptions are added to the connection's options.
	DialOptions []grpc.DialOption
	// Sleep waits d between attempts, returning early with ctx's error;
	// nil means real time. Tests inject one to check the backoff without
	// waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// RawResets sends resets as the caller wrote them and returns their
	// responses as the server sent them. By default the client asks for
	// the shared form of a group (ResetRequest.share_group_observation, on
	// every Reset and every ResetBatch item), in which the server sends the
	// group's observation once instead of once per episode, and rebuilds
	// each episode's observation and privileged data (ExpandReset) before
	// the call returns: callers get the default form, whatever the server's
	// version. With RawResets, a request that sets the flag itself gets the
	// shared form.
	RawResets bool
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
	// Env is the EnvService client; its calls are retried (see Dial).
	Env pb.EnvServiceClient
	// Oracle is the OracleService client, retried the same way.
	Oracle pb.OracleServiceClient
	// Health is the standard health client.
	Health healthpb.HealthClient
	conn   *grpc.ClientConn
}

// TLSFiles builds a client TLS configuration from PEM files: the CA that
// signed the server's certificate (empty: the system's roots), the
// client's certificate and key for mutual TLS (both or neither), and the
// name to check in the server's certificate (empty: the host dialled).
func TLSFiles(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("a client certificate needs both its certificate and its key")
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// fromEnv fills TLS and Token from the environment where they are unset.
func (o *Options) fromEnv() error {
	if o.NoEnv {
		return nil
	}
	if o.Token == "" {
		o.Token = os.Getenv(EnvToken)
		if f := os.Getenv(EnvTokenFile); o.Token == "" && f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("%s: %w", EnvTokenFile, err)
			}
			o.Token = strings.TrimSpace(string(b))
		}
	}
	if o.TLS == nil {
		ca, cert, key := os.Getenv(EnvTLSCA), os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey)
		on := os.Getenv(EnvTLS)
		if ca != "" || cert != "" || on == "1" || strings.EqualFold(on, "true") {
			t, err := TLSFiles(ca, cert, key, os.Getenv(EnvTLSServerName))
			if err != nil {
				return fmt.Errorf("AVTGYM_TLS*: %w", err)
			}
			o.TLS = t
		}
	}
	return nil
}

// bearer sends a token with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false without TLS: a token may be sent in
// clear to a server on loopback or inside an encrypted network (the
// server warns about it).
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// RoundRobin is the service config Dial gives every connection: calls go
// to every address the target resolves to in turn (rather than all to the
// first, gRPC's default), so that one client spreads its calls over the
// replicas behind a headless Service or an address list. A DialOption
// grpc.WithDefaultServiceConfig in Options.DialOptions replaces it.
const RoundRobin = `{"loadBalancingConfig": [{"round_robin": {}}]}`

// listScheme is the resolver scheme of an address list (see target).
const listScheme = "avtgym-list"

// target turns Dial's addr into a gRPC target and the dial options it
// needs. A gRPC target ("host:port", "dns:///name:port" — every address
// DNS returns, re-resolved when connections fail —, "unix:///path", ...)
// is used as it is; a comma-separated list of host:port gets a resolver of
// its own, and the first address's host names the server (its TLS
// certificate's name).
func target(addr string) (string, []grpc.DialOption, error) {
	if !strings.Contains(addr, ",") {
		return addr, nil, nil
	}
	var addrs []resolver.Address
	for _, a := range strings.Split(addr, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return "", nil, fmt.Errorf("address list %q: %q is not host:port", addr, a)
		}
		addrs = append(addrs, resolver.Address{Addr: a})
	}
	r := manual.NewBuilderWithScheme(listScheme)
	r.InitialState(resolver.State{Addresses: addrs})
	return listScheme + ":///" + addrs[0].Addr, []grpc.DialOption{grpc.WithResolvers(r)}, nil
}

// Dial connects to addr: host:port, a gRPC target such as
// dns:///name:port (a headless Service), or a comma-separated list
// host1:port,host2:port; calls are balanced round-robin over every
// address (RoundRobin). Plaintext, or TLS when Options.TLS (or the
// environment) says so, with a bearer token when there is one. The
// connection is lazy: the first call connects. Every call is retried (see
// retry) within its deadline, so a call that failed on a replica going
// away is sent again, to another.
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
	if err := opt.fromEnv(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if opt.TLS != nil {
		creds = credentials.NewTLS(opt.TLS)
	}
	tgt, topts, err := target(addr)
	if err != nil {
		return nil, err
	}
	// shareGroups runs outside retry, so that a retried call resends its
	// copy of the request.
	chain := []grpc.UnaryClientInterceptor{retry(opt)}
	if !opt.RawResets {
		chain = []grpc.UnaryClientInterceptor{shareGroups, retry(opt)}
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(RoundRobin),
		grpc.WithChainUnaryInterceptor(chain...),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20), grpc.ForceCodecV2(grpcpool.Codec{})),
		experimental.WithBufferPool(grpcpool.Shared),
	}
	if opt.Token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer{token: opt.Token, secure: opt.TLS != nil}))
	}
	dopts = append(dopts, topts...)
	conn, err := grpc.NewClient(tgt, append(dopts, opt.DialOptions...)...)
	if err != nil {
		return nil, err
	}
	return &Client{Env: pb.NewEnvServiceClient(conn), Oracle: pb.NewOracleServiceClient(conn), Health: healthpb.NewHealthClient(conn), conn: conn}, nil
}

// Conn returns the underlying connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// retryAfter says whether a failed call may succeed if sent again, and
// after how long the server asked to wait (its RetryInfo delay; negative
// when it gave none): UNAVAILABLE (the transport failed, or the server is
// draining: DRAINING), and RESOURCE_EXHAUSTED with reason OVERLOADED
// (admission control refused the call) or VERIFIER_BUSY (no query slot).
// Other RESOURCE_EXHAUSTED reasons (a request or response too large) would
// fail again.
func retryAfter(err error) (bool, time.Duration) {
	st, ok := status.FromError(err)
	if !ok {
		return false, -1
	}
	reason, delay := "", time.Duration(-1)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			delay = max(d.GetRetryDelay().AsDuration(), 0)
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return true, delay
	case codes.ResourceExhausted:
		return reason == pb.ErrorReason_OVERLOADED.String() || reason == pb.ErrorReason_VERIFIER_BUSY.String(), delay
	}
	return false, -1
}

// retry retries the calls retryAfter allows, within the call's deadline:
// after the server's RetryInfo delay plus up to 10% jitter (so that many
// clients told the same delay do not all come back at once), or, without
// one, with jittered exponential backoff. Every EnvService and
// OracleService call may be repeated: a step is a pure function of the
// token and the action, and a refused call was not run.
func retry(opt Options) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if _, has := ctx.Deadline(); !has && opt.CallTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, opt.CallTimeout)
			defer cancel()
		}
		backoff := opt.Backoff
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			again, delay := retryAfter(err)
			if !again || attempt >= opt.Attempts {
				return err
			}
			wait := backoff/2 + rand.N(backoff/2+1)
			if delay >= 0 {
				wait = delay + rand.N(delay/10+1)
			}
			if opt.Sleep(ctx, wait) != nil {
				return err
			}
			backoff = min(2*backoff, time.Second)
		}
	}
}

// shareGroups asks for the shared form of every reset and gives the
// caller the default form: each episode with its observation and
// privileged data (see Options.RawResets). The caller's request is never
// changed (another goroutine may be sending it too): a reset that needs
// the flag is sent as a copy.
func shareGroups(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
	err := invoker(ctx, method, withShare(req), reply, cc, callOpts...)
	if err == nil {
		switch r := reply.(type) {
		case *pb.ResetResponse:
			ExpandReset(r)
		case *pb.ResetBatchResponse:
			for _, it := range r.GetResults() {
				ExpandReset(it.GetResponse())
			}
		}
	}
	return err
}

// withShare is req with share_group_observation set on its resets; req
// itself when it has none to set.
func withShare(req any) any {
	switch r := req.(type) {
	case *pb.ResetRequest:
		if r != nil && !r.GetShareGroupObservation() {
			c := proto.Clone(r).(*pb.ResetRequest)
			c.ShareGroupObservation = true
			return c
		}
	case *pb.ResetBatchRequest:
		items := r.GetRequests()
		if !slices.ContainsFunc(items, func(it *pb.ResetRequest) bool { return !it.GetShareGroupObservation() }) {
			return req
		}
		c := &pb.ResetBatchRequest{Requests: make([]*pb.ResetRequest, len(items))}
		for i, it := range items {
			c.Requests[i] = withShare(it).(*pb.ResetRequest)
		}
		return c
	}
	return req
}

// ExpandReset turns a ResetResponse in the shared form
// (ResetRequest.share_group_observation) into the default form, in place:
// every episode without an observation gets the shared observation, every
// episode without privileged data the shared privileged data, and the
// shared fields are cleared. The episodes then share one Observation (and
// one Privileged) message, as an in-process env.Reset's do: treat them as
// read-only, or clone one before changing it. A response in the default
// form is left as it is, so it may be called on any response.
func ExpandReset(r *pb.ResetResponse) {
	if r == nil || (r.SharedObservation == nil && r.SharedPrivileged == nil) {
		return
	}
	for _, e := range r.GetEpisodes() {
		if e.Observation == nil {
			e.Observation = r.SharedObservation
		}
		if e.Privileged == nil {
			e.Privileged = r.SharedPrivileged
		}
	}
	r.SharedObservation, r.SharedPrivileged = nil, nil
}
