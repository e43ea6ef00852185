package sqlcommit

import (
	"fmt"
	"sort"
)

// Subtype is Algorithm 1's verdict on a drift.
type Subtype string

// Algorithm 1's outcomes. NoDrift when S(y_pre) ⊆ S(y_post).
const (
	NoDrift    Subtype = ""
	Value      Subtype = "value"
	Constraint Subtype = "constraint"
	Projection Subtype = "projection"
	Rejected   Subtype = "rejected"
)

// Intent is the fine-grained subtype of a projection drift (the paper's
// Figure 7, rule R7).
type Intent string

// The intent subtypes; NoIntent for drifts other than projection.
const (
	NoIntent     Intent = ""
	AspectChange Intent = "aspect_change"
	TargetChange Intent = "target_change"
)

// Result is the drift verdict on a pair of queries.
type Result struct {
	// Drift is S(y_pre) ⊄ S(y_post) (value forms, scope paths included).
	Drift bool
	// Subtype is Algorithm 1's subtype; NoDrift when Drift is false.
	Subtype Subtype
	// Intent is set for projection drifts only.
	Intent Intent
	// Removed is S(y_pre) \ S(y_post); Added is S(y_post) \ S(y_pre).
	Removed, Added []Unit
}

// Classify applies Algorithm 1 to two commitment sets. With W the
// filtering units (WHERE conjuncts and the units of subqueries referenced
// from them; HAVING is output-side) and O = S \ W:
//
//   - no drift if S_pre ⊆ S_post;
//   - value if O_pre = O_post and LitReplace(W_pre, W_post): exactly one
//     filtering unit was replaced by one of the same scope and structural
//     form whose literals differ in exactly one position, every other
//     filter unchanged;
//   - constraint if O_pre = O_post and W_post ⊊ W_pre;
//   - projection if W_pre = W_post and O_pre ⊄ O_post, with intent
//     aspect_change when the FROM tables, the WHERE column set and the
//     GROUP BY keys are identical, target_change otherwise;
//   - rejected otherwise.
func Classify(pre, post *Set) Result {
	preK, postK := keys(pre.Units), keys(post.Units)
	var r Result
	for _, u := range pre.Units {
		if !postK[u.key()] {
			r.Removed = append(r.Removed, u)
		}
	}
	for _, u := range post.Units {
		if !preK[u.key()] {
			r.Added = append(r.Added, u)
		}
	}
	if len(r.Removed) == 0 {
		return r
	}
	r.Drift = true
	var wRemoved, wAdded, oRemoved, oAdded []Unit
	for _, u := range r.Removed {
		if u.Filtering() {
			wRemoved = append(wRemoved, u)
		} else {
			oRemoved = append(oRemoved, u)
		}
	}
	for _, u := range r.Added {
		if u.Filtering() {
			wAdded = append(wAdded, u)
		} else {
			oAdded = append(oAdded, u)
		}
	}
	oEqual := len(oRemoved) == 0 && len(oAdded) == 0
	wEqual := len(wRemoved) == 0 && len(wAdded) == 0
	switch {
	case oEqual && litReplace(wRemoved, wAdded):
		r.Subtype = Value
	case oEqual && len(wAdded) == 0 && len(wRemoved) > 0:
		// W_post ⊆ W_pre with something removed: W_post ⊊ W_pre.
		r.Subtype = Constraint
	case wEqual && len(oRemoved) > 0:
		r.Subtype = Projection
		r.Intent = intent(pre, post)
	default:
		r.Subtype = Rejected
	}
	return r
}

// litReplace: one filtering unit replaced by one of the same scope, clause
// and structure, their literals differing in exactly one position.
func litReplace(removed, added []Unit) bool {
	if len(removed) != 1 || len(added) != 1 {
		return false
	}
	a, b := removed[0], added[0]
	if a.Scope != b.Scope || a.Clause != b.Clause || a.Struct != b.Struct || len(a.Literals) != len(b.Literals) {
		return false
	}
	diff := 0
	for i := range a.Literals {
		if a.Literals[i] != b.Literals[i] {
			diff++
		}
	}
	return diff == 1
}

// intent is R7: aspect_change when FROM tables, WHERE column set and GROUP
// BY keys are all identical, target_change when any differs.
func intent(pre, post *Set) Intent {
	if equalStrings(pre.Tables, post.Tables) && equalStrings(pre.WhereColumns, post.WhereColumns) &&
		equalStrings(groupKeys(pre), groupKeys(post)) {
		return AspectChange
	}
	return TargetChange
}

func groupKeys(s *Set) []string {
	var out []string
	for _, u := range s.Units {
		if u.Clause == GroupBy {
			out = append(out, u.Scope+"\x00"+u.Value)
		}
	}
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func keys(us []Unit) map[string]bool {
	m := make(map[string]bool, len(us))
	for _, u := range us {
		m[u.key()] = true
	}
	return m
}

// DriftSQL extracts both queries' commitment sets and classifies the pair.
// Errors name the query that failed ("pre-drift query: parse error ...").
func DriftSQL(pre, post string, schema *Schema) (Result, error) {
	a, err := Extract(pre, schema)
	if err != nil {
		return Result{}, fmt.Errorf("pre-drift query: %w", err)
	}
	b, err := Extract(post, schema)
	if err != nil {
		return Result{}, fmt.Errorf("post-drift query: %w", err)
	}
	return Classify(a, b), nil
}
