package env

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"avtgym/corpus"
	"avtgym/reward"
)

// The size arithmetic of an episode, in one place (docs/limits.md has the
// numbers).
//
// Per turn, every text the environment stores or sends is bounded:
//
//	question       MaxQuestionBytes  16 KiB  the policy's; longer is a policy fault (below)
//	SQL            MaxSQLBytes      256 KiB  the policy's or a solver's; longer is a failed solution
//	oracle reply   MaxReplyBytes     16 KiB  any oracle's reply is cut to it (TruncationMarker)
//	notice         MaxNoticeBytes     8 KiB  verifier feedback, notices, the verifier's and
//	                                         failure reasons are cut to it
//
// The budget bounds how many turns there are: an episode answers at most
// B = m + C questions, with m ≤ corpus.MaxAmbiguities (64) counted
// ambiguities and C ≤ MaxExtraQuestions (64), or B ≤ MaxExtraQuestions on
// a zero-ambiguity control; so at most MaxAnswered = 128 answered
// questions, each stored with its question and its reply in a chunk of
// the token's history (historyBound) and an 8-byte credit mask in the
// state.
//
// From those, StateBound is a hard bound on the encoded episode state: the
// shared fields at their widest encodings, the corpus name and record id
// (the only corpus-dependent terms), MaxAnswered credit masks, one SQL
// solution and one verifier reason, plus the largest protocol state
// message (each protocol's stateBound, beside its rules: the rules oneof
// holds one). TokenBound adds the history, the token's header, nonce,
// length prefix, tag and padding bucket. StepResponseBound bounds one StepResponse: the
// token, the turns one step can add (at most three: question + reply,
// question + two notices, or SQL + feedback), the counters, the reward and
// the privileged field (whose corpus-dependent terms are the ambiguity
// terms and AVT labels of the task).
//
// Policy faults are scored, not rejected: a question that is empty, not
// valid UTF-8 or longer than MaxQuestionBytes is answered by the
// environment with a refusal (it counts as an asked question and credits
// nothing), and SQL that is empty, not valid UTF-8 or longer than
// MaxSQLBytes fails verification with a feedback turn saying why. What the
// state keeps of such text is its bounded, valid UTF-8 form (BoundText).
//
// Env enforces the bounds: seal refuses a state above StateBound (an
// Internal error: it would be a bug in this arithmetic), and open rejects
// a token longer than TokenBound before decrypting it (TOKEN_MALFORMED).
//
// A protocol extends the arithmetic where its state or a step grows: its
// state message's bound is its rules' stateBound, and its step shapes are
// terms of StepResponseBound. BIRD-Interact's message (bird.go) keeps
// sub-task 1's accepted SQL (MaxSQLBytes) for the follow-up, BIRD_C's turns
// and BIRD_A's coins and one-byte-per-action log (maxActionLog), not its
// tool outputs; its questions stay within MaxAnswered (BIRD_C: m + patience
// ≤ 64 + 32 + 1; BIRD_A: the coins buy at most (6 + 2·64 + 32) / 2 = 83).
// To StepResponseBound, BIRD_C's release adds the SQL and the follow-up's
// request turn (a corpus-dependent term) with the follow-up's reference in
// the privileged field, and a BIRD_A tool step the call (an execute holds
// up to MaxSQLBytes of SQL) and the output (MaxToolResultBytes). An
// unparsed output is kept like a question (MaxQuestionBytes). TIDE's
// message (tide.go) keeps its counters and its first SQL (MaxSQLBytes; the
// second is the shared solution); its questions are at most TideTurns
// plus TIDE_P's one pre-filled question (its text cut to MaxQuestionBytes
// and its answer to MaxReplyBytes at reset), within MaxAnswered. A TIDE
// step may add the turn-limit notice after a question and its reply, and
// the drift step adds the SQL, the drift utterance (a corpus-dependent
// term) and that notice; the privileged field adds the question's routing
// (maxRoutingBytes). Each new term gets its per-turn limit here, enforced
// by env at the point where the text enters the episode, and a field in
// TestStateBoundIsExact's worst-case state.
const (
	// MaxQuestionBytes bounds a question.
	MaxQuestionBytes = 16 << 10
	// MaxSQLBytes bounds submitted (and solver-written) SQL.
	MaxSQLBytes = 256 << 10
	// MaxReplyBytes bounds an oracle reply (and the oracle's privileged
	// action label); longer replies are cut, at a UTF-8 boundary, and end
	// with TruncationMarker.
	MaxReplyBytes = 16 << 10
	// MaxNoticeBytes bounds the environment's own texts: verifier
	// feedback, notices, and the verifier's and failures' reasons.
	MaxNoticeBytes = 8 << 10
	// MaxExtraQuestions bounds C (extra_questions) and the zero-ambiguity
	// budget.
	MaxExtraQuestions = 64
	// MaxAnswered bounds the answered questions of one episode: the
	// largest budget, corpus.MaxAmbiguities + MaxExtraQuestions.
	MaxAnswered = corpus.MaxAmbiguities + MaxExtraQuestions
	// MaxGroupSize bounds one reset's GRPO group.
	MaxGroupSize = 1024
	// TruncationMarker ends a text that was cut to its limit.
	TruncationMarker = "…[truncated]"
	// idAllowance is the identifier length (corpus name, record id) that
	// open's token bound allows at least, whatever the served corpora use,
	// so that a replica serving shorter ids still recognises the tokens of
	// one serving longer ones as RECORD_CHANGED rather than malformed.
	idAllowance = 1 << 10
)

// The old names, for the files that use them.
const (
	maxQuestionBytes  = MaxQuestionBytes
	maxSQLBytes       = MaxSQLBytes
	maxExtraQuestions = MaxExtraQuestions
)

// Encoded sizes of protobuf fields at their largest.
func varintField(num protowire.Number) int { return protowire.SizeTag(num) + 10 } // any int32/int64/uint64/enum, negatives included
func uint32Field(num protowire.Number) int { return protowire.SizeTag(num) + 5 }
func boolField(num protowire.Number) int   { return protowire.SizeTag(num) + 1 }
func fixed64Field(num protowire.Number) int {
	return protowire.SizeTag(num) + 8
}
func doubleField(num protowire.Number) int { return protowire.SizeTag(num) + 8 }

// bytesField is a string, bytes or message field of n bytes.
func bytesField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// answeredBound bounds one statepb.AnsweredQuestion: a chunk's
// plaintext.
func answeredBound() int {
	return bytesField(1, MaxQuestionBytes) + // question
		bytesField(2, MaxReplyBytes) // reply
}

// historyBound bounds the token's history: MaxAnswered chunks, each its
// plaintext and chunkOverhead (history.go).
var historyBound = MaxAnswered * (chunkOverhead + answeredBound())

// StateBound bounds the encoded statepb.EpisodeState of an episode whose
// corpus name is corpusBytes long and whose record id is idBytes long:
// the shared fields (sharedStateBound) and the largest protocol state
// message (each protocol's rules.stateBound, beside its rules).
// TestStateBoundIsExact fills every field of every protocol's state to its
// limit and checks that the sums are exact.
func StateBound(corpusBytes, idBytes int) int {
	return sharedStateBound(corpusBytes, idBytes) + maxRulesStateBound
}

// maxRulesStateBound is the largest protocol state message's bound (the
// rules oneof holds one).
var maxRulesStateBound = func() int {
	n := 0
	for _, p := range protocols {
		n = max(n, rulesOf(p).stateBound())
	}
	return n
}()

// sharedStateBound bounds EpisodeState's shared fields. Each term is one
// field at its largest.
func sharedStateBound(corpusBytes, idBytes int) int {
	return uint32Field(1) + // version
		bytesField(2, corpusBytes) + // corpus
		bytesField(3, idBytes) + // record id
		varintField(5) + // seed
		varintField(6) + // group index
		varintField(7) + varintField(8) + varintField(9) + // reward, solver, oracle
		varintField(10) + // budget
		varintField(11) + varintField(12) + // phase, status
		varintField(14) + // attempted
		bytesField(15, MaxSQLBytes) + // solution SQL
		boolField(16) + boolField(17) + // verified, outcome
		bytesField(18, MaxNoticeBytes) + // verifier reason
		varintField(19) + // issued
		boolField(20) + // strict credit
		varintField(21) + // protocol
		varintField(41) + // pre-filled questions
		fixed64Field(42) + fixed64Field(43) + // record hash
		varintField(47) + // comparison
		fixed64Field(48) + fixed64Field(49) + // uid
		tagsBound() + // tags (tags.go)
		varintField(51) + // answered
		bytesField(52, 8*MaxAnswered) + // credit masks (packed)
		uint32Field(53) + // history length
		fixed64Field(54) + fixed64Field(55) // history tag
}

// TokenBound bounds the sealed token of a state of at most StateBound
// bytes for these identifier lengths and a history of at most
// historyBound bytes: header, nonce and the padded bucket holding the
// length prefix, the state, the tag and the history.
func TokenBound(corpusBytes, idBytes int) int {
	return tokenSize(StateBound(corpusBytes, idBytes), historyBound)
}

// turnBound bounds one pb.Turn whose text is at most n bytes.
func turnBound(n int) int {
	return varintField(1) + varintField(2) + bytesField(3, n) // role, kind, text
}

// stepTurnsBound bounds the turns one step adds (at most maxStepTurns): a
// question and its reply; a question, the budget notice and a verifier
// feedback or failure notice (an over-budget ask with a server solver);
// a submission and its feedback or failure notice.
func stepTurnsBound() int {
	entry := func(n int) int { return bytesField(2, turnBound(n)) }
	return max(
		entry(MaxQuestionBytes)+entry(MaxReplyBytes)+entry(MaxNoticeBytes), // TIDE: an ask on the last turn
		entry(MaxQuestionBytes)+2*entry(MaxNoticeBytes),
		entry(MaxSQLBytes)+entry(MaxNoticeBytes),
	)
}

// creditBound bounds one pb.Credit naming a term of n bytes.
func creditBound(n int) int {
	return varintField(1) + bytesField(2, n) + boolField(3)
}

// rewardBound bounds a pb.Reward with every component present.
func rewardBound() int {
	n := varintField(1) + doubleField(2) // type, value
	for _, c := range rewardComponents {
		n += bytesField(3, bytesField(1, len(c))+doubleField(2)) // map entry
	}
	return n
}

// rewardComponents are every component name a reward may carry.
var rewardComponents = reward.Components()

// maxRoutingBytes bounds a question's chain routing ("L1", "other", …;
// layers are at most corpus.MaxAmbiguities).
const maxRoutingBytes = 5

// StepResponseBound bounds one pb.StepResponse on a task: the token, the
// observation (the step's turns and four counters), done and status, the
// reward, and the privileged field. The task's corpus-dependent terms are
// its identifiers, its AVT id and interpretation label and its ambiguity
// terms (named by the step's credits and the episode's credits).
func StepResponseBound(t *corpus.Task) int {
	credits := 0
	for _, a := range t.Ambiguities {
		credits += bytesField(5, creditBound(len(a.Term)))
	}
	priv := bytesField(1, len(t.AVTID)) + bytesField(2, len(t.Interpretation)) +
		credits + // this step's credits
		bytesField(6, MaxNoticeBytes) + // verifier reason
		credits + // the episode's credits (field 7: same tag size)
		bytesField(8, MaxSQLBytes) + // solver SQL
		bytesField(9, MaxReplyBytes) + // oracle action
		bytesField(11, maxRoutingBytes) // chain routing
	turns := max(stepTurnsBound(),
		// A BIRD_A tool step: the call and its output.
		bytesField(2, turnBound(maxToolCallBytes))+bytesField(2, turnBound(MaxToolResultBytes)))
	if fu := t.FollowUp; fu != nil {
		for _, s := range fu.Reference.SQL {
			priv += bytesField(10, len(s)) // the follow-up's reference, on release
		}
		// The release: the SQL and the follow-up's request.
		turns = max(turns, bytesField(2, turnBound(MaxSQLBytes))+bytesField(2, turnBound(len(fu.Request))))
	}
	if d := t.Drift; d != nil {
		// TIDE's drift step: the first SQL, the drift turn and the
		// turn-limit notice.
		turns = max(turns, bytesField(2, turnBound(MaxSQLBytes))+bytesField(2, turnBound(len(d.Utterance)))+bytesField(2, turnBound(MaxNoticeBytes)))
	}
	budget := varintField(1) + varintField(2) + varintField(3) + varintField(4)
	obs := turns + varintField(3) + varintField(4) + varintField(5) + varintField(6) + // phase, question counters
		varintField(7) + varintField(8) + bytesField(9, budget) + boolField(10) // protocol, subtask, budget, sql_required
	return bytesField(1, TokenBound(len(t.Corpus.Name), len(t.ID))) +
		bytesField(2, obs) +
		boolField(3) + varintField(4) + // done, status
		bytesField(5, rewardBound()) +
		bytesField(6, priv)
}

// BoundText returns s as valid UTF-8 (each run of invalid bytes replaced
// by U+FFFD) of at most max bytes: a text that is longer is cut at a rune
// boundary and ends with TruncationMarker.
func BoundText(s string, max int) string {
	if len(s) <= max && utf8.ValidString(s) {
		return s
	}
	cut := len(s) > max
	if cut {
		// Cut first: the text may be as large as a request, and at most
		// max bytes of it survive.
		s = s[:max]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !cut && len(s) <= max {
		return s
	}
	return cutRunes(s, max-len(TruncationMarker)) + TruncationMarker
}

// cutRunes returns the longest prefix of s (valid UTF-8) of at most n
// bytes that ends at a rune boundary.
func cutRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// policyFault says why text the policy (or a solver) wrote cannot be used
// as it is: longer than max bytes, not valid UTF-8, or empty (only white
// space). It returns "" for usable text.
func policyFault(s string, max int) string {
	switch {
	case len(s) > max:
		return "is longer than the limit of " + strconv.Itoa(max) + " bytes"
	case !utf8.ValidString(s):
		return "is not valid UTF-8 text"
	case strings.TrimSpace(s) == "":
		return "is empty"
	}
	return ""
}
