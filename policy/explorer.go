package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"avtgym/driver"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// ExplorerName is the name of the explorer policy.
const ExplorerName = "explorer"

// Explorer is the scripted explorer of a-Interact (issue 16): under
// BIRD_A it calls each environment tool once in sub-task 1 (get_schema;
// execute of `SELECT * FROM <first table> LIMIT 1`, or `SELECT 1` when no
// table can be read; get_all_column_meanings; get_column_meaning on the
// first public column; get_all_external_knowledge_names;
// get_knowledge_definition on the first public entry, when there is one;
// get_all_knowledge_definitions), asks each counted term's canonical
// question (as full does), submits the task's reference SQL and, once the
// follow-up is released, the follow-up's reference (both from the
// privileged channel). It keeps to the coin budget: a tool is called only
// when the coins left after it still pay for the questions not yet asked
// and both submissions (with BIRD-Interact's default patience of 6 every
// tool fits: 5.5 + 2m + 3 + 3 ≤ 12 + 2m); a question only when the coins
// left after it still pay for phase 1's submission. Under the other
// protocols it plays as full.
func Explorer() Player { return explorer{} }

type explorer struct{}

func (explorer) Name() string { return ExplorerName }

func (explorer) Play(ctx context.Context, ep *driver.Episode) error {
	if ep.Protocol() != pb.Protocol_PROTOCOL_BIRD_A {
		return Scripted(probe.Full).Play(ctx, ep)
	}
	qs := probe.Questions(probe.Full, ep.Terms(), ep.Budget())
	if err := Explore(ctx, ep, 2000*int64(len(qs))+2*ep.CostMilli(driver.ActSubmitSQL)); err != nil {
		return err
	}
	return Solve(ctx, ep, qs, ReferenceSQL)
}

// Explore calls each BIRD_A tool once, in the explorer's order, while the
// episode takes actions other than SQL and the coins left after the tool
// are at least reserve (thousandths of a coin); a tool that does not fit
// is skipped (a cheaper one after it may fit).
func Explore(ctx context.Context, ep *driver.Episode, reserve int64) error {
	view := ep.Task()
	table, column := firstColumn(view)
	var schema, names string
	steps := []struct {
		name string
		act  func() *pb.Action // nil: skip
		seen *string           // the tool's output, kept
	}{
		{driver.ActGetSchema, driver.GetSchemaAction, &schema},
		{driver.ActExecute, func() *pb.Action {
			t := table
			if t == "" {
				t, _ = schemaColumn(schema)
			}
			if t == "" {
				return driver.ExecuteAction("SELECT 1")
			}
			return driver.ExecuteAction(fmt.Sprintf("SELECT * FROM %s LIMIT 1", quoteIdent(t)))
		}, nil},
		{driver.ActGetAllColumnMeanings, driver.GetAllColumnMeaningsAction, nil},
		{driver.ActGetColumnMeaning, func() *pb.Action {
			t, c := table, column
			if t == "" || c == "" {
				t, c = schemaColumn(schema)
			}
			if t == "" || c == "" {
				return nil
			}
			return driver.GetColumnMeaningAction(t, c)
		}, nil},
		{driver.ActGetAllExternalKnowledgeNames, driver.GetAllExternalKnowledgeNamesAction, &names},
		{driver.ActGetKnowledgeDefinition, func() *pb.Action {
			if n := firstKnowledge(view, names); n != "" {
				return driver.GetKnowledgeDefinitionAction(n)
			}
			return nil
		}, nil},
		{driver.ActGetAllKnowledgeDefinitions, driver.GetAllKnowledgeDefinitionsAction, nil},
	}
	for _, s := range steps {
		if !ep.Asking() {
			return nil
		}
		if ep.CoinsLeftMilli()-ep.CostMilli(s.name) < reserve {
			continue
		}
		a := s.act()
		if a == nil {
			continue
		}
		if err := ep.Do(ctx, a); err != nil {
			return err
		}
		if s.seen != nil {
			*s.seen, _ = ep.ToolResult()
		}
	}
	return nil
}

// firstColumn is the first (in sorted order) "table.column" of the view's
// public column meanings, split; "", "" when there is none.
func firstColumn(v *pb.TaskView) (table, column string) {
	keys := make([]string, 0, len(v.GetDatabase().GetColumnMeanings()))
	for k := range v.GetDatabase().GetColumnMeanings() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if t, c, ok := strings.Cut(k, "."); ok && t != "" && c != "" {
			return t, c
		}
	}
	t, c := schemaColumn(v.GetDatabase().GetSchema())
	return t, c
}

var createTable = regexp.MustCompile("(?is)CREATE\\s+TABLE\\s+(?:IF\\s+NOT\\s+EXISTS\\s+)?[\"`\\[]?([A-Za-z_][A-Za-z0-9_]*)[\"`\\]]?\\s*\\(\\s*[\"`\\[]?([A-Za-z_][A-Za-z0-9_]*)")

// schemaColumn is the first table of DDL text and its first column.
func schemaColumn(ddl string) (table, column string) {
	m := createTable.FindStringSubmatch(ddl)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// quoteIdent quotes an identifier for SQL (SQLite and PostgreSQL alike),
// unless it is a plain lower-case one.
func quoteIdent(s string) string {
	if plainIdent.MatchString(s) {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// firstKnowledge is the name of the first public knowledge entry: from the
// task view, else from the output of get_all_external_knowledge_names (a
// JSON list of names, or one name per line).
func firstKnowledge(v *pb.TaskView, names string) string {
	for _, k := range v.GetDatabase().GetKnowledge() {
		if k.GetName() != "" {
			return k.GetName()
		}
	}
	if strings.HasPrefix(strings.TrimSpace(names), "No ") {
		return "" // the server's "No external knowledge is available."
	}
	var list []string
	if json.Unmarshal([]byte(strings.TrimSpace(names)), &list) == nil {
		for _, n := range list {
			if n = strings.TrimSpace(n); n != "" {
				return n
			}
		}
		return ""
	}
	for _, line := range strings.Split(names, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "-*•"))
		if line != "" && !strings.HasSuffix(line, ":") {
			return line
		}
	}
	return ""
}
