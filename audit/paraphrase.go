package audit

import (
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"avtgym/corpus"
)

// The paraphrase-tolerant half of the public_leak check (docs/corpus-check.md).
// The verbatim search (leak.go) misses a resolution pasted into a public
// field with small edits: "I mean" dropped, words reordered, punctuation,
// case or articles changed. This half compares content words instead of
// bytes. Plain word overlap would not do: AMBROSIA's resolutions are
// questions that restate the request, so they share most of their words
// with it by construction. What reveals an interpretation is the words
// that tell it apart from the other interpretations of its AVT — its
// distinguishing words — together with nearly all of its other words.
//
// For a resolution r of ambiguity a of record u, at least MinResolutionLen
// bytes after normalisation (as for the verbatim search):
//
//   - words(x) are x's content words: maximal runs of letters and digits,
//     lower-cased, plural endings folded ("rooms" → "room"), without the
//     articles a, an, the and the "I mean" / "I meant" of a reply;
//   - r needs at least MinParaphraseWords distinct words;
//   - the distinguishing words D(r) are the words of r that not every
//     other record of u's AVT has in its resolution of the same term (for
//     a record alone in its AVT, all the words of r). Words shared by all
//     the interpretations, typically the request's own, tell nothing; a
//     word shared with only some of them still separates r from the rest
//     ("area" in "area" / "depth" / "area and depth");
//   - a public text T of a record of u's AVT leaks r when some window of T
//     of at most 2·|words(r)| words holds every word of D(r) and at least
//     LeakCoverage of the distinct words of r: the tolerance is for words
//     every interpretation has;
//   - a public text T of a record of another AVT on u's database leaks r
//     when such a window holds every word of r: for a reader of another
//     task every word of r may be the one that matters ("Region number 7 is
//     …" and "Region number 8 is …" differ in one word).
//
// An interpretation with no distinguishing word at all (every word of it is
// in every other interpretation) is left to the verbatim search for the
// records of its AVT. Paraphrases that replace words with synonyms are not
// caught.

// LeakCoverage is the share of a resolution's distinct content words, and
// of its distinguishing words, that a window of a public text must hold to
// count as a paraphrased leak. On the real corpora the closest legitimate
// text holding enough distinguishing words holds 0.88 of a resolution's
// words (AMBROSIA: a request that restates one interpretation in another
// order), against 1 for a resolution pasted with "I mean", articles and
// punctuation dropped; see docs/corpus-check.md.
const LeakCoverage = 0.9

// MinParaphraseWords is the fewest distinct content words a resolution
// needs for the paraphrase search; shorter ones ("The year 2024.") are
// left to the verbatim search, since two words near each other in a
// public text are too likely by chance.
const MinParaphraseWords = 3

func wordSetOf(ws []string) map[string]bool {
	m := make(map[string]bool, len(ws))
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// articles carry no content for the comparison.
var articles = map[string]bool{"a": true, "an": true, "the": true}

// foldPlural folds plural and third-person endings.
func foldPlural(w string) string {
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

// contentWords returns the content words of s in order.
func contentWords(s string) []string {
	var raw []string
	start := -1
	for i, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) {
			if start < 0 {
				start = i
			}
		} else if start >= 0 {
			raw = append(raw, strings.ToLower(s[start:i]))
			start = -1
		}
	}
	if start >= 0 {
		raw = append(raw, strings.ToLower(s[start:]))
	}
	out := make([]string, 0, len(raw))
	for k := 0; k < len(raw); k++ {
		w := raw[k]
		if w == "i" && k+1 < len(raw) && (raw[k+1] == "mean" || raw[k+1] == "meant") {
			k++ // the "I mean" of a reply
			continue
		}
		if articles[w] {
			continue
		}
		out = append(out, foldPlural(w))
	}
	return out
}

// paraPattern is one resolution as the paraphrase search sees it.
type paraPattern struct {
	o      owner
	words  map[string]bool // the distinct content words of the resolution
	dist   map[string]bool // its distinguishing words
	key    string          // the distinguishing word it is indexed by
	window int             // the widest window, in words
	need   int             // the distinct words of r a window must hold
}

// paraHit is a pattern a public text leaks: to the records of the
// pattern's AVT, and when all is set to every record (the text holds every
// word of the resolution).
type paraHit struct {
	p   *paraPattern
	all bool
}

// paraText is a public text as the paraphrase search sees it, computed
// once: its content words in order and as a set.
type paraText struct {
	seq   []string
	words map[string]bool
}

// paraIndex indexes the patterns of each database by one distinguishing
// word each, and caches each public text's matches per database.
type paraIndex struct {
	byDB  map[*corpus.DB]map[string][]*paraPattern
	mu    sync.Mutex
	texts map[*publicText]*paraText
	found map[paraKey]*paraFound
}

type paraKey struct {
	pt *publicText
	db *corpus.DB
}

type paraFound struct {
	once sync.Once
	hits []paraHit
}

// buildParaIndex computes the distinguishing words of every resolution of
// c of at least minLen bytes (normalised).
func buildParaIndex(c *corpus.Corpus, minLen int) *paraIndex {
	px := &paraIndex{byDB: map[*corpus.DB]map[string][]*paraPattern{}, texts: map[*publicText]*paraText{}, found: map[paraKey]*paraFound{}}
	done := map[string]bool{}
	pending := map[*corpus.DB][]*paraPattern{}
	for _, t := range c.Tasks {
		if done[t.AVTID] {
			continue
		}
		done[t.AVTID] = true
		sibs := c.Interpretations(t.AVTID)
		for _, u := range sibs {
			for i, a := range u.Ambiguities {
				if len(normalize(a.Resolution)) < minLen {
					continue
				}
				seq := contentWords(a.Resolution)
				if len(wordSetOf(seq)) < MinParaphraseWords {
					continue // too few words to tell a paraphrase from chance
				}
				// shared: the words every other interpretation has in its
				// resolution of the term (nil: no other interpretation).
				var shared map[string]bool
				for _, v := range sibs {
					if v == u {
						continue
					}
					ws := map[string]bool{}
					for _, b := range v.Ambiguities {
						if b.Term == a.Term {
							for _, w := range contentWords(b.Resolution) {
								ws[w] = true
							}
						}
					}
					if shared == nil {
						shared = ws
						continue
					}
					for w := range shared {
						if !ws[w] {
							delete(shared, w)
						}
					}
				}
				p := &paraPattern{o: owner{u, i}, words: map[string]bool{}, dist: map[string]bool{}, window: 2 * len(seq)}
				for _, w := range seq {
					p.words[w] = true
					if !shared[w] {
						p.dist[w] = true
					}
				}
				if len(p.dist) == 0 {
					continue // only the verbatim search applies
				}
				p.need = atLeast(LeakCoverage, len(p.words))
				pending[u.DB] = append(pending[u.DB], p)
			}
		}
	}
	// Each pattern is indexed by its distinguishing word that the fewest
	// patterns of its database have (then the longest): a text can leak a
	// pattern only if it holds that word.
	for db, ps := range pending {
		freq := map[string]int{}
		for _, p := range ps {
			for w := range p.dist {
				freq[w]++
			}
		}
		m := map[string][]*paraPattern{}
		for _, p := range ps {
			for w := range p.dist {
				if p.key == "" || freq[w] < freq[p.key] || freq[w] == freq[p.key] && (len(w) > len(p.key) || len(w) == len(p.key) && w < p.key) {
					p.key = w
				}
			}
			m[p.key] = append(m[p.key], p)
		}
		px.byDB[db] = m
	}
	return px
}

// search returns the patterns of db's resolutions that the public text
// leaks, searching it once per database.
func (px *paraIndex) search(pt *publicText, db *corpus.DB) []paraHit {
	px.mu.Lock()
	f, ok := px.found[paraKey{pt, db}]
	if !ok {
		f = &paraFound{}
		px.found[paraKey{pt, db}] = f
	}
	tx, ok := px.texts[pt]
	if !ok {
		seq := contentWords(pt.text)
		tx = &paraText{seq: seq, words: map[string]bool{}}
		for _, w := range seq {
			tx.words[w] = true
		}
		px.texts[pt] = tx
	}
	px.mu.Unlock()
	f.once.Do(func() {
		idx := px.byDB[db]
		if len(idx) == 0 {
			return
		}
		for w := range tx.words {
			for _, p := range idx[w] {
				if own, all := p.leaks(tx); own {
					f.hits = append(f.hits, paraHit{p, all})
				}
			}
		}
		sort.Slice(f.hits, func(i, j int) bool {
			a, b := f.hits[i].p.o, f.hits[j].p.o
			if a.task.Line != b.task.Line || a.task.File != b.task.File {
				return a.task.File < b.task.File || a.task.File == b.task.File && a.task.Line < b.task.Line
			}
			return a.amb < b.amb
		})
	})
	return f.hits
}

// distList lists the distinguishing words, sorted, for messages.
func (p *paraPattern) distList() string {
	ws := make([]string, 0, len(p.dist))
	for w := range p.dist {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	return strings.Join(ws, ", ")
}

// atLeast returns ⌈share·n⌉.
func atLeast(share float64, n int) int {
	k := int(share * float64(n))
	if float64(k) < share*float64(n) {
		k++
	}
	return k
}

// leaks reports whether the text leaks the pattern to the records of its
// AVT (own: some window of at most p.window words, starting at a word of
// the resolution, holds every distinguishing word and p.need distinct
// words of the resolution) and to every record (all: such a window holds
// every word of the resolution).
func (p *paraPattern) leaks(t *paraText) (own, all bool) {
	for w := range p.dist {
		if !t.words[w] {
			return false, false
		}
	}
	for s := range t.seq {
		if !p.words[t.seq[s]] {
			continue
		}
		seen := map[string]bool{}
		nd := 0
		for k := s; k < len(t.seq) && k < s+p.window; k++ {
			w := t.seq[k]
			if !p.words[w] || seen[w] {
				continue
			}
			seen[w] = true
			if p.dist[w] {
				nd++
			}
			if nd == len(p.dist) && len(seen) >= p.need {
				own = true
			}
			if len(seen) == len(p.words) {
				return true, true
			}
		}
	}
	return own, false
}
