package oracle

import (
	"regexp"
	"strings"
	"unicode"

	"avtgym/corpus"
	"avtgym/sqlexec"
)

// leakRun is the length of a run of reference-SQL tokens that counts as a
// quotation.
const leakRun = 4

// leakChecker detects replies that reveal a record's reference SQL or
// schema identifiers (PROTOCOL.md §3, after TIDE appendix E).
//
// Texts are compared as leak tokens: lower-cased runs of letters, digits
// and underscores, and the operator characters ( ) = < > * + - / % | !
// one a token; every other character (white space, quotes, commas,
// periods) separates tokens. A reply leaks when, outside what the question
// itself contains, it has
//   - a run of leakRun consecutive tokens of the reference SQL (comments
//     removed), or
//   - the tokens of a reference clause segment of at least three tokens,
//     contiguously (shorter segments such as "LIMIT 5" or "FROM orders"
//     read as ordinary prose and are not checked), or
//   - a schema identifier that does not read as a plain word: one with an
//     underscore or a digit, or a camelCase one. Plain-word names
//     ("revenue", "region", "Order Date") cannot be told from the natural
//     answer and are not checked, and neither are the values of a schema
//     text's example rows (comments and string literals): 'HbA1c' in a
//     sample row is data, which a reply may name.
//
// What the reply may say anyway is passed with the question (see
// allowedText): the resolutions of the credited ambiguities, which the
// deterministic responder would serve word for word.
//
// Under Bird the unfiltered responder also reads the record's clear
// request, which BIRD-Interact's decoder must not give "directly"
// (bird_interact_conv/prompts/prompts.py, user_simulator_decoder, point
// 1): guardClearQuery makes a run of clearRun of its tokens (all of them,
// for a shorter one) that the public request does not contain a leak too.
type leakChecker struct {
	grams    map[string]bool // leakRun-grams of the reference SQL
	segments [][]string      // token runs of segments with ≥ 3 tokens
	idents   []string        // schema identifiers, lower-cased
	clear    map[string]bool // clearN-grams of the clear request not in the request
	clearN   int             // 0: the clear request is not guarded
}

// clearRun is the length of a run of the clear request's tokens that
// counts as giving it away: long, because a faithful answer about one
// phrase may well repeat a few of its words.
const clearRun = 12

// guardClearQuery adds the record's clear request (clearQuery) to what a
// reply must not quote. A clear request of fewer than leakRun tokens, or
// one the request already says word for word, is not guarded.
func (lc *leakChecker) guardClearQuery(rec *corpus.Record) {
	ct := leakTokens(clearQuery(rec))
	n := min(clearRun, len(ct))
	if n < leakRun {
		return
	}
	public := map[string]bool{}
	for _, g := range grams(leakTokens(rec.Request), n) {
		public[g] = true
	}
	lc.clear = map[string]bool{}
	for _, g := range grams(ct, n) {
		if !public[g] {
			lc.clear[g] = true
		}
	}
	if len(lc.clear) > 0 {
		lc.clearN = n
	}
}

// quotesClear reports whether the reply's tokens rt hold a guarded run of
// the clear request that the question's qt do not.
func (lc *leakChecker) quotesClear(rt, qt []string) bool {
	if lc.clearN == 0 || len(rt) < lc.clearN {
		return false
	}
	asked := map[string]bool{}
	for _, g := range grams(qt, lc.clearN) {
		asked[g] = true
	}
	for _, g := range grams(rt, lc.clearN) {
		if lc.clear[g] && !asked[g] {
			return true
		}
	}
	return false
}

func newLeakChecker(rec *corpus.Record, segs []sqlexec.Segment, schema string) *leakChecker {
	lc := &leakChecker{grams: map[string]bool{}}
	for _, s := range rec.Reference.SQL {
		for _, g := range grams(leakTokens(sqlexec.NormalizeSQL(s)), leakRun) {
			lc.grams[g] = true
		}
	}
	for _, s := range segs {
		if t := leakTokens(s.Text); len(t) >= 3 {
			lc.segments = append(lc.segments, t)
		}
	}
	lc.idents = schemaIdents(schema)
	return lc
}

// leaks reports whether reply reveals what question did not mention.
func (lc *leakChecker) leaks(reply, question string) bool {
	rt, qt := leakTokens(reply), leakTokens(question)
	if len(rt) >= leakRun {
		asked := map[string]bool{}
		for _, g := range grams(qt, leakRun) {
			asked[g] = true
		}
		for _, g := range grams(rt, leakRun) {
			if lc.grams[g] && !asked[g] {
				return true
			}
		}
	}
	for _, seg := range lc.segments {
		if containsRun(rt, seg) && !containsRun(qt, seg) {
			return true
		}
	}
	if lc.quotesClear(rt, qt) {
		return true
	}
	if len(lc.idents) > 0 {
		rw, qw := wordSet(rt), wordSet(qt)
		for _, id := range lc.idents {
			if rw[id] && !qw[id] {
				return true
			}
		}
	}
	return false
}

func isLeakOp(r rune) bool { return strings.ContainsRune("()=<>*+-/%|!", r) }

// leakTokens splits s into leak tokens (see leakChecker).
func leakTokens(s string) []string {
	var toks []string
	start := -1
	for i, r := range s {
		word := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'
		if word {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			toks = append(toks, strings.ToLower(s[start:i]))
			start = -1
		}
		if isLeakOp(r) {
			toks = append(toks, string(r))
		}
	}
	if start >= 0 {
		toks = append(toks, strings.ToLower(s[start:]))
	}
	return toks
}

func grams(toks []string, n int) []string {
	if len(toks) < n {
		return nil
	}
	out := make([]string, 0, len(toks)-n+1)
	for i := 0; i+n <= len(toks); i++ {
		out = append(out, strings.Join(toks[i:i+n], "\x00"))
	}
	return out
}

func containsRun(toks, run []string) bool {
	for i := 0; i+len(run) <= len(toks); i++ {
		ok := true
		for j := range run {
			if toks[i+j] != run[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func wordSet(toks []string) map[string]bool {
	m := make(map[string]bool, len(toks))
	for _, t := range toks {
		m[t] = true
	}
	return m
}

var (
	// schemaNotDDL matches what a schema text holds besides DDL
	// identifiers: block comments (example rows), line comments and
	// single-quoted literals.
	schemaNotDDL = regexp.MustCompile(`(?s)/\*.*?\*/|--[^\n]*|'(?:[^']|'')*'`)
	schemaWord   = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	schemaQuoted = regexp.MustCompile("\"([^\"]+)\"|`([^`]+)`|\\[([^\\]]+)\\]")
)

// schemaKeywords are identifier-like words of schema texts that are SQL
// keywords or type names, not identifiers.
var schemaKeywords = map[string]bool{
	"current_timestamp": true, "current_date": true, "current_time": true, "auto_increment": true,
	"int2": true, "int4": true, "int8": true, "float4": true, "float8": true, "int64": true, "int32": true,
	"uint64": true, "uint32": true, "utf8": true, "utf8mb4": true, "serial4": true, "serial8": true,
	"double_precision": true,
}

// schemaIdents returns the identifiers of a schema text that do not read as
// plain words, lower-cased and without duplicates.
func schemaIdents(schema string) []string {
	schema = schemaNotDDL.ReplaceAllString(schema, " ")
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		l := strings.ToLower(strings.TrimSpace(id))
		if l == "" || seen[l] || schemaKeywords[l] {
			return
		}
		seen[l] = true
		out = append(out, l)
	}
	for _, m := range schemaQuoted.FindAllStringSubmatch(schema, -1) {
		id := m[1] + m[2] + m[3]
		if identLike(id) {
			add(id)
		}
	}
	for _, w := range schemaWord.FindAllString(schema, -1) {
		if identLike(w) {
			add(w)
		}
	}
	return out
}

// identLike reports whether a word reads as an identifier rather than a
// plain word: an underscore, a digit, or a lower-case letter followed by an
// upper-case one.
func identLike(w string) bool {
	if strings.ContainsAny(w, "_0123456789") {
		return strings.IndexFunc(w, unicode.IsLetter) >= 0
	}
	prevLower := false
	for _, r := range w {
		if prevLower && unicode.IsUpper(r) {
			return true
		}
		prevLower = unicode.IsLower(r)
	}
	return false
}

// allowedText is what a reply for credits may say whatever it quotes: the
// credited ambiguities' resolutions, when they are text (the deterministic
// responder serves them as they are). SQL-snippet resolutions are not
// allowed: the responder must explain them in words.
func allowedText(rec *corpus.Record, credits []int) string {
	if sqlResolutions(rec) {
		return ""
	}
	var b strings.Builder
	for _, c := range credits {
		if c >= 0 && c < len(rec.Ambiguities) {
			b.WriteString("\n")
			b.WriteString(rec.Ambiguities[c].Resolution)
		}
	}
	return b.String()
}
