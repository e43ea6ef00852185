package llm

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func TestRepeating(t *testing.T) {
	long := "The request asks for the customers with the largest total order value in the West region over the last year; " +
		"the schema has customers(id, name, region) and orders(id, customer_id, total, placed_at). I join them, filter the region, " +
		"sum the totals per customer, order by the sum and keep the first five. The clarification said top means by revenue"
	for name, c := range map[string]struct {
		s    string
		want bool
	}{
		"a line again and again":        {`{"reasoning": "Let me think.` + strings.Repeat("\nThe user wants the top customers.", 12), true},
		"a word":                        {"SELECT " + strings.Repeat("very ", 60), true},
		"re-indented lines":             {strings.Repeat("  SELECT name FROM customers\n      ", 8), true},
		"a cut unit":                    {strings.Repeat("abc def ghi jkl mno pqr stu vwx yz. ", 6) + "abc de", true},
		"one character":                 {strings.Repeat("=", 200), true},
		"a long answer, cut off":        {long, false},
		"twice is not a loop":           {strings.Repeat("The user wants the top customers by revenue, I think, and by region too. ", 2), false},
		"short":                         {"no no no no", false},
		"counting":                      {"1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40", false},
		"a repeat long ago, then prose": {strings.Repeat("loop ", 50) + long, false},
	} {
		if got := Repeating(c.s); got != c.want {
			t.Errorf("%s: Repeating = %v, want %v", name, got, c.want)
		}
	}
}

// TestDegenerate: a reply cut off at the limit in a loop is Degenerate,
// counted as such; one that stopped, or was cut off in ordinary prose, is
// not.
func TestDegenerate(t *testing.T) {
	loop := strings.Repeat("The user wants the top customers. ", 20)
	f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
		finish := "length"
		content := loop
		switch n {
		case 1:
			finish = "stop"
		case 2:
			content = "The request asks for the customers with the largest total order value in the West region; I join orders"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"index":0,"finish_reason":"` + finish + `","message":{"role":"assistant","content":"` + content + `"}}]}`))
	})
	c := newClient(t, fastConfig(f.url()), nil)
	for i, want := range []bool{true, false, false} {
		r, err := c.Chat(context.Background(), Request{Messages: userMsg(strings.Repeat("x", i+1))})
		if err != nil {
			t.Fatal(err)
		}
		if r.Degenerate() != want {
			t.Errorf("reply %d: Degenerate = %v, want %v", i, r.Degenerate(), want)
		}
	}
	if s := c.Stats(); s.CutOff != 2 || s.CutOffRepeating != 1 {
		t.Errorf("Stats %+v, want 2 cut off, 1 of them repeating", s)
	}
}
