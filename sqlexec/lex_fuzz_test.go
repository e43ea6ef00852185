package sqlexec

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fuzzSQL are the seed texts of the lexer fuzz targets: real queries of the
// kinds the corpora hold, and the nastiest texts for a lexer (unterminated
// literals and comments, keywords in literals, Unicode spaces, NUL, trigger
// bodies, dollar quotes, deep nesting).
func fuzzSQL() []string {
	return []string{
		"",
		";",
		" ; ;SELECT 1;;",
		"SELECT 1",
		"SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1",
		"SELECT id, amount FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC",
		"SELECT 1;\nSELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200",
		"WITH r AS (SELECT 1 AS v ORDER BY v) SELECT v FROM r UNION ALL SELECT 2 INTERSECT SELECT 2 EXCEPT SELECT 3 ORDER BY 1",
		"SELECT * FROM a LEFT OUTER JOIN b ON a.id = b.id JOIN c USING (id) natural inner join d CROSS JOIN e",
		"SELECT rank() OVER (ORDER BY s) AS grouping, orderly, group_concat(x ORDER BY x) FROM t",
		"SELECT DISTINCT ROUND(a, 2) -- x\nFROM t /* y */",
		"select distinct a, count(distinct b) from t",
		"SELECT ROUND(CAST(SUM(a) AS REAL) / COUNT(b), 2), ROUND(ROUND(x,1),2), round(y), ROUND (z, 2) FROM t",
		"SELECT ROUND(a + b, 2) * 3, ROUND(length(')'), 1), t.round(x), round FROM t",
		"SELECT ROUND(x, 2",
		"SELECT ROUND(), ROUND(, 2), ROUND(ROUND)(1), ROUND ROUND(1+2)",
		"SELECT 'it''s; -- not a comment', \"a;b\", `c;d`, [e;f], x'00ff', 1.5e-3, .5, 1e+9, $1, ?2, :name, @v FROM t",
		"SELECT $$a;b$$; SELECT $t$;$t$; SELECT $1$",
		"CREATE TRIGGER tr AFTER INSERT ON t BEGIN DELETE FROM u; INSERT INTO v VALUES (1); END; SELECT 1",
		"create temp trigger tr after insert on t begin select 1; end",
		"CREATE TRIGGER never ends; SELECT 1",
		"SELECT 'unterminated; SELECT 2",
		"SELECT \"open",
		"SELECT [open",
		"SELECT `open",
		"SELECT 1 /* open; SELECT 2",
		"SELECT 1 -- to the end; SELECT 2",
		"SELECT 1; /*c*/ SELECT 2",
		"SELECT 1;/*c*/SELECT 2",
		"SELECT a -DISTINCT- b FROM t",
		"SELECT a /DISTINCT* b */ FROM t",
		"SELECT 'a'DISTINCT'b', \"x\"DISTINCT\"y\"",
		"SELECT ROUND(1)2, ROUND(a)b, 'a'ROUND('b')",
		"SELECT 1e-5, 1e+, 0x1F, 1_000, 12abc, 1..2, a.b.c",
		"SELECT a==b, c<>d, e<==f, g||h, i->>'j', 0x1E+2, 0xE--1;SELECT 2",
		"SELECT a--b\nFROM t",
		"SELECT -/**/-1, //**/*, 1 - -1",
		"SELECT 1;\u00a0",
		"SELECT 1;\u3000;SELECT 2",
		"\u2028",
		"SELECT 1 AS x\u00a0",
		"SELECT \u212A FROM t",
		"SELECT 1;\x00",
		"\x00SELECT 1",
		"SELECT \xff\xfe FROM t",
		"\t\v\f\r\n",
		strings.Repeat("(", 1000) + "SELECT 1" + strings.Repeat(")", 1000),
		strings.Repeat("ROUND(", 500) + "x" + strings.Repeat(", 2)", 500),
		strings.Repeat("SELECT DISTINCT ", 200),
		strings.Repeat("/* */ -- \n", 200) + "SELECT 1",
	}
}

// sigTexts returns the texts of the significant tokens of toks.
func sigTexts(toks []Token) []string {
	var out []string
	for _, t := range toks {
		if !t.Trivia() {
			out = append(out, t.Text)
		}
	}
	return out
}

// FuzzSplitStatements checks the lexer and SplitStatements:
//   - lexing loses nothing (the tokens concatenate to the text), makes
//     no empty token, and each token lexes alone to itself (the longest
//     match: what ends a token lies outside it);
//   - each statement is a non-empty substring of the text, in order, with
//     no outer whitespace and at least one significant token (an empty
//     statement used to reach SQLite, whose driver then crashed);
//   - splitting keeps every significant token but the separating
//     semicolons (an unterminated literal at the very end may lose its
//     trailing whitespace);
//   - joining the statements with ";" lines and splitting again gives them
//     back.
func FuzzSplitStatements(f *testing.F) {
	for _, s := range fuzzSQL() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		toks := Lex(sql)
		var b strings.Builder
		for _, tk := range toks {
			if tk.Text == "" {
				t.Fatalf("Lex(%q) made an empty token", sql)
			}
			if alone := Lex(tk.Text); len(alone) != 1 || alone[0] != tk {
				t.Fatalf("Lex(%q) made the token %+v, which lexes alone to %+v", sql, tk, alone)
			}
			b.WriteString(tk.Text)
		}
		if b.String() != sql {
			t.Fatalf("Lex(%q) concatenates to %q", sql, b.String())
		}

		stmts := SplitStatements(sql)
		pos := 0
		var got []string
		for _, st := range stmts {
			if st == "" || isSpace(st[0]) || isSpace(st[len(st)-1]) {
				t.Fatalf("SplitStatements(%q): statement %q is empty or untrimmed", sql, st)
			}
			sig := sigTexts(Lex(st))
			if len(sig) == 0 {
				t.Fatalf("SplitStatements(%q): statement %q has only whitespace and comments", sql, st)
			}
			j := strings.Index(sql[pos:], st)
			if j < 0 {
				t.Fatalf("SplitStatements(%q): statement %q is not a part of the text after offset %d", sql, st, pos)
			}
			pos += j + len(st)
			for _, s := range sig {
				if s != ";" {
					got = append(got, s)
				}
			}
		}
		var want []string
		for _, s := range sigTexts(toks) {
			if s != ";" {
				want = append(want, s)
			}
		}
		if n := len(want); n > 0 && n == len(got) {
			// Trimming may cut an unterminated literal's trailing blanks.
			want[n-1] = strings.TrimRight(want[n-1], sqlSpace)
			got[n-1] = strings.TrimRight(got[n-1], sqlSpace)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("SplitStatements(%q) = %q: significant tokens %q, want %q", sql, stmts, got, want)
		}

		joined := strings.Join(stmts, "\n;\n")
		if again := SplitStatements(joined); !slices.Equal(again, stmts) {
			t.Fatalf("SplitStatements(%q) = %q, but splitting their join %q gives %q", sql, stmts, joined, again)
		}
	})
}

// flipCase swaps the case of the ASCII letters of s.
func flipCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// FuzzNormalizeSQL checks NormalizeSQL:
//   - it is insensitive to the amount of whitespace, the ASCII case of
//     unquoted words and empty statements;
//   - its result has no comments, single spaces, and the statements of the
//     text, with the same significant tokens (words lower-cased);
//   - it is idempotent, except for a known wrinkle: a non-first statement
//     that starts with a comment normalises to "; next" where the comment-free
//     text gives ";next" (see the report of the hardening issue); a second
//     pass is always stable and splits into the same statements.
func FuzzNormalizeSQL(f *testing.F) {
	for _, s := range fuzzSQL() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		n := NormalizeSQL(sql)
		if want := normalizeBySplitting(sql); n != want {
			t.Fatalf("NormalizeSQL(%q) = %q; split, lexed again and joined: %q", sql, n, want)
		}
		toks := Lex(sql)
		if !normalEquals(toks, n) || normalEquals(toks, n+";x") || (n != "" && normalEquals(toks, n[:len(n)-1])) {
			t.Fatalf("normalEquals(Lex(%q), …) disagrees with NormalizeSQL = %q", sql, n)
		}
		if n != "" {
			other := []byte(n)
			other[len(other)/2] ^= 0x20
			if normalEquals(toks, string(other)) != (string(other) == n) {
				t.Fatalf("normalEquals(Lex(%q), %q) = true, NormalizeSQL = %q", sql, other, n)
			}
		}

		// Whitespace amount, ASCII case and empty statements do not matter.
		var b strings.Builder
		b.WriteString(";\n ;")
		for _, tk := range Lex(sql) {
			switch tk.Kind {
			case TokenSpace:
				b.WriteString(tk.Text + " \t ")
			case TokenWord:
				b.WriteString(flipCase(tk.Text))
			default:
				b.WriteString(tk.Text)
			}
		}
		if v := NormalizeSQL(b.String()); v != n {
			t.Fatalf("NormalizeSQL(%q) = %q, but the variant %q gives %q", sql, n, b.String(), v)
		}

		// The statements, their tokens lower-cased, single spaces.
		stmts := SplitStatements(sql)
		nstmts := SplitStatements(n)
		if len(nstmts) != len(stmts) {
			t.Fatalf("NormalizeSQL(%q) = %q: %d statements, want %d", sql, n, len(nstmts), len(stmts))
		}
		for i := range stmts {
			var want []string
			for _, tk := range Lex(stmts[i]) {
				switch {
				case tk.Trivia():
				case tk.Kind == TokenWord:
					want = append(want, asciiToLower(tk.Text))
				default:
					want = append(want, tk.Text)
				}
			}
			ntoks := Lex(nstmts[i])
			for _, tk := range ntoks {
				if tk.Trivia() && tk.Text != " " {
					t.Fatalf("NormalizeSQL(%q) = %q: trivia %q", sql, n, tk.Text)
				}
			}
			if got := sigTexts(ntoks); !slices.Equal(got, want) {
				t.Fatalf("NormalizeSQL(%q) = %q: statement %d has tokens %q, want %q", sql, n, i, got, want)
			}
		}

		// Idempotence.
		nn := NormalizeSQL(n)
		if NormalizeSQL(nn) != nn {
			t.Fatalf("NormalizeSQL is not stable on %q: %q, %q, %q", sql, n, nn, NormalizeSQL(nn))
		}
		if !slices.Equal(SplitStatements(nn), nstmts) {
			t.Fatalf("NormalizeSQL(%q) = %q, then %q: the statements differ", sql, n, nn)
		}
		if nn != n {
			known := false
			for _, st := range stmts[min(1, len(stmts)):] {
				if k := Lex(st)[0].Kind; k == TokenLineComment || k == TokenBlockComment {
					known = true
				}
			}
			if !known {
				t.Fatalf("NormalizeSQL is not idempotent on %q: %q, then %q", sql, n, nn)
			}
		}
	})
}

// rewriteHazards reports whether sql has a token arrangement on which the
// rewrite switches can merge tokens or make a new ROUND call, so that a
// second rewrite changes more. Removing a DISTINCT or a ROUND(...) call
// brings its neighbours together: a neighbour touching it (no whitespace
// or comment between) that can merge with the next token ('-' and '-'
// make a comment, two string literals make one) is a hazard; so is a stripped
// call followed by "(" or preceded by ROUND (a new call). Such texts are
// not valid SQL; on all others Rewrite is idempotent.
func rewriteHazards(sql string) bool {
	toks := Lex(sql)
	// mergeable: a token whose text may fuse with a following token.
	mergeable := func(i int) bool {
		if i < 0 || i >= len(toks) || toks[i].Trivia() {
			return false
		}
		return toks[i].Kind != TokenPunct || strings.ContainsAny(toks[i].Text, "-/.$")
	}
	// sig steps from i in direction d to the next significant token that
	// is not DISTINCT (which the rewrite removes first); -1 if none.
	sig := func(i, d int) int {
		for i += d; i >= 0 && i < len(toks); i += d {
			if !toks[i].Trivia() && !toks[i].IsWord("DISTINCT") {
				return i
			}
		}
		return -1
	}
	match := make([]int, len(toks)) // the index of the matching ")" of each "(", or -1
	var stack []int
	for i, t := range toks {
		match[i] = -1
		switch {
		case t.IsPunct('('):
			stack = append(stack, i)
		case t.IsPunct(')') && len(stack) > 0:
			match[stack[len(stack)-1]] = i
			stack = stack[:len(stack)-1]
		}
	}
	for i, t := range toks {
		switch {
		case t.IsWord("DISTINCT"):
			if mergeable(i - 1) {
				return true
			}
		case t.IsWord("ROUND"):
			if p := prevSignificant(toks, i); p.IsPunct('.') {
				continue
			}
			open := nextSignificant(toks, i+1)
			if open < 0 || !toks[open].IsPunct('(') {
				continue
			}
			closeAt := match[open]
			if closeAt < 0 {
				continue
			}
			next, p := sig(closeAt, 1), sig(i, -1)
			if mergeable(i-1) || mergeable(closeAt+1) || next >= 0 && toks[next].IsPunct('(') || p >= 0 && toks[p].IsWord("ROUND") {
				return true
			}
		}
	}
	return false
}

// FuzzRewrite checks Policy.Rewrite under every combination of switches:
//   - with every switch off the text is unchanged;
//   - it never lengthens the text (each switch only removes or shrinks);
//   - StripComments alone removes every comment and keeps every
//     significant token;
//   - StripDistinct leaves no DISTINCT keyword;
//   - it is idempotent on texts without the token arrangements of
//     rewriteHazards and not so deeply nested that stripRound's work
//     budget runs out.
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSQL() {
		f.Add(s, uint8(7))
	}
	f.Add("SELECT DISTINCT ROUND(a, 2) -- x\nFROM t /* y */", uint8(1))
	f.Add("SELECT DISTINCT ROUND(a, 2) -- x\nFROM t /* y */", uint8(2))
	f.Add("SELECT DISTINCT ROUND(a, 2) -- x\nFROM t /* y */", uint8(4))
	f.Fuzz(func(t *testing.T, sql string, flags uint8) {
		p := Policy{Order: OrderBag, Decimals: -1, StripComments: flags&1 != 0, StripDistinct: flags&2 != 0, StripRound: flags&4 != 0}
		out := p.Rewrite(sql)
		if !p.rewrites() {
			if out != sql {
				t.Fatalf("Rewrite with no switch changed %q to %q", sql, out)
			}
			return
		}
		if len(out) > len(sql) {
			t.Fatalf("%+v.Rewrite(%q) = %q is longer", p, sql, out)
		}
		toks := Lex(out)
		if p.StripComments && !p.StripDistinct && !p.StripRound {
			for _, tk := range toks {
				if tk.Kind == TokenLineComment || tk.Kind == TokenBlockComment {
					t.Fatalf("%+v.Rewrite(%q) = %q keeps the comment %q", p, sql, out, tk.Text)
				}
			}
			if got, want := sigTexts(toks), sigTexts(Lex(sql)); !slices.Equal(got, want) {
				t.Fatalf("%+v.Rewrite(%q) = %q: tokens %q, want %q", p, sql, out, got, want)
			}
			if again := p.Rewrite(out); again != out {
				t.Fatalf("%+v.Rewrite is not idempotent on %q: %q, then %q", p, sql, out, again)
			}
		}
		if p.StripDistinct {
			// Only SELECT DISTINCT is stripped (not DISTINCT ON, nor
			// DISTINCT inside an aggregate).
			for i, tk := range toks {
				if tk.IsWord("DISTINCT") && selectDistinct(toks[:i], toks, i) {
					t.Fatalf("%+v.Rewrite(%q) = %q keeps SELECT DISTINCT", p, sql, out)
				}
			}
		}
		if p.StripRound {
			// Past its work budget stripRound leaves calls in place (only
			// with hundreds of nested calls); a second pass strips more.
			in := Lex(sql)
			rounds := 0
			for _, tk := range in {
				if tk.IsWord("ROUND") {
					rounds++
				}
			}
			if 4*rounds*len(in) > 32*len(in)+1<<20 {
				return
			}
		}
		if rewriteHazards(sql) {
			return
		}
		if again := p.Rewrite(out); again != out {
			t.Fatalf("%+v.Rewrite is not idempotent on %q: %q, then %q", p, sql, out, again)
		}
	})
}

var clauseNames = map[string]bool{
	"": true, "WITH": true, "SELECT": true, "FROM": true, "JOIN": true, "WHERE": true, "GROUP BY": true,
	"HAVING": true, "ORDER BY": true, "LIMIT": true, "OFFSET": true, "UNION": true, "INTERSECT": true, "EXCEPT": true,
}

// FuzzSegments checks Segments:
//   - no segment for a text without significant tokens, else segments with
//     known clauses, each starting with its clause keyword (a join with its
//     modifiers; the first may have leading text);
//   - texts without comments, single spaces, not starting with a space;
//   - joined by spaces, the segments have the significant tokens of the
//     text, and segmenting that join gives the same segments.
func FuzzSegments(f *testing.F) {
	for _, s := range fuzzSQL() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		segs := Segments(sql)
		want := sigTexts(Lex(sql))
		if len(want) == 0 {
			if segs != nil {
				t.Fatalf("Segments(%q) = %q, want none", sql, segs)
			}
			return
		}
		if len(segs) == 0 {
			t.Fatalf("Segments(%q) is empty", sql)
		}
		texts := make([]string, len(segs))
		for k, s := range segs {
			texts[k] = s.Text
			if !clauseNames[s.Clause] || s.Clause == "" && len(segs) != 1 {
				t.Fatalf("Segments(%q): segment %d has clause %q", sql, k, s.Clause)
			}
			if s.Text == "" || isSpace(s.Text[0]) {
				t.Fatalf("Segments(%q): segment %d text %q", sql, k, s.Text)
			}
			toks := Lex(s.Text)
			for _, tk := range toks {
				if tk.Trivia() && tk.Text != " " {
					t.Fatalf("Segments(%q): segment %d text %q has trivia %q", sql, k, s.Text, tk.Text)
				}
			}
			sig := significant(toks)
			if s.Clause == "" {
				continue
			}
			first := strings.Fields(s.Clause)[0]
			if k == 0 {
				found := false
				for _, tk := range sig {
					found = found || tk.IsWord(first)
				}
				if !found {
					t.Fatalf("Segments(%q): first segment %q lacks its keyword %s", sql, s.Text, first)
				}
				continue
			}
			if !sig[0].IsWord(first) && !(s.Clause == "JOIN" && sig[0].Kind == TokenWord && joinModifiers[strings.ToUpper(sig[0].Text)]) {
				t.Fatalf("Segments(%q): segment %d %q does not start with %s", sql, k, s.Text, s.Clause)
			}
		}
		joined := strings.Join(texts, " ")
		if got := sigTexts(Lex(joined)); !slices.Equal(got, want) {
			t.Fatalf("Segments(%q) joined to %q: tokens %q, want %q", sql, joined, got, want)
		}
		if again := Segments(joined); !reflect.DeepEqual(again, segs) {
			t.Fatalf("Segments(%q) = %q, but Segments of their join %q = %q", sql, segs, joined, again)
		}
	})
}

// FuzzResolve checks Policy.Resolve and HasOuterOrderBy: Resolve changes
// only an auto order, to ordered exactly when the reference's outermost
// query has ORDER BY, and is idempotent; HasOuterOrderBy depends only on
// the last statement, and not on comments, whitespace or case.
func FuzzResolve(f *testing.F) {
	for _, s := range fuzzSQL() {
		f.Add(s, int8(-1))
	}
	f.Add("SELECT a FROM t ORDER BY a", int8(2))
	f.Fuzz(func(t *testing.T, sql string, decimals int8) {
		has := HasOuterOrderBy(sql)
		for _, o := range []Order{OrderBag, OrderOrdered, OrderSet, OrderAuto, Order(7), Order(-1)} {
			p := Policy{Order: o, Decimals: int(decimals), StripRound: decimals%2 == 0, EmptyFails: decimals%3 == 0}
			r := p.Resolve(sql)
			want := p
			if o == OrderAuto {
				want.Order = OrderBag
				if has {
					want.Order = OrderOrdered
				}
			}
			if r != want {
				t.Fatalf("%+v.Resolve(%q) = %+v, want %+v", p, sql, r, want)
			}
			if r.Resolve(sql) != r || r.Resolve("") != r {
				t.Fatalf("%+v.Resolve(%q) = %+v is not idempotent", p, sql, r)
			}
		}
		if HasOuterOrderBy(NormalizeSQL(sql)) != has {
			t.Fatalf("HasOuterOrderBy(%q) = %v, but not on its normal form %q", sql, has, NormalizeSQL(sql))
		}
		if s := (Policy{StripComments: true}).Rewrite(sql); HasOuterOrderBy(s) != has {
			t.Fatalf("HasOuterOrderBy(%q) = %v, but not without comments: %q", sql, has, s)
		}
		if len(SplitStatements(sql)) > 0 {
			for _, before := range []string{"SELECT 1 ORDER BY 1;\n", "SELECT 1;\n"} {
				if HasOuterOrderBy(before+sql) != has {
					t.Fatalf("HasOuterOrderBy(%q) = %v, but %v after an earlier statement", sql, has, !has)
				}
			}
		}
	})
}

// normalizeBySplitting is NormalizeSQL written the slow, obvious way (the
// way it was written before it lexed once): split the statements, lex each
// again, join the significant tokens with single spaces, words lower-cased.
func normalizeBySplitting(sql string) string {
	var b strings.Builder
	for i, st := range SplitStatements(sql) {
		if i > 0 {
			b.WriteByte(';')
		}
		space := false
		for _, t := range Lex(st) {
			if t.Trivia() {
				space = true
				continue
			}
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			if t.Kind == TokenWord {
				b.WriteString(asciiToLower(t.Text))
			} else {
				b.WriteString(t.Text)
			}
		}
	}
	return b.String()
}
