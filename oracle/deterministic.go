package oracle

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
	"weak"

	"avtgym/corpus"
)

// errNilRecord is returned for a nil record.
var errNilRecord = errors.New("oracle: nil record")

// DeterministicMatcher is the reference matcher (PROTOCOL.md §3). It credits
// each registered ambiguity, of any kind, whose term or one of its aliases
// occurs in the question as whole words, ignoring case, punctuation and
// runs of whitespace.
//
// Normalisation (the same for questions and phrases, see Normalize): text is
// case-folded rune by rune (Unicode-aware); letters, decimal digits and
// combining marks are word runes and every other rune (space, punctuation,
// hyphen, apostrophe, underscore, symbol) is a separator; the tokens are
// the maximal runs of word runes. So "TOP-customers?" contains the phrase
// "top customers", "year-to-date" equals "year to date", and "regional"
// does not contain "region". No Unicode normalisation (NFC) is applied:
// a precomposed "é" and "e" + U+0301 are different tokens.
//
// A phrase occurs when its tokens appear contiguously in the question.
// Phrases are matched longest first (by token count, then by the length
// of the normalised phrase, ties in annotation order: an ambiguity's term,
// then its aliases, then the next ambiguity); every occurrence is matched
// left to right and a matched span may not overlap an earlier one. So in
// "top customers" the phrase "customers" is covered and not credited, but
// "customers" elsewhere in the same question still is. A phrase shared by
// several ambiguities (the same term or alias text) credits all of them.
// Phrases without a token (empty or punctuation only) never match.
//
// The history is not read: a question naming an already credited term is
// credited again (precision accounts for repetition). Chain dependencies
// (Ambiguity.DependsOn) and the strict-credit option
// (AskOptions.StrictCredit) narrow the verdict in Oracle.AskWith
// (ChainMatch, StrictMatch), not here.
//
// Each record's phrases are compiled once, on first use, and cached by
// record pointer (weakly: the entry goes when the record is collected), so a
// record must not be modified after it is first matched.
type DeterministicMatcher struct {
	cache sync.Map // weak.Pointer[corpus.Record] → *compiled
}

// NewDeterministicMatcher returns a deterministic matcher with an empty
// phrase cache. It is safe for concurrent use.
func NewDeterministicMatcher() *DeterministicMatcher { return &DeterministicMatcher{} }

// Match returns the indexes of the ambiguities the question credits,
// ascending, or nil when it credits none, with no action (ActionNone). It
// fails only for a nil record or a done context.
func (m *DeterministicMatcher) Match(ctx context.Context, rec *corpus.Record, _ []Turn, question string) (Match, error) {
	if rec == nil {
		return Match{}, errNilRecord
	}
	if err := ctx.Err(); err != nil {
		return Match{}, err
	}
	return Match{Credits: m.compiled(rec).match(question)}, nil
}

// DescribeMatcher describes the deterministic matcher (MatcherDescriber).
func (*DeterministicMatcher) DescribeMatcher() string {
	return "deterministic: credits each registered ambiguity whose term or an alias occurs in the question as whole words (case, punctuation and spacing ignored; longest phrases first, no overlaps); reads only the question"
}

// compiled returns the record's compiled phrases, compiling them once.
func (m *DeterministicMatcher) compiled(rec *corpus.Record) *compiled {
	key := weak.Make(rec)
	if v, ok := m.cache.Load(key); ok {
		return v.(*compiled)
	}
	c := compile(rec)
	if v, loaded := m.cache.LoadOrStore(key, c); loaded {
		return v.(*compiled)
	}
	// c holds no reference to rec, so the record can be collected; the
	// cleanup then drops its entry.
	runtime.AddCleanup(rec, func(k weak.Pointer[corpus.Record]) { m.cache.Delete(k) }, key)
	return c
}

// compiled is a record's phrase table.
type compiled struct {
	vocab   map[string]int32 // phrase token → id
	phrases []phrase         // in matching order
	nAmb    int              // len(rec.Ambiguities)
	// Cheap filters that spare most question tokens a map look-up: the
	// first bytes and the byte lengths (capped at 63) of vocab tokens.
	first [4]uint64
	lens  uint64
}

// phrase is one distinct normalised term or alias.
type phrase struct {
	toks  []int32 // token ids
	mask  uint64  // bit id%64 of every token id
	chars int     // rune length of the normalised phrase
	order int     // first appearance in annotation order
	amb   []int   // ambiguities that register it, ascending
}

func compile(rec *corpus.Record) *compiled {
	c := &compiled{vocab: map[string]int32{}, nAmb: len(rec.Ambiguities)}
	byText := map[string]int{} // normalised phrase → index in c.phrases
	add := func(text string, amb int) {
		toks := corpus.Tokens(text)
		if len(toks) == 0 {
			return
		}
		key := strings.Join(toks, " ")
		if pi, ok := byText[key]; ok {
			p := &c.phrases[pi]
			if p.amb[len(p.amb)-1] != amb {
				p.amb = append(p.amb, amb)
			}
			return
		}
		ids := make([]int32, len(toks))
		var mask uint64
		for i, t := range toks {
			id, ok := c.vocab[t]
			if !ok {
				id = int32(len(c.vocab))
				c.vocab[t] = id
				c.first[t[0]/64] |= 1 << (t[0] % 64)
				c.lens |= 1 << min(len(t), 63)
			}
			ids[i] = id
			mask |= 1 << (id % 64)
		}
		byText[key] = len(c.phrases)
		c.phrases = append(c.phrases, phrase{toks: ids, mask: mask, chars: utf8.RuneCountInString(key), order: len(c.phrases), amb: []int{amb}})
	}
	for i, a := range rec.Ambiguities {
		add(a.Term, i)
		for _, al := range a.Aliases {
			add(al, i)
		}
	}
	sort.SliceStable(c.phrases, func(i, j int) bool {
		p, q := &c.phrases[i], &c.phrases[j]
		if len(p.toks) != len(q.toks) {
			return len(p.toks) > len(q.toks)
		}
		if p.chars != q.chars {
			return p.chars > q.chars
		}
		return p.order < q.order
	})
	return c
}

// match credits the question. Small questions and records run without heap
// allocation except for the returned slice.
func (c *compiled) match(question string) []int {
	if len(c.phrases) == 0 {
		return nil
	}
	var idArr [64]int32
	ids := idArr[:0]
	var tokArr [64]byte
	tok := tokArr[:0]
	var present uint64 // bit id%64 of every known question token
	flush := func() {
		id := int32(-1)
		if c.first[tok[0]/64]&(1<<(tok[0]%64)) != 0 && c.lens&(1<<min(len(tok), 63)) != 0 {
			if v, ok := c.vocab[string(tok)]; ok {
				id = v
				present |= 1 << (v % 64)
			}
		}
		ids = append(ids, id)
		tok = tok[:0]
	}
	for i := 0; i < len(question); {
		if b := question[i]; b < utf8.RuneSelf {
			i++
			if f := asciiFold[b]; f != 0 {
				tok = append(tok, f)
			} else if len(tok) > 0 {
				flush()
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(question[i:])
		i += size
		if corpus.IsTokenRune(r) {
			tok = utf8.AppendRune(tok, corpus.FoldRune(r))
		} else if len(tok) > 0 {
			flush()
		}
	}
	if len(tok) > 0 {
		flush()
	}
	if present == 0 {
		return nil
	}

	var covArr [64]bool
	var covered []bool
	if len(ids) <= len(covArr) {
		covered = covArr[:len(ids)]
	} else {
		covered = make([]bool, len(ids))
	}
	var credArr [64]bool
	var credited []bool
	if c.nAmb <= len(credArr) {
		credited = credArr[:c.nAmb]
	} else {
		credited = make([]bool, c.nAmb)
	}
	n := 0
	for pi := range c.phrases {
		p := &c.phrases[pi]
		if p.mask&present != p.mask {
			continue // some token of the phrase is not in the question
		}
		l := len(p.toks)
		for i := 0; i+l <= len(ids); {
			if !occursAt(ids, covered, p.toks, i) {
				i++
				continue
			}
			for j := i; j < i+l; j++ {
				covered[j] = true
			}
			for _, a := range p.amb {
				if !credited[a] {
					credited[a] = true
					n++
				}
			}
			i += l
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]int, 0, n)
	for a, ok := range credited {
		if ok {
			out = append(out, a)
		}
	}
	return out
}

// occursAt reports whether toks occurs in ids at i on uncovered tokens.
func occursAt(ids []int32, covered []bool, toks []int32, i int) bool {
	for k, t := range toks {
		if ids[i+k] != t || covered[i+k] {
			return false
		}
	}
	return true
}

// asciiFold maps an ASCII word byte to its folded form and any other ASCII
// byte to 0.
var asciiFold = func() (t [utf8.RuneSelf]byte) {
	for b := range t {
		if corpus.IsTokenRune(rune(b)) {
			t[b] = byte(corpus.FoldRune(rune(b)))
		}
	}
	return t
}()

// DeterministicResponder is the reference responder (PROTOCOL.md §3): it
// returns the stored resolutions of the credited ambiguities, in
// annotation order, joined by a single space (each trimmed of surrounding
// white space; a text that repeats an earlier one, or is empty, is left
// out); with no credit, or no resolution text, it returns Refusal, Refused.
// It reads the match's credits only, not its action (so an LLM matcher's
// unlabeled action, which credits nothing, is refused: the hybrid oracle).
type DeterministicResponder struct{}

// NewDeterministicResponder returns the deterministic responder.
func NewDeterministicResponder() *DeterministicResponder { return &DeterministicResponder{} }

// DescribeResponder describes the deterministic responder
// (ResponderDescriber).
func (*DeterministicResponder) DescribeResponder() string {
	return "deterministic: the stored resolutions of the credited ambiguities, in annotation order; the fixed refusal when nothing is credited"
}

// Respond returns the reply for the match's credits. It fails for a nil
// record or a credit that is not an index of rec.Ambiguities.
func (r *DeterministicResponder) Respond(_ context.Context, rec *corpus.Record, _ []Turn, _ string, m Match) (Reply, error) {
	return r.reply(rec, m.Credits)
}

// reply is the reply for credits: the joined resolutions, or Refusal.
func (*DeterministicResponder) reply(rec *corpus.Record, credits []int) (Reply, error) {
	if rec == nil {
		return Reply{}, errNilRecord
	}
	if len(credits) == 0 {
		return Reply{Text: Refusal, Refused: true}, nil
	}
	sel := make([]bool, len(rec.Ambiguities))
	for _, a := range credits {
		if a < 0 || a >= len(sel) {
			return Reply{}, fmt.Errorf("oracle: credit %d out of range [0, %d) in record %q", a, len(sel), rec.ID)
		}
		sel[a] = true
	}
	texts := make([]string, 0, len(credits))
	for a, ok := range sel {
		if !ok {
			continue
		}
		t := strings.TrimSpace(rec.Ambiguities[a].Resolution)
		if t != "" && !contains(texts, t) {
			texts = append(texts, t)
		}
	}
	if len(texts) == 0 {
		return Reply{Text: Refusal, Refused: true}, nil
	}
	return Reply{Text: strings.Join(texts, " ")}, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
