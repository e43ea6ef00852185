package conformance

// Privileged hygiene (ARCHITECTURE.md, fixed decision 2; README
// "Episodes"): nothing the include_privileged field reveals for an episode
// may appear in what its policy is shown, unless the protocol shows it on
// purpose. What is searched, in every turn of every observation (reset and
// steps), the reset's public task view and every error message:
//
//   - reference SQL, the follow-up's and the post-drift references, the
//     server solver's SQL, the verifier's reasons and the oracle's actions;
//   - the resolutions of the ambiguities, the interpretation label, the
//     AVT id, TIDE's cluster and the drift utterance;
//   - the labels (chain routing, sample type, drift and intent subtypes) as
//     whole words, where they cannot be English prose: those with an
//     underscore or a digit ("L2", "drift_only"; not "joint" or "value").
//
// Where a value may appear: a policy's turn may repeat what the policy
// sent (its question, its SQL, which may be the reference it was given),
// and so may the environment's answer to it; an oracle's reply may carry
// the resolutions its question was credited with (and TIDE_P's pre-filled
// reply the first layer's); the drift turn is the drift utterance; the
// feedback on SQL that did not run is the database's message about it,
// which is also the verifier's reason. A text is searched with those
// allowed parts cut out. Credits and terms have no text of their own (a
// term is a phrase of the public request): their hygiene is that the
// unprivileged response carries no privileged field and that
// include_privileged leaves the observation unchanged (play.go).

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	pb "avtgym/proto/avtgym/v1"
)

// secret is one privileged value of an episode.
type secret struct {
	what, text string
	word       bool // matched as a whole word only
}

// shown is one text the policy was shown, with the parts of it that may
// hold privileged values there.
type shown struct {
	where, text string
	allowed     []string
}

// hygiene collects an episode's privileged values and what its policy was
// shown, and checks the one against the other.
type hygiene struct {
	secrets []secret
	known   map[string]bool
	shown   []shown
}

func (h *hygiene) add(what, text string, word bool) {
	text = strings.TrimSpace(text)
	if text == "" {
		return
	}
	if word && !strings.ContainsAny(text, "_0123456789") {
		return // an English word: prose may hold it
	}
	if h.known == nil {
		h.known = map[string]bool{}
	}
	if h.known[text] {
		return
	}
	h.known[text] = true
	h.secrets = append(h.secrets, secret{what: what, text: text, word: word})
}

// learn adds the values of one privileged field.
func (h *hygiene) learn(p *pb.Privileged, st *stats) {
	if p == nil {
		return
	}
	before := len(h.secrets)
	h.add("the AVT id", p.GetAvtId(), false)
	h.add("the interpretation", p.GetInterpretation(), false)
	for _, a := range p.GetAmbiguities() {
		h.add("the resolution of "+a.GetTerm(), a.GetResolution(), false)
	}
	for _, s := range p.GetReferenceSql() {
		h.add("reference SQL", s, false)
	}
	for _, s := range p.GetFollowUpReferenceSql() {
		h.add("the follow-up's reference SQL", s, false)
	}
	h.add("the verifier's reason", p.GetVerifierReason(), false)
	h.add("the solver's SQL", p.GetSolverSql(), false)
	h.add("the oracle's action", p.GetOracleAction(), false)
	h.add("the chain routing", p.GetRouting(), true)
	if ti := p.GetTide(); ti != nil {
		h.add("the TIDE cluster", ti.GetCluster(), false)
		h.add("the drift utterance", ti.GetDriftUtterance(), false)
		for _, s := range ti.GetPostDriftReferenceSql() {
			h.add("the post-drift reference SQL", s, false)
		}
		h.add("the sample type", ti.GetSampleType(), true)
		h.add("the drift subtype", ti.GetDriftSubtype(), true)
		h.add("the intent subtype", ti.GetIntentSubtype(), true)
	}
	st.secrets.Add(int64(len(h.secrets) - before))
}

// show records texts the policy was shown.
func (h *hygiene) show(where string, texts []string, allowed []string) {
	for _, s := range texts {
		if s != "" {
			h.shown = append(h.shown, shown{where: where, text: s, allowed: allowed})
		}
	}
}

// check searches every text shown for every value learnt.
func (h *hygiene) check(t *testing.T, st *stats) {
	t.Helper()
	st.shown.Add(int64(len(h.shown)))
	for _, s := range h.shown {
		text := s.text
		for _, a := range s.allowed {
			if a = strings.TrimSpace(a); a != "" {
				text = strings.ReplaceAll(text, a, "\x00")
			}
		}
		for _, sec := range h.secrets {
			if holds(text, sec) {
				t.Errorf("%s shows privileged data, %s %.120q: %.300q", s.where, sec.what, sec.text, s.text)
			}
		}
	}
	h.shown = h.shown[:0]
}

// holds reports whether text contains the secret (as a whole word, for a
// label).
func holds(text string, s secret) bool {
	if !s.word {
		return strings.Contains(text, s.text)
	}
	for from := 0; ; {
		i := strings.Index(text[from:], s.text)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(s.text)
		before, _ := utf8.DecodeLastRuneInString(text[:i])
		after, _ := utf8.DecodeRuneInString(text[end:])
		if !isWordRune(before) && !isWordRune(after) {
			return true
		}
		from = i + 1
	}
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}
