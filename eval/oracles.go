package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	pb "avtgym/proto/avtgym/v1"
)

// OraclesFile records, in a run directory, the oracles the server served
// during the run: the reference and each oracle's hybrid, as ListOracles
// gave them, so that a report made later, without the server, pairs every
// oracle with the right hybrid.
const OraclesFile = "oracles.json"

// OracleMap is what the leakage diagnostics need to know of the served
// oracles (PROTOCOL.md §6): the reference oracle, and per oracle its hybrid
// (its own matcher with the reference responder).
type OracleMap struct {
	// Reference is the reference oracle's name ("deterministic").
	Reference string `json:"reference"`
	// HybridOf maps each served oracle's name to its hybrid's.
	HybridOf map[string]string `json:"hybrid_of"`
}

// ListOracleMap asks the server which oracles it serves (ListOracles).
func ListOracleMap(ctx context.Context, c pb.EnvServiceClient) (*OracleMap, error) {
	resp, err := c.ListOracles(ctx, &pb.ListOraclesRequest{})
	if err != nil {
		return nil, fmt.Errorf("eval: listing the server's oracles: %w", err)
	}
	m := &OracleMap{Reference: OracleName(resp.GetReference()), HybridOf: map[string]string{}}
	for _, o := range resp.GetOracles() {
		m.HybridOf[OracleName(o.GetType())] = OracleName(o.GetHybrid())
	}
	if len(m.HybridOf) == 0 {
		return nil, errors.New("eval: the server lists no oracle")
	}
	return m, nil
}

// ReadOracleMap reads the OraclesFile of a run directory (or the directory
// of a results file); a run made before the file existed has none (nil,
// nil).
func ReadOracleMap(path string) (*OracleMap, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		path = filepath.Dir(path)
	}
	b, err := os.ReadFile(filepath.Join(path, OraclesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m OracleMap
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", filepath.Join(path, OraclesFile), err)
	}
	return &m, nil
}

// Apply sets opt's reference and per-oracle hybrids from m (m may be nil).
func (m *OracleMap) Apply(opt *AnalyzeOptions) {
	if m == nil {
		return
	}
	opt.Reference = m.Reference
	opt.HybridOf = m.HybridOf
}

// complete checks that the server serves every requested oracle and adds,
// after them, the oracles their diagnostics are measured against: each
// one's hybrid (ΔJ_resp, ΔRec_spec^Q) and the reference (ΔJ_full,
// ΔRec_none). It returns the names of the added oracles.
func (m *OracleMap) complete(requested []pb.OracleType) ([]pb.OracleType, []string, error) {
	out := slices.Clone(requested)
	var added []string
	add := func(name string) {
		t, err := ParseOracle(name)
		if err == nil && !slices.Contains(out, t) {
			out = append(out, t)
			added = append(added, name)
		}
	}
	for _, o := range requested {
		name := OracleName(o)
		h, ok := m.HybridOf[name]
		if !ok {
			var served []string
			for s := range m.HybridOf {
				served = append(served, s)
			}
			sort.Strings(served)
			hint := ""
			if strings.HasPrefix(name, "llm") || strings.HasPrefix(name, "hybrid") {
				hint = " (the LLM oracles need serve --oracle-url and --oracle-model)"
			} else if strings.HasPrefix(name, "test_") {
				hint = " (the test oracles need serve --test-oracles)"
			}
			return nil, nil, fmt.Errorf("eval: the server does not serve the %s oracle%s; it serves %s", name, hint, strings.Join(served, ", "))
		}
		add(h)
	}
	add(m.Reference)
	return out, added, nil
}
