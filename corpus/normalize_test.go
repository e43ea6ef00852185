package corpus

import "testing"

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		"  ?! ":            "",
		"Year-To-Date":     "year to date",
		"top  \tcustomers": "top customers",
		"TOP-customers?":   "top customers",
		"ÉTAT":             "état",
		"ΟΔΟΣ":             "οδοσ",
		"customer's":       "customer s",
		"Q3_2024":          "q3 2024",
		"e\u0301t\u00e9":   "e\u0301t\u00e9", // combining mark stays in the token
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}
