package postgres

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"avtgym/sqlexec"
)

// maxSampleCell bounds the characters of one sample cell in Schema's text.
const maxSampleCell = 80

// schemaLimits bound Schema's catalog queries.
var schemaLimits = sqlexec.Limits{Timeout: 30 * time.Second, MaxRows: 1_000_000, MaxBytes: 256 << 20, MaxMemory: 64 << 20}

// Schema returns the public schema text: for each table of the public schema
// (in creation order, which is load order), a CREATE TABLE statement built
// from the catalog (columns with their types, NOT NULL and defaults, then the
// primary key, unique, check and foreign-key constraints), followed, when
// sampleRows > 0, by a comment block with the table's first sampleRows rows
// as SQL literals separated by " | " under a header of column names. Views
// and materialized views follow as CREATE VIEW statements.
func (d *DB) Schema(ctx context.Context, sampleRows int) (string, error) {
	rels, err := d.Query(ctx, `SELECT c.oid::bigint, c.relname, c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
		ORDER BY c.relkind IN ('v', 'm'), c.oid`, schemaLimits)
	if err != nil {
		return "", err
	}
	cols, err := d.Query(ctx, `SELECT a.attrelid::bigint, quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
			a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attrelid, a.attnum`, schemaLimits)
	if err != nil {
		return "", err
	}
	cons, err := d.Query(ctx, `SELECT co.conrelid::bigint, pg_get_constraintdef(co.oid, true)
		FROM pg_constraint co JOIN pg_class c ON c.oid = co.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND co.contype IN ('p', 'u', 'c', 'f', 'x')
		ORDER BY co.conrelid, array_position(ARRAY['p', 'u', 'c', 'x', 'f']::"char"[], co.contype), co.conname`, schemaLimits)
	if err != nil {
		return "", err
	}
	views, err := d.Query(ctx, `SELECT c.oid::bigint, pg_get_viewdef(c.oid, true)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm')`, schemaLimits)
	if err != nil {
		return "", err
	}
	colsOf := map[int64][]string{}
	for _, r := range cols.Rows {
		line := str(r[1]) + " " + str(r[2])
		if r[3] == int64(1) {
			line += " NOT NULL"
		}
		if r[4] != nil {
			line += " DEFAULT " + str(r[4])
		}
		colsOf[r[0].(int64)] = append(colsOf[r[0].(int64)], line)
	}
	consOf := map[int64][]string{}
	for _, r := range cons.Rows {
		consOf[r[0].(int64)] = append(consOf[r[0].(int64)], str(r[1]))
	}
	viewDef := map[int64]string{}
	for _, r := range views.Rows {
		viewDef[r[0].(int64)] = str(r[1])
	}
	var b strings.Builder
	for i, r := range rels.Rows {
		oid, name, kind := r[0].(int64), str(r[1]), str(r[2])
		if i > 0 {
			b.WriteString("\n")
		}
		switch kind {
		case "v", "m":
			word := "VIEW"
			if kind == "m" {
				word = "MATERIALIZED VIEW"
			}
			fmt.Fprintf(&b, "CREATE %s %s AS\n%s\n", word, quoteIdent(name), strings.TrimSpace(viewDef[oid]))
			continue
		}
		fmt.Fprintf(&b, "CREATE TABLE %s (\n", quoteIdent(name))
		lines := append(append([]string(nil), colsOf[oid]...), consOf[oid]...)
		for j, l := range lines {
			b.WriteString("    " + l)
			if j < len(lines)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(");\n")
		if sampleRows <= 0 {
			continue
		}
		slim := schemaLimits
		slim.MaxRows = sampleRows
		slim.MaxBytes = 16 << 20
		res, err := d.Query(ctx, fmt.Sprintf("SELECT * FROM public.%s LIMIT %d", quoteIdent(name), sampleRows), slim)
		if err != nil {
			if k := sqlexec.KindOf(err); k == sqlexec.KindUnavailable || k == sqlexec.KindBusy {
				return "", err
			}
			fmt.Fprintf(&b, "/* rows of %s cannot be read: %v */\n", quoteIdent(name), commentSafe(err.Error()))
			continue
		}
		writeSample(&b, name, res)
	}
	return b.String(), nil
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
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
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "'" + strconv.FormatFloat(x, 'g', -1, 64) + "'"
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		r := []rune(x)
		if len(r) > maxSampleCell {
			x = string(r[:maxSampleCell]) + "..."
		}
		x = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(x)
		return "'" + strings.ReplaceAll(x, "'", "''") + "'"
	case []byte:
		if len(x) > maxSampleCell/2 {
			return fmt.Sprintf(`'\x%x...'`, x[:maxSampleCell/2])
		}
		return fmt.Sprintf(`'\x%x'`, x)
	}
	return fmt.Sprint(v)
}

// commentSafe keeps a text from ending the comment block.
func commentSafe(s string) string { return strings.ReplaceAll(s, "*/", "* /") }

// quoteIdent quotes an identifier when PostgreSQL needs it quoted.
func quoteIdent(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '$')
	}
	if plain && !reservedWords[s] {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// reservedWords are keywords that must be quoted as column or table names
// (PostgreSQL's reserved keywords).
var reservedWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`all analyse analyze and any array as asc asymmetric authorization binary both case cast check collate
		collation column concurrently constraint create cross current_catalog current_date current_role current_schema
		current_time current_timestamp current_user default deferrable desc distinct do else end except false fetch for
		foreign freeze from full grant group having ilike in initially inner intersect into is isnull join lateral leading
		left like limit localtime localtimestamp natural not notnull null offset on only or order outer overlaps placing
		primary references returning right select session_user similar some symmetric system_user table tablesample then to
		trailing true union unique user using variadic verbose when where window with`) {
		m[w] = true
	}
	return m
}()
