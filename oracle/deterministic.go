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

// Names reports whether text names ambiguity a for the deterministic
// matcher: whether a question equal to text would be credited with a were
// a the record's only ambiguity (its term or an alias occurs in text as
// whole words, under the matcher's normalisation). On a record with other
// ambiguities a longer phrase of another may cover the occurrence in that
// text, but a question that quotes the phrase alone is still credited, so
// Names is the test of whether the phrase can be reached from text at all
// (`corpus check`'s unreachable-term warning). It compiles a's phrases on
// every call: it is for audits, not for episodes.
func Names(text string, a corpus.Ambiguity) bool {
	one := &corpus.Record{Ambiguities: []corpus.Ambiguity{{Term: a.Term, Aliases: a.Aliases}}}
	return len(compile(one).match(text)) > 0
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
//
// Under the BIRD-Interact protocols (AskOptions.Bird, which Oracle.AskWith
// hands to RespondWith) it follows BIRD-Interact's response generator
// where a fixed text can: its refusal is BirdRefusal, the harness's exact
// text, and it answers in words where the record has words. The harness's
// decoder must "NOT give ... any ground-truth SQL segments"
// (bird_interact_agent/src/envs/user_simulator/prompts.py,
// USER_SIMULATOR_DECODER), so for a record whose resolutions are SQL
// snippets (resolution_format "sql", BIRD-Interact imported without a
// response catalog) an ambiguity's annotated reading (Ambiguity.Chosen)
// is answered instead of its snippet; only where the record has no words
// for an ambiguity is the snippet returned, as without Bird (the paper's
// LLM decoder would paraphrase it; a fixed responder cannot). Records
// whose resolutions are text answer them unchanged. The credits are the
// same either way: the responder never changes them.
type DeterministicResponder struct{}

// NewDeterministicResponder returns the deterministic responder.
func NewDeterministicResponder() *DeterministicResponder { return &DeterministicResponder{} }

// DescribeResponder describes the deterministic responder
// (ResponderDescriber).
func (*DeterministicResponder) DescribeResponder() string {
	return "deterministic: the stored resolutions of the credited ambiguities, in annotation order; the fixed refusal when nothing is credited (under BIRD_C and BIRD_A the harness's refusal, and annotated words before SQL snippets)"
}

// Respond returns the reply for the match's credits outside the
// BIRD-Interact protocols (RespondWith with no options). It fails for a
// nil record or a credit that is not an index of rec.Ambiguities.
func (r *DeterministicResponder) Respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, m Match) (Reply, error) {
	return r.RespondWith(ctx, rec, history, question, m, AskOptions{})
}

// RespondWith returns the reply for the match's credits under opt: with
// opt.Bird by BIRD-Interact's rules (see DeterministicResponder). Only
// opt.Bird is read. Oracle.AskWith calls it (ResponderWithOptions).
//
// It has a pointer receiver on purpose: a responder that embeds a
// DeterministicResponder value and overrides Respond (the leaky test
// oracle of package oracletest) does not inherit it, so AskWith keeps
// calling that Respond.
//
// A chained ambiguity asked before the one it depends on (TIDE's early
// L2, routed as LOC: an unlabeled action whose segment is the detail of a
// chained ambiguity still open in history, chainSegment) is answered with
// the action's segment, the SQL-level detail of the reference that settles
// it (ChainDetail), without a credit: a fixed responder has no words for a
// detail the record localises only in SQL. Other unlabeled actions are
// refused, as before.
func (r *DeterministicResponder) RespondWith(_ context.Context, rec *corpus.Record, history []Turn, _ string, m Match, opt AskOptions) (Reply, error) {
	if rec != nil && len(m.Credits) == 0 && m.Action.Kind == ActionUnlabeled {
		if d := strings.TrimSpace(m.Action.Arg); d != "" && chainSegment(rec, d, openChained(rec, history)) {
			return Reply{Text: d}, nil
		}
	}
	return r.replyWith(rec, m.Credits, opt.Bird)
}

// reply is the reply for credits outside the BIRD-Interact protocols: the
// joined resolutions, or Refusal.
func (r *DeterministicResponder) reply(rec *corpus.Record, credits []int) (Reply, error) {
	return r.replyWith(rec, credits, false)
}

// replyWith is the reply for credits: the joined answers (resolutionText),
// or the refusal (BirdRefusal under bird, else Refusal).
func (*DeterministicResponder) replyWith(rec *corpus.Record, credits []int, bird bool) (Reply, error) {
	if rec == nil {
		return Reply{}, errNilRecord
	}
	refusal := Reply{Text: Refusal, Refused: true}
	if bird {
		refusal.Text = BirdRefusal
	}
	if len(credits) == 0 {
		return refusal, nil
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
		t := resolutionText(rec, a, bird)
		if t != "" && !contains(texts, t) {
			texts = append(texts, t)
		}
	}
	if len(texts) == 0 {
		return refusal, nil
	}
	return Reply{Text: strings.Join(texts, " ")}, nil
}

// resolutionText is the trimmed answer for ambiguity a: its resolution,
// or, under bird for a record whose resolutions are SQL snippets
// (ResolutionFormat "sql"), its annotated reading (Chosen) when it has one.
func resolutionText(rec *corpus.Record, a int, bird bool) string {
	amb := &rec.Ambiguities[a]
	if bird && rec.ResolutionFormat == resolutionSQL {
		if w := strings.TrimSpace(amb.Chosen); w != "" {
			return w
		}
	}
	return strings.TrimSpace(amb.Resolution)
}

// resolutionSQL is corpus.Record.ResolutionFormat's value for resolutions
// that are SQL snippets.
const resolutionSQL = "sql"

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
