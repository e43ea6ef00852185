package sqlexec

import (
	"slices"
	"testing"
)

// TestLex pins the token boundaries that the lexer's users depend on:
// SQLite's two-character operators are one token (sqlcommit rewrites ==),
// a hexadecimal literal takes no exponent sign (so "0xE--1" is 0xE and a
// comment, as SQLite reads it), a number runs on through the identifier
// characters after it, and dollar quotes hold whatever they quote.
func TestLex(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // token texts, kind prefix: w word, n number, p punct, s string, q quoted, d dollar, _ space, c comment
	}{
		{"operators", "a==b<>c", []string{"w:a", "p:==", "w:b", "p:<>", "w:c"}},
		{"longest operator first", "a<==b", []string{"w:a", "p:<=", "p:=", "w:b"}},
		{"every two-character operator", "!=<=>=||<<>>", []string{"p:!=", "p:<=", "p:>=", "p:||", "p:<<", "p:>>"}},
		{"other punctuation is one byte", "-> (", []string{"p:-", "p:>", "_: ", "p:("}},
		{"comment before minus", "1--2", []string{"n:1", "c:--2"}},
		{"exponent sign", "1e+5 2E-3", []string{"n:1e+5", "_: ", "n:2E-3"}},
		{"hexadecimal takes no sign", "0x1E+2", []string{"n:0x1E", "p:+", "n:2"}},
		{"hexadecimal then comment", "0xE--1", []string{"n:0xE", "c:--1"}},
		{"bad number is one token", "12abc$ 1.5.5", []string{"n:12abc$", "_: ", "n:1.5.5"}},
		{"quotes", `'a''b' "c""d" ` + "`e` [f]", []string{"s:'a''b'", "_: ", `q:"c""d"`, "_: ", "q:`e`", "_: ", "q:[f]"}},
		{"dollar quote", "$t$ 'x $t$ $1", []string{"d:$t$ 'x $t$", "_: ", "p:$", "n:1"}},
		{"unterminated block comment", "a /* b", []string{"w:a", "_: ", "c:/* b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, tk := range Lex(tc.in) {
				got = append(got, kindLetter(tk.Kind)+":"+tk.Text)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Lex(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func kindLetter(k TokenKind) string {
	switch k {
	case TokenSpace:
		return "_"
	case TokenLineComment, TokenBlockComment:
		return "c"
	case TokenString:
		return "s"
	case TokenQuoted:
		return "q"
	case TokenDollar:
		return "d"
	case TokenWord:
		return "w"
	case TokenNumber:
		return "n"
	case TokenPunct:
		return "p"
	}
	return "?"
}

// TestTokenPredicates: IsPunct matches only the one-character token (an
// operator that starts with '=' is not '='), IsWord folds ASCII case only
// and never matches a quoted name.
func TestTokenPredicates(t *testing.T) {
	eq, op := Token{Kind: TokenPunct, Text: "="}, Token{Kind: TokenPunct, Text: "=="}
	if !eq.IsPunct('=') || op.IsPunct('=') {
		t.Errorf("IsPunct('='): %q %v, %q %v", eq.Text, eq.IsPunct('='), op.Text, op.IsPunct('='))
	}
	for _, tc := range []struct {
		tok  Token
		want bool
	}{
		{Token{Kind: TokenWord, Text: "distinct"}, true},
		{Token{Kind: TokenWord, Text: "DiStInCt"}, true},
		{Token{Kind: TokenWord, Text: "DI\u017fTINCT"}, false}, // long s: Unicode folding would match
		{Token{Kind: TokenQuoted, Text: "DISTINCT"}, false},
	} {
		if got := tc.tok.IsWord("DISTINCT"); got != tc.want {
			t.Errorf("%+v.IsWord(DISTINCT) = %v, want %v", tc.tok, got, tc.want)
		}
	}
	for _, tk := range Lex("a -- b\n/* c */ ") {
		if tk.Trivia() != (tk.Kind != TokenWord) {
			t.Errorf("%+v.Trivia() = %v", tk, tk.Trivia())
		}
	}
}
