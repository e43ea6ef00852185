package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	pb "avtgym/proto/avtgym/v1"
)

// Role is what a principal may ask for.
type Role string

// The roles of an auth file.
const (
	// RoleTrainer may do everything, including asking for privileged data
	// (include_privileged): resolutions, references and credits.
	RoleTrainer Role = "trainer"
	// RolePolicy may play episodes and ask the oracle, but never receives
	// privileged data: a request that asks for it is refused with
	// PERMISSION_DENIED / PRIVILEGED_DENIED.
	RolePolicy Role = "policy"
)

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller in logs, metrics and the per-principal
	// admission limit; empty on a server without authentication.
	Name string
	Role Role
}

// anonymous is the principal of every call to a server that does not
// authenticate its callers: trusted as a trainer, as before authentication
// existed (such a server listens on loopback only unless told otherwise).
var anonymous = &Principal{Role: RoleTrainer}

func (p *Principal) mayReadPrivileged() bool { return p.Role == RoleTrainer }

// Principals are the callers an auth file (serve --auth-file) names, each
// with a role and its credentials: SHA-256 digests of bearer tokens, and
// client-certificate subjects (for mutual TLS).
type Principals struct {
	byToken   map[[sha256.Size]byte]*Principal
	bySubject map[string]*Principal
	names     int
}

// Len is the number of principals.
func (p *Principals) Len() int { return p.names }

// authFile is the auth file's format:
//
//	{"principals": [
//	  {"name": "grpo-trainer", "role": "trainer", "token_sha256": "<64 hex digits>"},
//	  {"name": "rollout-workers", "role": "policy", "token_sha256": ["<old>", "<new>"]},
//	  {"name": "eval", "role": "trainer", "tls_subject": "eval.avtgym.internal"}
//	]}
type authFile struct {
	Principals []authEntry `json:"principals"`
}

type authEntry struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	// TokenSHA256 holds the hex SHA-256 digests of the principal's bearer
	// tokens (one string, or a list while tokens are rotated).
	TokenSHA256 stringOrList `json:"token_sha256"`
	// TLSSubject holds client-certificate subjects: a certificate whose
	// common name, DNS name, URI or e-mail SAN equals one of them
	// authenticates as the principal (with serve --client-ca).
	TLSSubject stringOrList `json:"tls_subject"`
}

type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings")
	}
	*s = many
	return nil
}

// LoadPrincipals reads an auth file.
func LoadPrincipals(path string) (*Principals, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := ParsePrincipals(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParsePrincipals parses an auth file's contents (see authFile). Every
// principal needs a unique name, a known role and at least one credential;
// a token digest or subject may name one principal only.
func ParsePrincipals(b []byte) (*Principals, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f authFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	p := &Principals{byToken: map[[sha256.Size]byte]*Principal{}, bySubject: map[string]*Principal{}}
	names := map[string]bool{}
	for i, e := range f.Principals {
		at := fmt.Sprintf("principals[%d]", i)
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("%s.name: missing", at)
		case names[e.Name]:
			return nil, fmt.Errorf("%s.name: %q is named twice", at, e.Name)
		case e.Role != RoleTrainer && e.Role != RolePolicy:
			return nil, fmt.Errorf("%s.role: %q, want %q or %q", at, e.Role, RoleTrainer, RolePolicy)
		case len(e.TokenSHA256) == 0 && len(e.TLSSubject) == 0:
			return nil, fmt.Errorf("%s: %q has no credential (token_sha256 or tls_subject)", at, e.Name)
		}
		names[e.Name] = true
		pr := &Principal{Name: e.Name, Role: e.Role}
		for j, h := range e.TokenSHA256 {
			d, err := hex.DecodeString(strings.TrimSpace(h))
			if err != nil || len(d) != sha256.Size {
				return nil, fmt.Errorf("%s.token_sha256[%d]: want 64 hex digits (the SHA-256 of the token, e.g. from `printf %%s TOKEN | sha256sum`)", at, j)
			}
			k := [sha256.Size]byte(d)
			if q := p.byToken[k]; q != nil {
				return nil, fmt.Errorf("%s.token_sha256[%d]: the same token is also %q's", at, j, q.Name)
			}
			p.byToken[k] = pr
		}
		for j, s := range e.TLSSubject {
			if s == "" {
				return nil, fmt.Errorf("%s.tls_subject[%d]: empty", at, j)
			}
			if q := p.bySubject[s]; q != nil {
				return nil, fmt.Errorf("%s.tls_subject[%d]: %q is also %q's", at, j, s, q.Name)
			}
			p.bySubject[s] = pr
		}
	}
	p.names = len(names)
	if p.names == 0 {
		return nil, fmt.Errorf("auth file: no principals")
	}
	return p, nil
}

// TokenDigest is the hex SHA-256 digest of a bearer token, as an auth
// file's token_sha256 holds it.
func TokenDigest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// principalKey is the context key of the authenticated principal.
type principalKey struct{}

// PrincipalFrom returns the principal a call was authenticated as (nil
// outside a call).
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// authenticates reports whether the server checks its callers' identity.
func (s *Server) authenticates() bool { return s.opt.Principals != nil || s.clientCerts }

// authenticate finds the caller's principal: by its bearer token, else by
// its verified client certificate. A server without authentication treats
// every caller as anonymous. Refusals are counted.
func (s *Server) authenticate(ctx context.Context) (p *Principal, err error) {
	defer func() {
		if err != nil {
			s.unauthenticated.Add(1)
		}
	}()
	if !s.authenticates() {
		return anonymous, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if vals := md.Get("authorization"); len(vals) > 0 {
		scheme, tok, ok := strings.Cut(vals[0], " ")
		tok = strings.TrimSpace(tok)
		if len(vals) > 1 || !ok || !strings.EqualFold(scheme, "bearer") || tok == "" {
			return nil, statusError(codes.Unauthenticated, pb.ErrorReason_CREDENTIALS_INVALID, "", `the authorization metadata must be one "Bearer TOKEN"`, nil, 0)
		}
		if s.opt.Principals == nil {
			return nil, statusError(codes.Unauthenticated, pb.ErrorReason_CREDENTIALS_INVALID, "", "this server takes no bearer tokens (it authenticates client certificates only)", nil, 0)
		}
		if p := s.opt.Principals.byToken[sha256.Sum256([]byte(tok))]; p != nil {
			return p, nil
		}
		return nil, statusError(codes.Unauthenticated, pb.ErrorReason_CREDENTIALS_INVALID, "", "the bearer token matches no principal", nil, 0)
	}
	if cert := peerCert(ctx); cert != nil {
		if s.opt.Principals == nil {
			// Mutual TLS without an auth file: the CA vouches for every
			// client it signed, as a trainer.
			return &Principal{Name: certName(cert), Role: RoleTrainer}, nil
		}
		for _, sub := range certSubjects(cert) {
			if p := s.opt.Principals.bySubject[sub]; p != nil {
				return p, nil
			}
		}
		return nil, statusError(codes.Unauthenticated, pb.ErrorReason_CREDENTIALS_INVALID, "",
			fmt.Sprintf("the client certificate (%s) names no principal", certName(cert)), nil, 0)
	}
	return nil, statusError(codes.Unauthenticated, pb.ErrorReason_CREDENTIALS_MISSING, "",
		`this server authenticates its callers: send "authorization: Bearer TOKEN" metadata (or a client certificate)`, nil, 0)
}

// peerCert is the call's verified client certificate, if any.
func peerCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return ti.State.VerifiedChains[0][0]
}

// certSubjects are the names a certificate can be matched by: its common
// name and its DNS, URI and e-mail SANs.
func certSubjects(c *x509.Certificate) []string {
	out := []string{}
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	out = append(out, c.DNSNames...)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return append(out, c.EmailAddresses...)
}

func certName(c *x509.Certificate) string {
	if s := certSubjects(c); len(s) > 0 {
		return s[0]
	}
	return "serial " + c.SerialNumber.String()
}

// privilegedField names the first field of a request that asks for
// privileged data ("steps[3].include_privileged"), or "" when it asks for
// none. Every request type that can return privileged data is listed; the
// server tests check that no other method's response carries any.
func privilegedField(req any) string {
	switch r := req.(type) {
	case *pb.ResetRequest:
		if r.GetIncludePrivileged() {
			return "include_privileged"
		}
	case *pb.StepRequest:
		if r.GetIncludePrivileged() {
			return "include_privileged"
		}
	case *pb.AskRequest:
		if r.GetIncludePrivileged() {
			return "include_privileged"
		}
	case *pb.ListTasksRequest:
		// TaskSummary.sample_type: it tells whether a drift will come.
		if r.GetIncludePrivileged() {
			return "include_privileged"
		}
	case *pb.GetTaskRequest:
		if r.GetIncludePrivileged() {
			return "include_privileged"
		}
	case *pb.ResetBatchRequest:
		for i, it := range r.GetRequests() {
			if it.GetIncludePrivileged() {
				return fmt.Sprintf("requests[%d].include_privileged", i)
			}
		}
	case *pb.StepBatchRequest:
		for i, it := range r.GetSteps() {
			if it.GetIncludePrivileged() {
				return fmt.Sprintf("steps[%d].include_privileged", i)
			}
		}
	}
	return ""
}

// stripPrivileged clears any privileged data from a response and reports
// whether there was some: a second line of defence behind privilegedField,
// for a principal that may not read it (finding any is a server bug).
func stripPrivileged(resp any) bool {
	found := false
	switch r := resp.(type) {
	case *pb.ResetResponse:
		found = stripReset(r)
	case *pb.StepResponse:
		if r != nil && r.Privileged != nil {
			r.Privileged, found = nil, true
		}
	case *pb.AskResponse:
		if r != nil && r.Privileged != nil {
			r.Privileged, found = nil, true
		}
	case *pb.GetTaskResponse:
		if r != nil && r.Privileged != nil {
			r.Privileged, found = nil, true
		}
	case *pb.ListTasksResponse:
		for _, t := range r.GetTasks() {
			if t.SampleType != "" || t.SampleTypeEnum != pb.SampleType_SAMPLE_TYPE_UNSPECIFIED {
				t.SampleType, t.SampleTypeEnum, found = "", pb.SampleType_SAMPLE_TYPE_UNSPECIFIED, true
			}
		}
	case *pb.ResetBatchResponse:
		for _, it := range r.GetResults() {
			found = stripReset(it.GetResponse()) || found
		}
	case *pb.StepBatchResponse:
		for _, it := range r.GetResults() {
			if resp := it.GetResponse(); resp != nil && resp.Privileged != nil {
				resp.Privileged, found = nil, true
			}
		}
	}
	return found
}

// stripReset clears a reset's privileged data: each episode's, and the
// group's shared one (ResetRequest.share_group_observation).
func stripReset(r *pb.ResetResponse) bool {
	found := false
	if r != nil && r.SharedPrivileged != nil {
		r.SharedPrivileged, found = nil, true
	}
	for _, e := range r.GetEpisodes() {
		if e.Privileged != nil {
			e.Privileged, found = nil, true
		}
	}
	return found
}
