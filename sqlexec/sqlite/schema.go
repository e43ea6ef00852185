package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"avtgym/sqlexec"
)

// maxSampleCell bounds the characters of one sample cell in Schema's text.
const maxSampleCell = 80

// Schema returns the public schema text: for each table (in the order of sqlite_schema)
// its CREATE statement, followed, when sampleRows > 0, by a comment block with the
// table's first sampleRows rows, one per line, cells as SQL literals separated by " | "
// under a header line of column names. Views follow as their CREATE statements; indexes
// and SQLite's internal tables are left out.
func (d *DB) Schema(ctx context.Context, sampleRows int) (string, error) {
	lim := sqlexec.DefaultLimits()
	objs, err := d.Query(ctx, `SELECT type, name, sql FROM sqlite_schema
		WHERE type IN ('table', 'view') AND sql IS NOT NULL AND name NOT LIKE 'sqlite\_%' ESCAPE '\'
		ORDER BY type = 'view', rowid`, lim)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, row := range objs.Rows {
		typ, _ := row[0].(string)
		name, _ := row[1].(string)
		create, _ := row[2].(string)
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(strings.TrimSpace(create))
		b.WriteString(";\n")
		if typ != "table" || sampleRows <= 0 {
			continue
		}
		slim := lim
		slim.MaxRows = sampleRows
		res, err := d.Query(ctx, fmt.Sprintf("SELECT * FROM %s LIMIT %d", quoteIdent(name), sampleRows), slim)
		if err != nil {
			// Virtual tables whose module is missing cannot be read; say so and go on.
			if sqlexec.KindOf(err) == sqlexec.KindSyntax {
				fmt.Fprintf(&b, "/* rows of %s cannot be read: %v */\n", quoteIdent(name), err)
				continue
			}
			return "", err
		}
		writeSample(&b, name, res)
	}
	return b.String(), nil
}

func writeSample(b *strings.Builder, name string, res *sqlexec.Result) {
	switch len(res.Rows) {
	case 0:
		fmt.Fprintf(b, "/* %s has no rows */\n", quoteIdent(name))
		return
	case 1:
		fmt.Fprintf(b, "/*\n1 example row from %s:\n", quoteIdent(name))
	default:
		fmt.Fprintf(b, "/*\n%d example rows from %s:\n", len(res.Rows), quoteIdent(name))
	}
	b.WriteString(commentSafe(strings.Join(res.Columns, " | ")))
	b.WriteString("\n")
	for _, row := range res.Rows {
		for j, v := range row {
			if j > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(commentSafe(literal(v)))
		}
		b.WriteString("\n")
	}
	b.WriteString("*/\n")
}

// literal renders a cell as a SQL literal, shortened to maxSampleCell characters.
func literal(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		r := []rune(x)
		if len(r) > maxSampleCell {
			x = string(r[:maxSampleCell]) + "..."
		}
		x = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(x)
		return "'" + strings.ReplaceAll(x, "'", "''") + "'"
	case []byte:
		if len(x) > maxSampleCell/2 {
			return fmt.Sprintf("X'%X...'", x[:maxSampleCell/2])
		}
		return fmt.Sprintf("X'%X'", x)
	}
	return fmt.Sprint(v)
}

// commentSafe keeps a text from ending the comment block.
func commentSafe(s string) string { return strings.ReplaceAll(s, "*/", "* /") }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
