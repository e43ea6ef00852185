package server_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"avtgym/app"
	"avtgym/client"
	"avtgym/corpus/demo"
	"avtgym/internal/testcerts"
	pb "avtgym/proto/avtgym/v1"
)

// demoDir writes the demo corpus (whose TIDE samples are tide-a1-C …) to
// a directory.
func demoDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, demo.FS); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tideSample is one TIDE sample of the demo corpus as the trainer sees it.
type tideSample struct {
	public, record, sampleType, cluster, drift string
	terms                                      []string
	reference                                  string
}

// tideSamples lists the demo's TIDE samples by cluster and sample type,
// from the trainer's privileged view (ListTasks and GetTask with
// include_privileged).
func tideSamples(t *testing.T, trainer *client.Client) map[string]map[string]tideSample {
	t.Helper()
	ctx := ctxT(t)
	list, err := trainer.Env.ListTasks(ctx, &pb.ListTasksRequest{PageSize: 1000, IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]tideSample{}
	for _, ts := range list.GetTasks() {
		if ts.GetSampleType() == "" {
			continue
		}
		if ts.GetSampleTypeEnum() == pb.SampleType_SAMPLE_TYPE_UNSPECIFIED {
			t.Errorf("%s: sample_type %q without its enum", ts.GetTaskId(), ts.GetSampleType())
		}
		g, err := trainer.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: ts.GetTaskId(), IncludePrivileged: true})
		if err != nil {
			t.Fatal(err)
		}
		p := g.GetPrivileged()
		s := tideSample{public: ts.GetTaskId(), record: p.GetRecordId(), sampleType: ts.GetSampleType(),
			cluster: p.GetTide().GetCluster(), drift: p.GetTide().GetDriftUtterance()}
		for _, a := range p.GetAmbiguities() {
			s.terms = append(s.terms, a.GetTerm())
		}
		if len(p.GetReferenceSql()) > 0 {
			s.reference = p.GetReferenceSql()[0]
		}
		if p.GetTide().GetSampleTypeEnum() != ts.GetSampleTypeEnum() {
			t.Errorf("%s: TideInfo.sample_type_enum %v, summary %v", s.record, p.GetTide().GetSampleTypeEnum(), ts.GetSampleTypeEnum())
		}
		if out[s.cluster] == nil {
			out[s.cluster] = map[string]tideSample{}
		}
		out[s.cluster][s.sampleType] = s
	}
	if len(out) < 2 {
		t.Fatalf("the demo corpus has %d TIDE anchors; the test needs some", len(out))
	}
	return out
}

// scrub is a response as text with its tokens and episode uids cleared and
// the given ids replaced by "<id>": what two episodes on different tasks
// may differ in (a uid is random, and differs between any two resets).
func scrub(m proto.Message, ids ...string) string {
	m = proto.Clone(m)
	clearTokens(m.ProtoReflect())
	s := prototext.MarshalOptions{Multiline: true}.Format(m)
	for _, id := range ids {
		s = strings.ReplaceAll(s, id, "<id>")
	}
	return s
}

func clearTokens(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "token" && fd.Kind() == protoreflect.BytesKind, fd.Name() == "episode_uid":
			m.Clear(fd)
		case fd.Message() != nil && fd.IsList():
			for i := range v.List().Len() {
				clearTokens(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			clearTokens(v.Message())
		}
		return true
	})
}

// typeSuffix matches a TIDE instance id's sample-type suffix.
var typeSuffix = regexp.MustCompile(`-[CDJ]\b`)

// TestPolicyLearnsNothingOfDriftBeforeTheDriftTurn: a policy principal
// that calls every RPC (listed from the services' descriptors, so that a
// new one fails this test until it is covered) learns nothing of a TIDE
// sample's type, or whether a drift will come, before the drift turn:
// - no response names a record id (TIDE's instance_id, <anchor>-C/-D/-J),
// a sample type, the drift utterance, or an id ending in a type suffix;
// - the chain-only and the joint sample of each anchor (the same request,
// the same chain) give the same responses to the same calls, up to their
// public ids and tokens, until the first SQL, after which the joint one's
// drift turn comes (which shows the comparison would see a difference);
// - naming a task by its record id is answered exactly as an unknown id.
func TestPolicyLearnsNothingOfDriftBeforeTheDriftTurn(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	srv := ca.Server(t, "server")
	r := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, AuthFile: writeAuthFile(t, nil), Corpora: []string{demoDir(t)}})
	opt := func(tok string) client.Options { o := tlsFiles(t, ca, nil); o.Token = tok; return o }
	trainer, policy := dial(t, r.addr, opt(trainerToken)), dial(t, r.addr, opt(policyToken))
	anchors := tideSamples(t, trainer)

	var secrets []string // what no policy response may contain
	for _, byType := range anchors {
		for st, s := range byType {
			secrets = append(secrets, s.record, st)
			if s.drift != "" {
				secrets = append(secrets, s.drift)
			}
			if typeSuffix.MatchString(s.public) || strings.Contains(s.public, s.cluster) {
				t.Errorf("public id %q of %s tells its anchor or type", s.public, s.record)
			}
		}
	}
	leaks := func(what string, m proto.Message) {
		t.Helper()
		text := prototext.Format(m)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s: a policy response contains %q:\n%s", what, s, text)
			}
		}
	}

	// The RPCs, each probed below: a new one must be added.
	covered := map[string]bool{}
	for _, f := range []protoreflect.FileDescriptor{pb.File_avtgym_v1_env_service_proto, pb.File_avtgym_v1_oracle_service_proto} {
		for i := range f.Services().Len() {
			for j := range f.Services().Get(i).Methods().Len() {
				covered[string(f.Services().Get(i).Methods().Get(j).FullName())] = false
			}
		}
	}
	probe := func(m string) { covered["avtgym.v1."+m] = true }
	ctx := ctxT(t)

	probe("EnvService.ListCorpora")
	probe("EnvService.ListOracles")
	probe("EnvService.ListProtocols")
	for _, call := range []func() (proto.Message, error){
		func() (proto.Message, error) { return policy.Env.ListCorpora(ctx, &pb.ListCorporaRequest{}) },
		func() (proto.Message, error) { return policy.Env.ListOracles(ctx, &pb.ListOraclesRequest{}) },
		func() (proto.Message, error) { return policy.Env.ListProtocols(ctx, &pb.ListProtocolsRequest{}) },
	} {
		m, err := call()
		if err != nil {
			t.Fatal(err)
		}
		leaks("listing", m)
	}

	probe("EnvService.ListTasks")
	list, err := policy.Env.ListTasks(ctx, &pb.ListTasksRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	leaks("ListTasks", list)
	summaries := map[string]*pb.TaskSummary{}
	for _, ts := range list.GetTasks() {
		summaries[ts.GetTaskId()] = ts
	}

	for cluster, byType := range anchors {
		c, j, d := byType["chain_only"], byType["joint"], byType["drift_only"]
		if c.public == "" || j.public == "" || d.public == "" {
			t.Fatalf("anchor %s lacks a sample type: %+v", cluster, byType)
		}
		same := func(what string, a, b proto.Message) {
			t.Helper()
			if x, y := scrub(a, c.public, j.public), scrub(b, c.public, j.public); x != y {
				t.Errorf("%s: anchor %s: the chain-only and the joint sample differ before the drift:\n%s\n---\n%s", what, cluster, x, y)
			}
			leaks(what, a)
			leaks(what, b)
		}
		same("ListTasks", summaries[c.public], summaries[j.public])

		probe("EnvService.GetTask")
		gc, err1 := policy.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: c.public})
		gj, err2 := policy.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: j.public})
		gd, err3 := policy.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: d.public})
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatal(err1, err2, err3)
		}
		same("GetTask", gc, gj)
		leaks("GetTask", gd)

		probe("OracleService.Ask")
		q := fullQ(c.terms[0])
		ac, err1 := policy.Oracle.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: c.public}, Question: q})
		aj, err2 := policy.Oracle.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: j.public}, Question: q})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		same("Ask", ac, aj)

		for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P} {
			opts := &pb.EpisodeOptions{Protocol: p}
			probe("EnvService.Reset")
			rc, err1 := policy.Env.Reset(ctx, &pb.ResetRequest{TaskId: c.public, Seed: seed(7), Options: opts})
			rj, err2 := policy.Env.Reset(ctx, &pb.ResetRequest{TaskId: j.public, Seed: seed(7), Options: opts})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			same(p.String()+" Reset", rc, rj)
			if p == pb.Protocol_PROTOCOL_TIDE_F {
				rd, err := policy.Env.Reset(ctx, &pb.ResetRequest{TaskId: d.public, Seed: seed(7), Options: opts})
				if err != nil {
					t.Fatal(err)
				}
				leaks("Reset drift_only", rd)
			}
			probe("EnvService.ResetBatch")
			bc, err1 := policy.Env.ResetBatch(ctx, &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{{TaskId: c.public, Seed: seed(7), Options: opts}}})
			bj, err2 := policy.Env.ResetBatch(ctx, &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{{TaskId: j.public, Seed: seed(7), Options: opts}}})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			same(p.String()+" ResetBatch", bc, bj)

			// Two questions (the chain's, then one no layer covers), as
			// steps and as a batch, before any SQL.
			tc, tj := rc.GetEpisodes()[0].GetToken(), rj.GetEpisodes()[0].GetToken()
			for _, text := range []string{fullQ(c.terms[len(c.terms)-1]), "Should the result list one row per product?"} {
				probe("EnvService.Step")
				sc, err1 := policy.Env.Step(ctx, &pb.StepRequest{Token: tc, Action: ask(text)})
				sj, err2 := policy.Env.Step(ctx, &pb.StepRequest{Token: tj, Action: ask(text)})
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				same(p.String()+" Step ask", sc, sj)
				probe("EnvService.StepBatch")
				xc, err1 := policy.Env.StepBatch(ctx, &pb.StepBatchRequest{Steps: []*pb.StepRequest{{Token: tc, Action: ask(text)}}})
				xj, err2 := policy.Env.StepBatch(ctx, &pb.StepBatchRequest{Steps: []*pb.StepRequest{{Token: tj, Action: ask(text)}}})
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				same(p.String()+" StepBatch ask", xc, xj)
				tc, tj = sc.GetToken(), sj.GetToken()
			}
			// The first SQL: the drift turn comes for the joint sample
			// only, and the comparison sees it.
			sc, err1 := policy.Env.Step(ctx, &pb.StepRequest{Token: tc, Action: submit(c.reference)})
			sj, err2 := policy.Env.Step(ctx, &pb.StepRequest{Token: tj, Action: submit(j.reference)})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if scrub(sc, c.public, j.public) == scrub(sj, c.public, j.public) || !strings.Contains(prototext.Format(sj), j.drift) {
				t.Errorf("%s: anchor %s: after the first SQL the joint sample shows no drift turn:\n%v", p, cluster, sj)
			}
		}

		// A record id is answered as an unknown id, by every RPC that
		// takes a task id.
		unknown := c.cluster + "-X"
		sameError := func(what string, call func(id string) error) {
			t.Helper()
			for _, s := range []tideSample{c, j, d} {
				got, want := status.Convert(call(s.record)), status.Convert(call(unknown))
				if got.Code() != codes.NotFound || want.Code() != codes.NotFound ||
					strings.ReplaceAll(got.Message(), s.record, "<id>") != strings.ReplaceAll(want.Message(), unknown, "<id>") ||
					reasonOf(got.Err()) != reasonOf(want.Err()) {
					t.Errorf("%s by record id %s: %v; by an unknown id: %v", what, s.record, got, want)
				}
			}
		}
		sameError("GetTask", func(id string) error {
			_, err := policy.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
			return err
		})
		sameError("Reset", func(id string) error {
			_, err := policy.Env.Reset(ctx, &pb.ResetRequest{TaskId: id})
			return err
		})
		sameError("ResetBatch", func(id string) error {
			resp, err := policy.Env.ResetBatch(ctx, &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{{TaskId: id}}})
			if err != nil {
				return err
			}
			return status.ErrorProto(resp.GetResults()[0].GetStatus())
		})
		sameError("Ask", func(id string) error {
			_, err := policy.Oracle.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: id}, Question: q})
			return err
		})
		// The trainer may still use record ids (fixtures and tests name them).
		if _, err := trainer.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: c.record}); err != nil {
			t.Errorf("trainer GetTask by record id: %v", err)
		}
	}
	for m, ok := range covered {
		if !ok {
			t.Errorf("%s is not probed: add it to this test", m)
		}
	}
}

// TestResetSampleTypes: ResetRequest.sample_types restricts the draw, the
// server resolving the labels; an unknown value is refused; a policy may
// use it (it learns only what it chose) and nothing in the episode echoes
// it.
func TestResetSampleTypes(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	srv := ca.Server(t, "server")
	r := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, AuthFile: writeAuthFile(t, nil), Corpora: []string{demoDir(t)}})
	opt := func(tok string) client.Options { o := tlsFiles(t, ca, nil); o.Token = tok; return o }
	trainer := dial(t, r.addr, opt(trainerToken))
	ctx := context.Background()
	for _, c := range []struct {
		p     pb.Protocol
		types []pb.SampleType
		want  map[string]bool
	}{
		{pb.Protocol_PROTOCOL_TIDE_F, []pb.SampleType{pb.SampleType_SAMPLE_TYPE_DRIFT_ONLY}, map[string]bool{"drift_only": true}},
		{pb.Protocol_PROTOCOL_TIDE_P, []pb.SampleType{pb.SampleType_SAMPLE_TYPE_JOINT}, map[string]bool{"joint": true}},
		{pb.Protocol_PROTOCOL_TIDE_F, []pb.SampleType{pb.SampleType_SAMPLE_TYPE_CHAIN_ONLY, pb.SampleType_SAMPLE_TYPE_JOINT}, map[string]bool{"chain_only": true, "joint": true}},
	} {
		seen := map[string]bool{}
		for s := range uint64(40) {
			resp, err := trainer.Env.Reset(ctx, &pb.ResetRequest{Seed: seed(s), SampleTypes: c.types, Options: &pb.EpisodeOptions{Protocol: c.p}, IncludePrivileged: true})
			if err != nil {
				t.Fatalf("%s %v: %v", c.p, c.types, err)
			}
			st := resp.GetEpisodes()[0].GetPrivileged().GetTide().GetSampleType()
			if !c.want[st] {
				t.Errorf("%s %v drew a %q sample", c.p, c.types, st)
			}
			seen[st] = true
		}
		if len(seen) != len(c.want) {
			t.Errorf("%s %v: 40 draws gave %v, want each of %v", c.p, c.types, seen, c.want)
		}
	}
	// TIDE_P serves no drift-only sample: nothing to draw.
	_, err := trainer.Env.Reset(ctx, &pb.ResetRequest{SampleTypes: []pb.SampleType{pb.SampleType_SAMPLE_TYPE_DRIFT_ONLY}, Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_P}})
	wantCode(t, "TIDE_P drift_only draw", err, codes.NotFound, "NO_TASKS")
	_, err = trainer.Env.Reset(ctx, &pb.ResetRequest{SampleTypes: []pb.SampleType{99}, Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F}})
	wantCode(t, "unknown sample type", err, codes.InvalidArgument, "")
	policy := dial(t, r.addr, opt(policyToken))
	resp, err := policy.Env.Reset(ctx, &pb.ResetRequest{SampleTypes: []pb.SampleType{pb.SampleType_SAMPLE_TYPE_JOINT}, Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F}})
	if err != nil {
		t.Fatal(err)
	}
	if text := prototext.Format(resp); strings.Contains(text, "joint") || strings.Contains(text, "JOINT") {
		t.Errorf("the episode echoes the filter:\n%s", text)
	}
}
