package ambrosia

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/probe"
)

// The rules DeriveTerm applies, one per AMBROSIA ambiguity type. The names
// are returned with each term and documented in docs/ambrosia.md.
const (
	// RuleScope: the first "each" or "every" (else "all") of the question
	// plus the noun phrase that follows it ("each tech startup").
	RuleScope = "scope: quantifier + noun phrase"
	// RuleAttachment: the coordination "X and Y" (or "X or Y") together with
	// the modifier after it, up to the end of the sentence ("banquet halls
	// and conference rooms with a 200 person capacity").
	RuleAttachment = "attachment: coordination + trailing modifier"
	// RuleVague: the words of the question that the interpretations replace
	// or qualify, found by aligning the question with each interpretation.
	RuleVague = "vague: words the interpretations replace or qualify"
)

// ErrNoTerm is wrapped by DeriveTerm's errors.
var ErrNoTerm = errors.New("cannot derive")

// tok is a word of a question: a maximal run of letters and digits (the
// deterministic matcher's notion of a token), with its byte span.
type tok struct {
	start, end int
	low, stem  string
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func tokenize(s string) []tok {
	var out []tok
	start := -1
	for i, r := range s {
		if isWordRune(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			out = append(out, mkTok(s, start, i))
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, mkTok(s, start, len(s)))
	}
	return out
}

func mkTok(s string, start, end int) tok {
	low := strings.ToLower(s[start:end])
	return tok{start: start, end: end, low: low, stem: stem(low)}
}

// stem folds plural and third-person endings so that "chefs" aligns with
// "chef" and "classes" with "class".
func stem(w string) string {
	switch {
	case utf8.RuneCountInString(w) <= 3:
		return w
	case strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"):
		return w[:len(w)-2]
	case strings.HasSuffix(w, "ss"), strings.HasSuffix(w, "us"), strings.HasSuffix(w, "is"):
		return w
	case strings.HasSuffix(w, "s"):
		return w[:len(w)-1]
	}
	return w
}

// gapBreaks reports whether the text between two tokens holds punctuation
// that ends a phrase (anything but spaces, hyphens, apostrophes and the
// characters inside numbers and amounts).
func gapBreaks(gap string) bool {
	for _, r := range gap {
		switch {
		case unicode.IsSpace(r), r == '-', r == '\'', r == '’', r == '$', r == '%', r == '/', r == '&':
		case r == '.' || r == ',':
			// "10.11.2018", "20,000", "Dr. Smith" are inside a phrase only
			// when no space follows; a space after them ends it, except
			// after an abbreviation (handled by the caller's token check).
			if strings.ContainsAny(gap, " \t\r\n") {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// function words end noun phrases and are never a term on their own.
var function = set(`a an the of for to in on at by from with and or but that who whom whose which what where when how
	this these those there their they them it its his her he she we us our you your me my i
	is are was were be been has have had do does did will can could would should
	all each every any some both also just only than then as if so not no
	please show list display give provide tell find get`)

// probeWords are the words of the scripted probes (PROTOCOL.md §5): a term
// made only of them would be credited by the generic probe.
var probeWords = set(`could you clarify what exactly mean by please give me as much detail can and if it for the sql exact elaborate want`)

// commandWords start a request and are not part of a conjunct.
var commandWords = set(`show list display give provide tell find get me all the both please what which are is have has
	won win available for of from that who with us any those these`)

func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// DeriveTerm derives the ambiguity term of an AMBROSIA question: a
// contiguous, proper, whole-word span of question, by the rule of its
// ambiguity type ("scope", "attachment" or "vague"). interpretations are the
// questions of its linked interpretations; the vague rule aligns them with
// the question. It returns the term, the name of the rule that produced it
// (one of the Rule constants), or an error wrapping ErrNoTerm.
func DeriveTerm(question, ambigType string, interpretations []string) (term string, rule string, err error) {
	toks := tokenize(question)
	if len(toks) < 2 {
		return "", "", fmt.Errorf("%w: the question has fewer than two words", ErrNoTerm)
	}
	var i, j int // the span is toks[i:j]
	switch ambigType {
	case "scope":
		rule = RuleScope
		i, j = scopeSpan(question, toks)
	case "attachment":
		rule = RuleAttachment
		i, j = attachmentSpan(question, toks)
	case "vague":
		rule = RuleVague
		i, j = vagueSpan(question, toks, interpretations)
	default:
		return "", "", fmt.Errorf("%w: unknown ambiguity type %q", ErrNoTerm, ambigType)
	}
	if i < 0 || j <= i {
		return "", rule, fmt.Errorf("%w: the %s rule found no span", ErrNoTerm, ambigType)
	}
	if i == 0 && j == len(toks) && ambigType == "vague" {
		j = 1 // "Who created Giselle?": the vague question word alone
	}
	if i == 0 && j == len(toks) {
		return "", rule, fmt.Errorf("%w: the %s rule's span is the whole question", ErrNoTerm, ambigType)
	}
	term = question[toks[i].start:toks[j-1].end]
	if err := CheckTerm(question, term); err != nil {
		return "", rule, err
	}
	return term, rule, nil
}

// CheckTerm checks the matcher properties of a term for a question: it
// occurs in the question as whole words, it is not the whole question, it
// is not made only of probe words, and the full probe for it names it.
func CheckTerm(question, term string) error {
	nt, nq := corpus.Normalize(term), corpus.Normalize(question)
	switch {
	case nt == "":
		return fmt.Errorf("%w: the term %q has no word", ErrNoTerm, term)
	case !strings.Contains(" "+nq+" ", " "+nt+" "):
		return fmt.Errorf("%w: the term %q is not a whole-word span of the question", ErrNoTerm, term)
	case nt == nq:
		return fmt.Errorf("%w: the term %q is the whole question", ErrNoTerm, term)
	}
	onlyProbe := true
	for _, w := range strings.Fields(nt) {
		if !probeWords[w] {
			onlyProbe = false
		}
	}
	if onlyProbe {
		return fmt.Errorf("%w: the term %q is made only of probe words", ErrNoTerm, term)
	}
	probe := corpus.Normalize(probe.FullQuestion(term))
	if !strings.Contains(" "+probe+" ", " "+nt+" ") {
		return fmt.Errorf("%w: the full probe does not name the term %q", ErrNoTerm, term)
	}
	return nil
}

// scopeSpan: the quantifier ("each"/"every", else "all") and the noun
// phrase after it, which ends at punctuation, a function word, a past
// participle or (after "each"/"every", which take a singular noun) a word
// ending in -s after its first word; after "all" it ends with its first
// plural word. At most four words follow the quantifier.
func scopeSpan(q string, toks []tok) (int, int) {
	qi := -1
	for k, t := range toks {
		if t.low == "each" || t.low == "every" {
			qi = k
			break
		}
	}
	if qi < 0 {
		for k, t := range toks {
			if t.low == "all" && k+1 < len(toks) && !function[toks[k+1].low] {
				qi = k
				break
			}
		}
	}
	if qi < 0 {
		return -1, -1
	}
	plural := toks[qi].low == "all"
	j := qi + 1
	for ; j < len(toks) && j-qi <= 4; j++ {
		t := toks[j]
		if gapBreaks(q[toks[j-1].end:t.start]) || function[t.low] {
			break
		}
		n := j - qi // words taken so far + 1
		if !plural && n > 1 && strings.HasSuffix(t.low, "ed") {
			break
		}
		if !plural && n > 1 && endsS(t.low) && !nextIsContent(q, toks, j) {
			break // a verb ("each farm uses"), not a noun modifier ("each legal affairs reporter")
		}
		if !plural && n > 1 && strings.HasSuffix(t.low, "ing") {
			break // "each education program targeting"
		}
		if plural && endsS(t.low) {
			j++
			break
		}
		if !plural && n == 1 && strings.HasSuffix(t.low, "ed") {
			break
		}
	}
	if j == qi+1 {
		return -1, -1
	}
	return qi, j
}

// nextIsContent reports whether toks[j+1] continues the phrase of toks[j].
func nextIsContent(q string, toks []tok, j int) bool {
	return j+1 < len(toks) && !function[toks[j+1].low] && !gapBreaks(q[toks[j].end:toks[j+1].start])
}

func endsS(w string) bool { return strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") }

// determiners may open a conjunct after the coordinator ("a cardiologist
// and a nurse", "all museums and all galleries"); the right conjunct starts
// at the first word after them.
var determiners = set(`a an the all any some each every both those these their its his her our my your`)

// coordinator returns the number of words of the coordinator starting at
// toks[c]: 1 for "and" and "or", 3 for "as well as", 0 for none.
func coordinator(toks []tok, c int) int {
	switch {
	case toks[c].low == "and" || toks[c].low == "or":
		return 1
	case toks[c].low == "as" && c+2 < len(toks) && toks[c+1].low == "well" && toks[c+2].low == "as":
		return 3
	}
	return 0
}

// attachmentSpan: the first coordinator ("and", "or", "as well as") between
// two content words, determiners after it skipped ("and a nurse", "and all
// galleries"); the left conjunct is the run of words before it up to a
// command or function word or punctuation (at most four; a comma right
// before the coordinator, the serial comma of "bakeries, or cafes", does
// not end it); the span runs to the end of the first sentence (before
// "Show them in one table", AMBROSIA's fixed suffix).
func attachmentSpan(q string, toks []tok) (int, int) {
	end := len(toks)
	for k := 0; k+4 < len(toks); k++ {
		if toks[k].low == "show" && toks[k+1].low == "them" && toks[k+2].low == "in" && toks[k+3].low == "one" && toks[k+4].low == "table" {
			end = k
			break
		}
	}
	for c := 1; c+1 < end; c++ {
		w := coordinator(toks, c)
		if w == 0 {
			continue
		}
		r := c + w
		for r < end && determiners[toks[r].low] {
			r++
		}
		if r >= end || commandWords[toks[c-1].low] || function[toks[r].low] || breaksWithin(q, toks, c, r) {
			continue
		}
		i := c
		for i > 0 && c-i < 4 {
			prev := toks[i-1]
			gap := q[prev.end:toks[i].start]
			if i == c && strings.TrimSpace(gap) == "," {
				gap = " " // the serial comma before the coordinator
			}
			if commandWords[prev.low] || function[prev.low] || gapBreaks(gap) {
				break
			}
			i--
		}
		if i == c {
			continue
		}
		// The end: the last word before a sentence break.
		j := r + 1
		for j < end && !sentenceBreak(q, toks, j) {
			j++
		}
		return i, j
	}
	return -1, -1
}

// breaksWithin reports whether a sentence ends between toks[from-1] and
// toks[to].
func breaksWithin(q string, toks []tok, from, to int) bool {
	for k := from; k <= to; k++ {
		if sentenceBreak(q, toks, k) {
			return true
		}
	}
	return false
}

// sentenceBreak reports whether a sentence ends between toks[j-1] and
// toks[j] ("?", "!", or "." followed by a space after a word that is not a
// short capitalised abbreviation such as "Dr." or "St.").
func sentenceBreak(q string, toks []tok, j int) bool {
	gap := q[toks[j-1].end:toks[j].start]
	if strings.ContainsAny(gap, "?!;") {
		return true
	}
	if strings.Contains(gap, ".") && strings.ContainsAny(gap, " \t\r\n") {
		prev := q[toks[j-1].start:toks[j-1].end]
		r, _ := utf8.DecodeRuneInString(prev)
		if unicode.IsUpper(r) && len(prev) <= 3 {
			return false // "Dr. Smith"
		}
		return true
	}
	return false
}

// vagueSpan aligns the question with each interpretation (longest common
// subsequence of stemmed words). A question word scores 2 for each
// interpretation that drops or replaces it and 1 for each that inserts
// words right before it (a qualifier: "chefs" → "sous chefs"). The span is
// the run around the best-scoring content word, extended over adjacent
// scoring content words and, for a qualified word, over the rest of its
// noun phrase ("commute" → "commute time").
func vagueSpan(q string, toks []tok, interps []string) (int, int) {
	if len(interps) == 0 {
		return -1, -1
	}
	score, qualified := vagueScores(q, toks, interps)
	best := vagueSeed(q, toks, score)
	if best < 0 {
		return -1, -1
	}
	return extendVague(q, toks, score, best, qualified[best] > 0)
}

// vagueScores scores each question word against the interpretations (see
// vagueSpan); qualified counts the interpretations that qualify the word.
func vagueScores(q string, toks []tok, interps []string) (score, qualified []int) {
	score = make([]int, len(toks))
	qualified = make([]int, len(toks))
	for _, in := range interps {
		matched, insertedBefore, trailing := align(toks, tokenize(in))
		for k := range toks {
			if !matched[k] {
				score[k] += 2
			} else if insertedBefore[k] {
				at := qualifierTarget(toks, matched, k)
				score[at]++
				qualified[at]++
			}
		}
		if trailing && matched[len(toks)-1] {
			// Words appended after the question's last word qualify it
			// ("the prices of the rooms [per night]"): the last content
			// word takes them.
			at := len(toks) - 1
			for at > 0 && !isContent(q, toks[at]) && matched[at-1] {
				at--
			}
			score[at]++
			qualified[at]++
		}
	}
	return score, qualified
}

// qualifierTarget returns the word that words inserted before toks[k]
// qualify: toks[k] itself, or the word before a function word ("airport
// [city] they").
func qualifierTarget(toks []tok, matched []bool, k int) int {
	if function[toks[k].low] && k > 0 && matched[k-1] {
		return k - 1
	}
	return k
}

// vagueSeed returns the best-scoring word that may be the vague word (a
// content word, or "where", "who" or "when"), or -1 when no such word
// scores.
func vagueSeed(q string, toks []tok, score []int) int {
	best := -1
	for k := range toks {
		seed := isContent(q, toks[k]) || vagueQuestionWords[toks[k].low]
		if seed && score[k] > 0 && (best < 0 || score[k] > score[best]) {
			best = k
		}
	}
	return best
}

// extendVague returns the span [i, j) around toks[best]: extended over the
// adjacent scoring content words (content words: not function words, not
// fragments such as the "s" of "What's"; a span never extends over
// "where", "who" or "when"), and, for a qualified word standing alone,
// over the rest of its noun phrase (up to two words).
func extendVague(q string, toks []tok, score []int, best int, qualified bool) (int, int) {
	content := func(k int) bool { return isContent(q, toks[k]) }
	breaks := func(k int) bool { return gapBreaks(q[toks[k-1].end:toks[k].start]) } // between toks[k-1] and toks[k]
	i, j := best, best+1
	for i > 0 && content(i-1) && score[i-1] > 0 && !breaks(i) {
		i--
	}
	for j < len(toks) && content(j) && score[j] > 0 && !breaks(j) {
		j++
	}
	if qualified && j == best+1 {
		for j < len(toks) && j-best < 3 && !function[toks[j].low] && !breaks(j) && !endsS(toks[j-1].low) {
			j++
		}
	}
	return i, j
}

// vagueQuestionWords may be the vague word of a question on their own.
var vagueQuestionWords = set(`where who when`)

// isContent reports whether t is a content word of q: not a function word,
// and longer than two letters, a number, or an acronym ("TV", "UK").
func isContent(q string, t tok) bool {
	if function[t.low] {
		return false
	}
	w := q[t.start:t.end]
	if utf8.RuneCountInString(w) > 2 || unicode.IsDigit([]rune(w)[0]) {
		return true
	}
	return utf8.RuneCountInString(w) == 2 && strings.ToUpper(w) == w && strings.ToLower(w) != w
}

// align returns, for each word of a, whether it is matched in an LCS
// alignment with b and whether b has unmatched words right before it; and
// whether b has unmatched words after all of a (trailing).
func align(a, b []tok) (matched, insertedBefore []bool, trailing bool) {
	n, m := len(a), len(b)
	dp := make([][]int, n+1)
	for k := range dp {
		dp[k] = make([]int, m+1)
	}
	for x := n - 1; x >= 0; x-- {
		for y := m - 1; y >= 0; y-- {
			if a[x].stem == b[y].stem {
				dp[x][y] = dp[x+1][y+1] + 1
			} else {
				dp[x][y] = max(dp[x+1][y], dp[x][y+1])
			}
		}
	}
	matched = make([]bool, n)
	insertedBefore = make([]bool, n)
	x, y, pending := 0, 0, false
	for x < n && y < m {
		switch {
		case a[x].stem == b[y].stem:
			matched[x] = true
			insertedBefore[x] = pending
			pending = false
			x++
			y++
		case dp[x+1][y] >= dp[x][y+1]:
			x++
			pending = false
		default:
			y++
			pending = true
		}
	}
	return matched, insertedBefore, x == n && y < m
}
