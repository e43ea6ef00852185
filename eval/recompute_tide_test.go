package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"avtgym/driver"
)

// rcTideEpisodes builds a seeded, mixed TIDE run under protocol: 10
// anchors of three samples (tide-p: chain-only and joint only), drift
// subtypes rotating, one anchor without a cluster (each sample its own),
// two oracles, three seeds; ERROR, RPC_FAILED and TRUNCATED episodes,
// missing cells and scored episodes without a component.
func rcTideEpisodes(protocol string) []Episode {
	rng := rand.New(rand.NewPCG(0x71de, 2026))
	bit := func(p float64) *float64 {
		if rng.Float64() < 0.05 {
			return nil // the server gave no such component
		}
		if rng.Float64() < p {
			return f64(1)
		}
		return f64(0)
	}
	var out []Episode
	for a := 1; a <= 10; a++ {
		anchor := fmt.Sprintf("t%02d", a)
		for si, st := range TideSampleTypes {
			if protocol == TideP && st == DriftOnly {
				continue
			}
			task := anchor + "-" + string("CDJ"[si])
			sub := ""
			if st != ChainOnly {
				sub = TideDriftSubtypes[(a+si)%3]
			}
			cluster := anchor
			if a == 10 {
				cluster = ""
			}
			for _, o := range []string{"deterministic", "llm"} {
				for _, seed := range rcSeeds {
					if rng.Float64() < 0.05 {
						continue // a missing cell
					}
					e := Episode{Record: driver.Record{Corpus: "tide", TaskID: task, AVTID: task, Seed: seed, Protocol: protocol,
						SampleType: st, Cluster: cluster, DriftSubtype: sub, Status: "TERMINATED"}, Condition: Asker, Oracle: o}
					switch r := rng.Float64(); {
					case r < 0.06:
						e.Status = "ERROR"
					case r < 0.09:
						e.Status = "RPC_FAILED"
					case r < 0.2:
						e.Status = "TRUNCATED"
					}
					if e.Scored() {
						skill := 0.3 + 0.05*float64(a)
						e.Reward, e.Asked = bit(skill), bit(0.6)
						if st != DriftOnly {
							e.L1Identified, e.L2Identified = bit(skill), bit(skill/2)
						}
						if st != ChainOnly {
							e.DriftRecognized, e.SQL2 = bit(0.7), bit(skill)
						}
					}
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// TestIndependentRecomputeTide checks a TIDE report's every summary (per
// sample type, pooled, and DEA, DRR and DRA per drift subtype: Tables 2,
// 3, 13 and 14) against testdata/recompute.py --tide, which shares no code
// with this package, under both protocols.
func TestIndependentRecomputeTide(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("python3 is not on PATH")
		}
		t.Fatalf("python3 is required under CI: %v", err)
	}
	script := filepath.Join("testdata", "recompute.py")
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []string{TideF, TideP} {
		t.Run(protocol, func(t *testing.T) {
			lines := rcTideEpisodes(protocol)
			path := filepath.Join(t.TempDir(), "episodes.jsonl")
			var buf bytes.Buffer
			for i := range lines {
				b, err := json.Marshal(&lines[i])
				if err != nil {
					t.Fatal(err)
				}
				buf.Write(append(b, '\n'))
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			const resamples = 200
			const bootSeed uint64 = 0xC0FFEE0123456789
			eps, err := ReadEpisodes(path)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Analyze(eps, AnalyzeOptions{Resamples: resamples, BootstrapSeed: bootSeed})
			if err != nil {
				t.Fatal(err)
			}
			var goJSON bytes.Buffer
			if err := rep.WriteJSON(&goJSON); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(py, script, path, "--tide", protocol,
				"--resamples", strconv.Itoa(resamples), "--bootstrap-seed", strconv.FormatUint(bootSeed, 10))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			pyOut, err := cmd.Output()
			if err != nil {
				t.Fatalf("recompute.py --tide: %v\n%s", err, stderr.String())
			}
			var g, p struct {
				Tide map[string]any `json:"tide"`
			}
			if err := json.Unmarshal(goJSON.Bytes(), &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(pyOut, &p); err != nil {
				t.Fatalf("recompute.py output: %v\n%s", err, pyOut)
			}
			if g.Tide["clusters"] != p.Tide["clusters"] {
				t.Errorf("clusters: Go %v, Python %v", g.Tide["clusters"], p.Tide["clusters"])
			}
			var c rcTideCount
			c.compare(t, "rows", g.Tide["rows"], p.Tide["rows"])
			// Both sides' summaries: 2 rows × (4 groups × 8 + 3 subtypes × 3
			// scopes × 3).
			if want := 2 * (4*8 + 3*3*3); c.summaries != want || c.undefined == 0 || c.intervals < 40 {
				t.Errorf("compared %d summaries (want %d), %d undefined, %d non-degenerate intervals", c.summaries, want, c.undefined, c.intervals)
			}
			t.Logf("%s: %d episodes, %d summaries compared (%d undefined, %d intervals)", protocol, len(lines), c.summaries, c.undefined, c.intervals)
		})
	}
}

type rcTideCount struct{ summaries, undefined, intervals int }

// compare walks the Python output and checks each summary (an object with
// "mean") against the Go report's at the same path.
func (c *rcTideCount) compare(t *testing.T, path string, g, p any) {
	t.Helper()
	switch pv := p.(type) {
	case []any:
		gv, ok := g.([]any)
		if !ok || len(gv) != len(pv) {
			t.Errorf("%s: Go %v, Python a list of %d", path, g, len(pv))
			return
		}
		for i := range pv {
			c.compare(t, fmt.Sprintf("%s[%d]", path, i), gv[i], pv[i])
		}
	case map[string]any:
		gv, ok := g.(map[string]any)
		if !ok {
			t.Errorf("%s: Go has no object", path)
			return
		}
		if _, ok := pv["mean"]; !ok {
			for k, v := range pv {
				c.compare(t, path+"."+k, gv[k], v)
			}
			return
		}
		c.summaries++
		for _, k := range []string{"mean", "sd", "lo", "hi", "seeds", "clusters", "n"} {
			gx, px := rcNum(gv[k]), rcNum(pv[k])
			if !rcSame(gx, px) {
				t.Errorf("%s.%s: Go %s, Python %s", path, k, rcFmt(gx), rcFmt(px))
			}
		}
		if pv["mean"] == nil {
			c.undefined++
		} else if pv["lo"] != pv["hi"] {
			c.intervals++
		}
	default:
		if g != p {
			t.Errorf("%s: Go %v, Python %v", path, g, p)
		}
	}
}

func rcNum(v any) *float64 {
	if x, ok := v.(float64); ok {
		return &x
	}
	return nil
}
