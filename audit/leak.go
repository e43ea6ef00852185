package audit

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"avtgym/corpus"
)

// normalize lower-cases s (Unicode-aware), turns every run of white space
// into one space and trims spaces and trailing sentence punctuation
// (. ! ? ; : ,), so that a resolution quoted mid-sentence without its full
// stop is still found.
func normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(unicode.ToLower(r))
	}
	return strings.TrimRight(b.String(), " .!?;:,")
}

// matcher is an Aho–Corasick automaton over the bytes of a set of
// patterns: one pass over a text finds every pattern occurring in it. The
// goto function is a map keyed by state and byte, so memory grows with the
// total length of the patterns, not with 256 times it.
type matcher struct {
	next map[uint64]int32 // state<<8 | byte → state
	fail []int32
	out  [][]int32 // pattern ids ending at each state (suffix links folded in)
}

func newMatcher(patterns []string) *matcher {
	m := &matcher{next: map[uint64]int32{}, fail: []int32{0}, out: [][]int32{nil}}
	var children [][]int32 // children of each state, for the breadth-first pass
	children = append(children, nil)
	var childByte [][]byte
	childByte = append(childByte, nil)
	for id, p := range patterns {
		s := int32(0)
		for i := 0; i < len(p); i++ {
			k := uint64(s)<<8 | uint64(p[i])
			t, ok := m.next[k]
			if !ok {
				t = int32(len(m.out))
				m.next[k] = t
				m.fail = append(m.fail, 0)
				m.out = append(m.out, nil)
				children = append(children, nil)
				childByte = append(childByte, nil)
				children[s] = append(children[s], t)
				childByte[s] = append(childByte[s], p[i])
			}
			s = t
		}
		m.out[s] = append(m.out[s], int32(id))
	}
	queue := append([]int32(nil), children[0]...)
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for i, t := range children[s] {
			c := childByte[s][i]
			f := m.fail[s]
			for s != 0 {
				if g, ok := m.next[uint64(f)<<8|uint64(c)]; ok {
					m.fail[t] = g
					break
				}
				if f == 0 {
					break
				}
				f = m.fail[f]
			}
			m.out[t] = append(m.out[t], m.out[m.fail[t]]...)
			queue = append(queue, t)
		}
	}
	return m
}

// step follows the automaton from state s on byte c.
func (m *matcher) step(s int32, c byte) int32 {
	for {
		if t, ok := m.next[uint64(s)<<8|uint64(c)]; ok {
			return t
		}
		if s == 0 {
			return 0
		}
		s = m.fail[s]
	}
}

// find returns the ids of the patterns that occur in text, each once, in
// the order of their first occurrence.
func (m *matcher) find(text string) []int32 {
	var found []int32
	var seen map[int32]bool
	s := int32(0)
	for i := 0; i < len(text); i++ {
		s = m.step(s, text[i])
		for _, id := range m.out[s] {
			if seen == nil {
				seen = map[int32]bool{}
			}
			if !seen[id] {
				seen[id] = true
				found = append(found, id)
			}
		}
	}
	return found
}

// owner is where a searched pattern comes from: a record's resolution of
// ambiguity amb, or its reference SQL (amb < 0).
type owner struct {
	task *corpus.Task
	amb  int
}

// publicText is one distinct normalised public text and, once searched,
// the patterns it contains.
type publicText struct {
	text  string
	once  sync.Once
	found []int32
}

// field is one public field of a record: its label and its text.
type field struct {
	label string
	text  *publicText
}

// leakIndex holds the leak check's patterns, the automaton and the
// distinct public texts.
type leakIndex struct {
	m           *matcher
	patterns    []string
	owners      [][]owner
	fields      map[*corpus.Task][]field
	para        *paraIndex
	searchNanos atomic.Int64
}

// buildLeakIndex collects the distinct normalised resolutions (at least
// minLen bytes) and references of c, and the distinct public texts of its
// records.
func buildLeakIndex(c *corpus.Corpus, minLen int) *leakIndex {
	lk := &leakIndex{fields: map[*corpus.Task][]field{}}
	patID := map[string]int{}
	add := func(p string, o owner) {
		id, ok := patID[p]
		if !ok {
			id = len(lk.patterns)
			patID[p] = id
			lk.patterns = append(lk.patterns, p)
			lk.owners = append(lk.owners, nil)
		}
		lk.owners[id] = append(lk.owners[id], o)
	}
	texts := map[string]*publicText{}
	text := func(s string) *publicText {
		n := normalize(s)
		pt, ok := texts[n]
		if !ok {
			pt = &publicText{text: n}
			texts[n] = pt
		}
		return pt
	}
	dbFields := map[*corpus.DB][]field{}
	for _, t := range c.Tasks {
		for i, a := range t.Ambiguities {
			if r := normalize(a.Resolution); len(r) >= minLen {
				add(r, owner{t, i})
			}
		}
		if r := normalize(t.ReferenceSQL); r != "" {
			add(r, owner{t, -1})
		}
		if len(t.Reference.SQL) > 1 {
			for _, s := range t.Reference.SQL {
				if r := normalize(s); len(r) >= minLen {
					add(r, owner{t, -1})
				}
			}
		}
		var fs []field
		fs = append(fs, field{"request", text(t.Request)})
		if t.Evidence != "" {
			fs = append(fs, field{"evidence", text(t.Evidence)})
		}
		for _, k := range t.PublicKnowledge {
			fs = append(fs,
				field{fmt.Sprintf("knowledge entry %q name", k.ID), text(k.Name)},
				field{fmt.Sprintf("knowledge entry %q definition", k.ID), text(k.Definition)})
		}
		dbf, ok := dbFields[t.DB]
		if !ok {
			dbf = append(dbf, field{fmt.Sprintf("schema of database %q", t.DB.Spec.ID), text(t.DB.Schema)})
			keys := make([]string, 0, len(t.DB.Spec.ColumnMeanings))
			for k := range t.DB.Spec.ColumnMeanings {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				dbf = append(dbf, field{fmt.Sprintf("column meaning %q", k), text(k + ": " + t.DB.Spec.ColumnMeanings[k])})
			}
			dbFields[t.DB] = dbf
		}
		lk.fields[t] = append(fs, dbf...)
	}
	lk.m = newMatcher(lk.patterns)
	lk.para = buildParaIndex(c, minLen)
	return lk
}

// searchPara returns the resolutions of db's records that a public text
// leaks in paraphrase (paraphrase.go), searching it once per database.
func (lk *leakIndex) searchPara(pt *publicText, db *corpus.DB) []paraHit {
	start := time.Now()
	ps := lk.para.search(pt, db)
	lk.searchNanos.Add(int64(time.Since(start)))
	return ps
}

// search returns the patterns a public text contains, searching it once.
func (lk *leakIndex) search(pt *publicText) []int32 {
	pt.once.Do(func() {
		start := time.Now()
		pt.found = lk.m.find(pt.text)
		lk.searchNanos.Add(int64(time.Since(start)))
	})
	return pt.found
}

// checkLeak reports each public field of t that contains t's reference
// SQL or a resolution of any record, or a paraphrase of a resolution of a
// record on t's database (paraphrase.go).
func (a *auditor) checkLeak(t *corpus.Task) result {
	var fs []Finding
	for _, f := range a.lk.fields[t] {
		verbatim := map[owner]bool{}
		for _, id := range a.lk.search(f.text) {
			var others []owner
			for _, o := range a.lk.owners[id] {
				verbatim[o] = true
				switch {
				case o.amb < 0 && o.task == t:
					fs = append(fs, finding(Leak, t, "%s contains the record's reference SQL", f.label))
				case o.amb >= 0 && o.task == t:
					fs = append(fs, finding(Leak, t, "%s contains the record's own resolution of %q: %q", f.label, o.task.Ambiguities[o.amb].Term, o.task.Ambiguities[o.amb].Resolution))
				case o.amb >= 0:
					others = append(others, o)
				}
			}
			if len(others) > 0 {
				o := others[0]
				more := ""
				if len(others) > 1 {
					more = fmt.Sprintf(" (and %d more record(s) with the same resolution)", len(others)-1)
				}
				fs = append(fs, finding(Leak, t, "%s contains the resolution of %q in record %s (%s:%d)%s: %q",
					f.label, o.task.Ambiguities[o.amb].Term, o.task.ID, o.task.File, o.task.Line, more, o.task.Ambiguities[o.amb].Resolution))
			}
		}
		for _, h := range a.lk.searchPara(f.text, t.DB) {
			p := h.p
			if verbatim[p.o] || p.o.task.AVTID != t.AVTID && !h.all {
				continue
			}
			o := p.o
			res := o.task.Ambiguities[o.amb]
			if o.task == t {
				fs = append(fs, finding(Leak, t, "%s contains a paraphrase of the record's own resolution of %q (distinguishing words: %s): %q",
					f.label, res.Term, p.distList(), res.Resolution))
			} else {
				fs = append(fs, finding(Leak, t, "%s contains a paraphrase of the resolution of %q in record %s (%s:%d) (distinguishing words: %s): %q",
					f.label, res.Term, o.task.ID, o.task.File, o.task.Line, p.distList(), res.Resolution))
			}
		}
	}
	if len(fs) > 0 {
		seen := map[string]bool{}
		uniq := fs[:0]
		for _, f := range fs {
			if !seen[f.Msg] {
				seen[f.Msg] = true
				uniq = append(uniq, f)
			}
		}
		return result{check: Leak, verdict: fail, findings: uniq}
	}
	return result{check: Leak, verdict: pass}
}
