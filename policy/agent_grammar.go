package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// The agentic action grammar of BIRD-Interact, as the LLM agent's prompts
// teach it and as the Python client's parse_action reads it: one call per
// turn, inside <action></action> (the last block counts when there are
// several; without the tags the whole reply, or the body of a ``` fence,
// must be the call):
//
//	ask("…")  submit("…")  execute("…")  get_schema()  get_all_column_meanings()
//	get_column_meaning("table", "column")  get_all_external_knowledge_names()
//	get_knowledge_definition("name")  get_all_knowledge_definitions()  stop()
//
// Names are case-insensitive (submit_sql is submit's alias). A string
// argument may be written with double, single or triple quotes and the
// escapes \" \' \\ \n \t; a one-argument call takes everything between its
// first and last quote, so that quotes left unescaped inside SQL are kept;
// an unquoted argument is taken as it is.

var (
	actionBlock = regexp.MustCompile(`(?is)<action>(.*?)</action>`)
	callRe      = regexp.MustCompile(`(?s)^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*;?\s*$`)
	fenceRe     = regexp.MustCompile("(?s)^```[ \\t]*[A-Za-z0-9_-]*[ \\t]*\\n?(.*?)```$")
)

// errNoAction says that a reply holds no action of the grammar.
var errNoAction = errors.New(`no action found: reply with one call inside <action></action>, e.g. <action>ask("…")</action>`)

// ParseAgentAction reads one action of the agentic grammar from a model's
// reply. Under BIRD_C only ask, submit and stop are actions (a tool call
// is an error there); under BIRD_A every call of the grammar is.
func ParseAgentAction(reply string, p pb.Protocol) (*pb.Action, error) {
	body := strings.TrimSpace(reply)
	if blocks := actionBlock.FindAllStringSubmatch(reply, -1); len(blocks) > 0 {
		body = strings.TrimSpace(blocks[len(blocks)-1][1])
	}
	if m := fenceRe.FindStringSubmatch(body); m != nil {
		body = strings.TrimSpace(m[1])
	}
	m := callRe.FindStringSubmatch(body)
	if m == nil {
		return nil, errNoAction
	}
	name, args := strings.ToLower(m[1]), m[2]
	one := func() (string, error) {
		v := strings.TrimSpace(oneString(args))
		if v == "" {
			return "", fmt.Errorf("%s(…) needs a non-empty argument", name)
		}
		return v, nil
	}
	none := func(a *pb.Action) (*pb.Action, error) {
		if strings.TrimSpace(args) != "" {
			return nil, fmt.Errorf("%s() takes no argument", name)
		}
		return a, nil
	}
	var (
		a   *pb.Action
		err error
	)
	switch name {
	case "ask":
		var q string
		if q, err = one(); err == nil {
			a = driver.AskAction(q)
		}
	case "submit", "submit_sql":
		var sql string
		if sql, err = one(); err == nil {
			a = driver.SubmitSQLAction(sql)
		}
	case "stop":
		a, err = none(driver.StopAction())
	case "execute":
		var sql string
		if sql, err = one(); err == nil {
			a = driver.ExecuteAction(sql)
		}
	case "get_schema":
		a, err = none(driver.GetSchemaAction())
	case "get_all_column_meanings":
		a, err = none(driver.GetAllColumnMeaningsAction())
	case "get_column_meaning":
		parts, ok := stringArgs(args)
		if !ok || len(parts) != 2 || strings.TrimSpace(parts[0]) == "" || strings.TrimSpace(parts[1]) == "" {
			return nil, errors.New(`get_column_meaning needs two arguments: ("table", "column")`)
		}
		a = driver.GetColumnMeaningAction(strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]))
	case "get_all_external_knowledge_names":
		a, err = none(driver.GetAllExternalKnowledgeNamesAction())
	case "get_knowledge_definition":
		var n string
		if n, err = one(); err == nil {
			a = driver.GetKnowledgeDefinitionAction(n)
		}
	case "get_all_knowledge_definitions":
		a, err = none(driver.GetAllKnowledgeDefinitionsAction())
	default:
		return nil, fmt.Errorf("unknown action %q", m[1])
	}
	if err != nil {
		return nil, err
	}
	if p != pb.Protocol_PROTOCOL_BIRD_A && driver.ActionName(a) != driver.ActAsk && driver.ActionName(a) != driver.ActSubmitSQL && driver.ActionName(a) != driver.ActStop {
		return nil, fmt.Errorf("%s is not available in this mode: ask or submit", name)
	}
	return a, nil
}

// unescape undoes the escapes \\ \" \' \n \t (any other backslash is kept).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '\\', '"', '\'':
				b.WriteByte(s[i+1])
				i++
				continue
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// oneString is a one-argument call's argument: between its first and last
// quote (triple quotes first), escapes undone; an unquoted one as it is.
func oneString(args string) string {
	a := strings.TrimSpace(args)
	for _, q := range []string{`"""`, `'''`} {
		if len(a) >= 6 && strings.HasPrefix(a, q) && strings.HasSuffix(a, q) {
			return a[3 : len(a)-3]
		}
	}
	if len(a) >= 2 && (a[0] == '"' || a[0] == '\'') && a[len(a)-1] == a[0] {
		return unescape(a[1 : len(a)-1])
	}
	return a
}

// stringArgs reads a call's comma-separated string arguments: quoted
// strings (escapes undone), or bare words.
func stringArgs(args string) ([]string, bool) {
	a := strings.TrimSpace(args)
	if a == "" {
		return nil, true
	}
	if a[0] != '"' && a[0] != '\'' {
		parts := strings.Split(a, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return parts, true
	}
	var out []string
	for i := 0; i < len(a); {
		q := a[i]
		if q != '"' && q != '\'' {
			return nil, false
		}
		j := i + 1
		for j < len(a) && a[j] != q {
			if a[j] == '\\' && j+1 < len(a) {
				j++
			}
			j++
		}
		if j >= len(a) {
			return nil, false
		}
		out = append(out, unescape(a[i+1:j]))
		i = j + 1
		for i < len(a) && (a[i] == ' ' || a[i] == '\t' || a[i] == '\n') {
			i++
		}
		if i < len(a) {
			if a[i] != ',' {
				return nil, false
			}
			i++
			for i < len(a) && (a[i] == ' ' || a[i] == '\t' || a[i] == '\n') {
				i++
			}
		}
	}
	return out, true
}

// RenderAgentAction writes a policy turn of the history in the grammar, as
// the agent's prompts show its earlier actions (ChatAction under BIRD-Interact's
// protocols): a question as ask("…"), SQL as submit("…"), a stop as
// stop(), a tool call as the server wrote it; unparsed output as it was.
func RenderAgentAction(t *pb.Turn) string {
	return ChatAction(pb.Protocol_PROTOCOL_BIRD_C, t)
}
