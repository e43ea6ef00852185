package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The kustomizations a user may apply, relative to deploy/.
var kustomizations = []string{"base", "overlays/postgres"}

// scheme knows exactly the kinds the manifests may hold: any other kind,
// like any unknown field, fails the decoding.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, autoscalingv2.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// tree loads deploy/ into an in-memory file system, with placeholder files
// for the Secrets (secrets/ is git-ignored), and applies edit to it.
func tree(t *testing.T, edit func(fsys filesys.FileSystem)) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "secrets" {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".yaml") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fsys.WriteFile(filepath.Join("/deploy", path), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"base/secrets/token.key", "base/secrets/principals.json", "base/secrets/tls.crt", "base/secrets/tls.key", "overlays/postgres/secrets/postgres.url"} {
		if err := fsys.WriteFile(filepath.Join("/deploy", f), []byte("placeholder\n")); err != nil {
			t.Fatal(err)
		}
	}
	if edit != nil {
		edit(fsys)
	}
	return fsys
}

// render builds one kustomization and decodes every object strictly into
// its Kubernetes API type.
func render(t *testing.T, fsys filesys.FileSystem, dir string) ([]runtime.Object, error) {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, filepath.Join("/deploy", dir))
	if err != nil {
		return nil, err
	}
	dec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		obj, _, err := dec.Decode(y, nil, nil)
		if err != nil {
			return nil, &decodeError{r.CurId().String(), err}
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

type decodeError struct {
	id  string
	err error
}

func (e *decodeError) Error() string { return e.id + ": " + e.err.Error() }

// TestManifestsRenderStrictly: every kustomization renders, and every
// object decodes into the API types with no unknown or duplicate field;
// the invariants the server's drain and the image depend on hold.
func TestManifestsRenderStrictly(t *testing.T) {
	flags := serveFlags(t)
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs, err := render(t, tree(t, nil), dir)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, dir, objs, flags)
		})
	}
}

// TestManifestTypoFails shows that the decoding is strict: a misspelt
// field, a field at the wrong level and an unknown kind fail the render.
func TestManifestTypoFails(t *testing.T) {
	for name, c := range map[string]struct{ file, old, new string }{
		"misspelt field": {"base/deployment.yaml", "readinessProbe:", "readinesProbe:"},
		"wrong level":    {"base/deployment.yaml", "        - name: TMPDIR\n          value: /tmp", "        - name: TMPDIR\n          valu: /tmp"},
		"unknown kind":   {"base/pdb.yaml", "kind: PodDisruptionBudget", "kind: PodDisruptionBudgett"},
		"bad patch path": {"overlays/postgres/postgres.yaml", "/spec/template/spec/containers/0/env/-", "/spec/template/spec/container/0/env/-"},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := tree(t, func(fsys filesys.FileSystem) {
				p := filepath.Join("/deploy", c.file)
				b, err := fsys.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(b, []byte(c.old)) {
					t.Fatalf("%s has no %q", c.file, c.old)
				}
				if err := fsys.WriteFile(p, bytes.Replace(b, []byte(c.old), []byte(c.new), 1)); err != nil {
					t.Fatal(err)
				}
			})
			dir := "base"
			if strings.HasPrefix(c.file, "overlays/") {
				dir = "overlays/postgres"
			}
			objs, err := render(t, fsys, dir)
			if err == nil {
				t.Fatalf("%s rendered %d objects with the typo", dir, len(objs))
			}
			t.Log(err)
		})
	}
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// serveFlags lists the flags `avtgym serve` takes, from its usage.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 20 {
		t.Fatalf("avtgym serve --help lists %d flags:\n%s", len(flags), out)
	}
	return flags
}

// checkInvariants checks what the server's behaviour needs of the
// manifests.
func checkInvariants(t *testing.T, dir string, objs []runtime.Object, flags map[string]bool) {
	var (
		deploys  []*appsv1.Deployment
		services = map[string]*corev1.Service{}
		secrets  = map[string]*corev1.Secret{}
		hpas     []*autoscalingv2.HorizontalPodAutoscaler
		pdbs     []*policyv1.PodDisruptionBudget
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			deploys = append(deploys, o)
		case *corev1.Service:
			services[o.Name] = o
		case *corev1.Secret:
			secrets[o.Name] = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			hpas = append(hpas, o)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, o)
		default:
			t.Errorf("unexpected object %T", o)
		}
	}
	if len(deploys) != 1 || len(hpas) != 1 || len(pdbs) != 1 || len(services) != 2 {
		t.Fatalf("want 1 Deployment, 1 HPA, 1 PDB and 2 Services; got %d, %d, %d, %d", len(deploys), len(hpas), len(pdbs), len(services))
	}
	d := deploys[0]
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The args are serve's flags, each known to the binary.
	args := map[string]string{}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q: want serve first", c.Args)
	}
	for _, a := range c.Args[1:] {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("arg %q is not a flag of avtgym serve", a)
		}
		if name != "corpus" {
			if _, dup := args[name]; dup {
				t.Errorf("flag --%s given twice", name)
			}
		}
		args[name] = val
	}
	if dir == "overlays/postgres" {
		if args["postgres"] != "$(AVTGYM_POSTGRES_URL)" || args["corpus"] == "" {
			t.Errorf("the postgres overlay: --postgres=%q --corpus=%q", args["postgres"], args["corpus"])
		}
		if !hasEnvFromSecret(c, "AVTGYM_POSTGRES_URL", "avtgym-postgres", secrets) {
			t.Error("AVTGYM_POSTGRES_URL does not come from the avtgym-postgres Secret")
		}
	}

	// Probes: gRPC, on the plaintext probe port; readiness on service "",
	// liveness on "liveness" (SERVING through the drain).
	_, probePort, ok := strings.Cut(args["health-listen"], ":")
	if !ok {
		t.Fatalf("--health-listen=%q", args["health-listen"])
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil {
			t.Errorf("%s probe: want a gRPC probe, got %+v", name, p)
			continue
		}
		if got := p.GRPC.Port; itoa(got) != probePort {
			t.Errorf("%s probe on port %d, want the probe port %s", name, got, probePort)
		}
		want := ""
		if name == "liveness" {
			want = "liveness"
		}
		if got := deref(p.GRPC.Service); got != want {
			t.Errorf("%s probe service %q, want %q", name, got, want)
		}
	}
	// The pod outlives the drain: SIGTERM, --drain-delay, --shutdown-grace,
	// then up to 10 s of drain hooks.
	delay, grace := dur(t, args["drain-delay"]), dur(t, args["shutdown-grace"])
	if tg := pod.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= delay+grace+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v, want more than --drain-delay %v + --shutdown-grace %v + 10s", tg, delay, grace)
	}
	if rp := c.ReadinessProbe; rp != nil && time.Duration(rp.PeriodSeconds*rp.FailureThreshold)*time.Second > delay {
		t.Errorf("readiness fails after %ds, longer than --drain-delay %v: the pod would get calls after it stopped taking them", rp.PeriodSeconds*rp.FailureThreshold, delay)
	}

	// Non-root, read-only root file system, writable /tmp only.
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || !deref(psc.RunAsNonRoot) || deref(psc.RunAsUser) == 0 {
		t.Error("the pod does not run as a non-root user")
	}
	if csc == nil || !deref(csc.ReadOnlyRootFilesystem) || deref(csc.AllowPrivilegeEscalation) || csc.Capabilities == nil || len(csc.Capabilities.Drop) != 1 || csc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("the container's securityContext: %+v", csc)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	writable := []string{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("mount %s: no volume", m.Name)
			continue
		}
		if !m.ReadOnly {
			writable = append(writable, m.MountPath)
			if v.EmptyDir == nil {
				t.Errorf("writable mount %s is not an emptyDir", m.MountPath)
			}
		}
	}
	if len(writable) != 1 || writable[0] != "/tmp" || envValue(c, "TMPDIR") != "/tmp" {
		t.Errorf("writable mounts %q, TMPDIR %q: want /tmp only", writable, envValue(c, "TMPDIR"))
	}

	// The Secrets the flags read are mounted from generated Secrets that
	// exist: every replica of this Deployment mounts the same token key.
	for flag, want := range map[string]string{"token-key-file": "avtgym-token-key", "auth-file": "avtgym-principals", "tls-cert": "avtgym-tls", "tls-key": "avtgym-tls"} {
		path := args[flag]
		var found bool
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(path, m.MountPath+"/") {
				v := vols[m.Name]
				if v.Secret == nil {
					t.Errorf("--%s=%s is not on a Secret volume", flag, path)
					break
				}
				s, ok := secrets[v.Secret.SecretName]
				if !ok || !strings.HasPrefix(s.Name, want+"-") {
					t.Errorf("--%s=%s: volume %s names Secret %q, want a generated %s", flag, path, m.Name, v.Secret.SecretName, want)
					break
				}
				if _, ok := s.Data[filepath.Base(path)]; !ok {
					t.Errorf("--%s=%s: Secret %s has no key %s", flag, path, s.Name, filepath.Base(path))
				}
				found = true
			}
		}
		if !found {
			t.Errorf("--%s=%s is on no mount", flag, path)
		}
	}

	// Services: one ClusterIP, one headless, both selecting the pods on the
	// gRPC port.
	if s := services["avtgym"]; s == nil || s.Spec.Type != corev1.ServiceTypeClusterIP || s.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("Service avtgym: want ClusterIP, got %+v", s)
	}
	if s := services["avtgym-headless"]; s == nil || s.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service avtgym-headless: want clusterIP None")
	}
	_, grpcPort, _ := strings.Cut(args["listen"], ":")
	for name, s := range services {
		if !selects(s.Spec.Selector, d.Spec.Template.Labels) {
			t.Errorf("Service %s selects %v, not the pods %v", name, s.Spec.Selector, d.Spec.Template.Labels)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != "grpc" || containerPort(c, "grpc") != grpcPort {
			t.Errorf("Service %s ports %+v; container port grpc %s, --listen %s", name, s.Spec.Ports, containerPort(c, "grpc"), args["listen"])
		}
	}
	if h := hpas[0]; h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != d.Name || len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
		t.Errorf("HPA: want CPU on Deployment %s: %+v", d.Name, h.Spec)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Error("no CPU request: the HPA's utilisation is relative to it")
	}
	if d.Spec.Replicas != nil {
		t.Error("the Deployment sets replicas, which the HPA owns")
	}
	if p := pdbs[0]; p.Spec.Selector == nil || !selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("the PodDisruptionBudget does not select the pods")
	}
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Error("the Deployment's selector does not match its pods")
	}
}

func hasEnvFromSecret(c corev1.Container, name, secret string, secrets map[string]*corev1.Secret) bool {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			s, ok := secrets[e.ValueFrom.SecretKeyRef.Name]
			_, key := s.Data[e.ValueFrom.SecretKeyRef.Key]
			return ok && key && strings.HasPrefix(s.Name, secret+"-")
		}
	}
	return false
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func containerPort(c corev1.Container, name string) string {
	for _, p := range c.Ports {
		if p.Name == name {
			return itoa(p.ContainerPort)
		}
	}
	return ""
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func dur(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
