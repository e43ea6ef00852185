package conformance

// What the protocols' scripts share: the scripted policies' questions
// (PROTOCOL.md §5), the policy's faults (docs/protocols.md "Episodes",
// docs/limits.md), the turns a step may add, and moves every protocol
// makes.

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"avtgym/driver"
	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// The scripted questions (PROTOCOL.md §5): the full policy's, naming a
// counted term, and the generic probe's, naming none.
func fullQuestion(term string) string {
	return "Could you clarify what exactly you mean by " + term + "?"
}

var genericQuestions = []string{"Could you clarify what you want?", "Please elaborate."}

// wrongSQL runs on every database and answers no task.
const wrongSQL = "SELECT 'conformance: not the answer' AS probe"

// The policy's faults (docs/protocols.md "Episodes", docs/limits.md): questions the
// environment refuses in the oracle's place, and SQL it does not run or
// that fails.
var (
	faultyQuestions = []struct{ name, text string }{
		{"an empty question", ""},
		{"a blank question", " \t\n "},
		{"a question that is not UTF-8", "Could you clarify \xff\xfe what you mean?"},
		{"an oversized question", strings.Repeat("Could you clarify what you mean? ", env.MaxQuestionBytes/32+1)},
	}
	// unrunSQL are texts the environment does not run (docs/protocols.md: "Your SQL
	// was not run: it …").
	unrunSQL = []struct{ name, sql string }{
		{"empty SQL", ""},
		{"SQL that is not UTF-8", "SELECT '\xff\xfe'"},
		{"oversized SQL", "SELECT 1" + strings.Repeat(" ", env.MaxSQLBytes)},
	}
	// failingSQL are texts the database rejects.
	failingSQL = []struct{ name, sql string }{
		{"SQL that does not parse", "SELEC 1 FROM"},
		{"SQL that names nothing", "SELECT no_such_column FROM no_such_table"},
	}
)

const refusalPrefix = "I can't answer that: the question "

// Turn wants: a kind, a kind and its text, a kind and its text's start.
func turnOf(kind pb.TurnKind) turnWant { return turnWant{kind: kind} }
func turnSaying(kind pb.TurnKind, text string) turnWant {
	return turnWant{kind: kind, text: text}
}
func turnStarting(kind pb.TurnKind, prefix string) turnWant {
	return turnWant{kind: kind, text: prefix, prefix: true}
}

var (
	question     = turnOf(pb.TurnKind_TURN_KIND_QUESTION)
	reply        = turnOf(pb.TurnKind_TURN_KIND_REPLY)
	refusal      = turnOf(pb.TurnKind_TURN_KIND_REFUSAL)
	stopTurn     = turnOf(pb.TurnKind_TURN_KIND_STOP)
	sqlTurn      = turnOf(pb.TurnKind_TURN_KIND_SQL)
	feedback     = turnOf(pb.TurnKind_TURN_KIND_FEEDBACK)
	notice       = turnOf(pb.TurnKind_TURN_KIND_NOTICE)
	request      = turnOf(pb.TurnKind_TURN_KIND_REQUEST)
	unparsedTurn = turnOf(pb.TurnKind_TURN_KIND_UNPARSED)
	toolCall     = turnOf(pb.TurnKind_TURN_KIND_TOOL_CALL)
	toolResult   = turnOf(pb.TurnKind_TURN_KIND_TOOL_RESULT)
)

func turns(t ...turnWant) []turnWant { return t }

// afterDone are the moves that follow a finished episode: any action is
// FAILED_PRECONDITION / EPISODE_DONE, and the token stays as it was.
func afterDone() []move {
	return []move{
		{name: "ask after the end", act: ask("Anything else?"), want: want{code: codes.FailedPrecondition, reason: "EPISODE_DONE"}},
		{name: "stop after the end", act: stop(), want: want{code: codes.FailedPrecondition, reason: "EPISODE_DONE"}},
		{name: "submit after the end", act: submit(wrongSQL), want: want{code: codes.FailedPrecondition, reason: "EPISODE_DONE"}},
	}
}

// askTerms asks the full question of every counted term: each is answered
// with a reply and credited with its term.
func askTerms(tk *task, charge int64) []move {
	var out []move
	for _, term := range tk.terms {
		out = append(out, move{name: "ask about " + term, act: ask(fullQuestion(term)),
			want: want{turns: turns(question, reply), charge: charge, credit: []string{term}}})
	}
	return out
}

// badRequests are steps, from the reset, that are not actions of the
// protocol: no action, and (outside BIRD_A) a tool: INVALID_ARGUMENT /
// INVALID_ACTION.
func badRequests(tools bool) []move {
	invalid := want{code: codes.InvalidArgument, reason: "INVALID_ACTION"}
	out := []move{
		{name: "no action", from: "reset", act: act(nil), want: invalid},
		{name: "an empty action", from: "reset", act: act(&pb.Action{}), want: invalid},
	}
	if !tools {
		out = append(out,
			move{name: "a tool (BIRD_A's)", from: "reset", act: act(driver.GetSchemaAction()), want: invalid},
			move{name: "execute (BIRD_A's)", from: "reset", act: act(driver.ExecuteAction("SELECT 1")), want: invalid})
	}
	return out
}

// genericAsks are n generic questions, each refused, crediting nothing and
// using charge of the budget; after the i-th (from 1), sqlRequired(i)
// says whether only SQL is accepted (nil: never).
func genericAsks(n int, charge int64, sqlRequired func(i int) bool) []move {
	var out []move
	for i := range n {
		w := want{turns: turns(question, refusal), charge: charge, noCredit: true}
		if sqlRequired != nil && sqlRequired(i+1) {
			w.sqlRequired, w.phase = true, pb.Phase_PHASE_SOLVING
		}
		out = append(out, move{name: "generic question " + strconv.Itoa(i+1), act: ask(genericQuestions[i%2]), want: w})
	}
	return out
}

// badSQL is every SQL text the policy gets wrong: not run, or failing.
func badSQL() []struct{ name, sql string } { return slices.Concat(unrunSQL, failingSQL) }

// Action constructors, as moves take them.
func act(a *pb.Action) func(*play) *pb.Action { return func(*play) *pb.Action { return a } }
func ask(q string) func(*play) *pb.Action     { return act(driver.AskAction(q)) }
func stop() func(*play) *pb.Action            { return act(driver.StopAction()) }
func submit(sql string) func(*play) *pb.Action {
	return act(driver.SubmitSQLAction(sql))
}
func unparsed(text string) func(*play) *pb.Action { return act(driver.UnparsedAction(text)) }

// submitFollowUp submits the follow-up's reference, as the step that
// released it gave it in the privileged field.
func submitFollowUp() func(*play) *pb.Action {
	return func(pl *play) *pb.Action {
		for i := len(pl.history) - 1; i >= 0; i-- {
			if ref := pl.history[i].resp.GetPrivileged().GetFollowUpReferenceSql(); len(ref) > 0 {
				return driver.SubmitSQLAction(strings.Join(ref, ";\n"))
			}
		}
		pl.t.Fatal("(suite) no step released the follow-up")
		return nil
	}
}
