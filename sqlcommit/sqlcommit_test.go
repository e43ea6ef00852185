package sqlcommit

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// testSchema is a small part of Spider's world_1 and pets_1, enough for
// the convention tests to resolve names without a database file.
var testSchema = NewSchema(map[string][]string{
	"country":         {"Code", "Name", "Continent", "Region", "Population", "GNP", "HeadOfState"},
	"city":            {"ID", "Name", "CountryCode", "District", "Population"},
	"countrylanguage": {"CountryCode", "Language", "IsOfficial", "Percentage"},
	"Student":         {"StuID", "LName", "Fname", "Age", "Sex", "Major", "Advisor", "city_code"},
})

func extract(t *testing.T, sql string) *Set {
	t.Helper()
	s, err := Extract(sql, testSchema)
	if err != nil {
		t.Fatalf("Extract(%q): %v", sql, err)
	}
	return s
}

// values returns a set's units as "scope: value" strings.
func values(s *Set) []string {
	out := []string{}
	for _, u := range s.Units {
		out = append(out, u.String())
	}
	return out
}

func wantUnits(t *testing.T, sql string, want ...string) *Set {
	t.Helper()
	s := extract(t, sql)
	if got := values(s); !reflect.DeepEqual(got, want) {
		t.Errorf("S(%s):\n got  %q\n want %q", sql, got, want)
	}
	return s
}

func sameSet(t *testing.T, a, b string) {
	t.Helper()
	sa, sb := values(extract(t, a)), values(extract(t, b))
	sort.Strings(sa)
	sort.Strings(sb)
	if !reflect.DeepEqual(sa, sb) {
		t.Errorf("S differs:\n %s\n   %q\n %s\n   %q", a, sa, b, sb)
	}
}

// TestTable5 checks the emission rules of the paper's Table 5 and
// PROTOCOL.md §9, one clause at a time, with value and structural forms.
func TestTable5(t *testing.T) {
	// WHERE: each top-level AND conjunct; OR and NOT stay whole.
	s := wantUnits(t, `SELECT Name FROM country WHERE Region = 'West' AND Population > 2`,
		"/: SELECT country.name", "/: WHERE country.region = 'West'", "/: WHERE country.population > 2")
	if u := s.Units[1]; u.Struct != "WHERE country.region = ?" || !reflect.DeepEqual(u.Literals, []string{"'West'"}) || !u.Filtering() {
		t.Errorf("structural form of region = 'West': %+v", u)
	}
	wantUnits(t, `SELECT Name FROM country WHERE (Region = 'West' OR Population > 2) AND NOT (GNP < 5 AND Code = 'X')`,
		"/: SELECT country.name",
		"/: WHERE (country.region = 'West') OR (country.population > 2)",
		"/: WHERE NOT ((country.gnp < 5) AND (country.code = 'X'))")
	// Nested ANDs are flattened: a AND (b AND c) has three conjuncts.
	wantUnits(t, `SELECT Name FROM country WHERE Code = 'A' AND (Region = 'B' AND GNP = 1)`,
		"/: SELECT country.name", "/: WHERE country.code = 'A'", "/: WHERE country.region = 'B'", "/: WHERE country.gnp = 1")
	// SELECT: each item; SELECT * is one marker.
	wantUnits(t, `SELECT Continent, AVG(GNP) FROM country`, "/: SELECT country.continent", "/: SELECT avg(country.gnp)")
	wantUnits(t, `SELECT * FROM country`, "/: SELECT *")
	// GROUP BY each key; HAVING each conjunct; ORDER BY each key with its
	// direction (ASC when none is written); LIMIT and OFFSET.
	s = wantUnits(t, `SELECT Continent, Region, COUNT(*) FROM country GROUP BY Continent, Region HAVING COUNT(*) > 5 AND AVG(GNP) > 1 ORDER BY COUNT(*) DESC, Region LIMIT 10 OFFSET 20`,
		"/: SELECT country.continent", "/: SELECT country.region", "/: SELECT count(*)",
		"/: GROUP BY country.continent", "/: GROUP BY country.region",
		"/: HAVING count(*) > 5", "/: HAVING avg(country.gnp) > 1",
		"/: ORDER BY count(*) DESC", "/: ORDER BY country.region ASC",
		"/: LIMIT 10", "/: OFFSET 20")
	var w []string
	for _, u := range s.Filtering() {
		w = append(w, u.Value)
	}
	// HAVING is output-side (Appendix G): no WHERE, so W is empty.
	if len(w) != 0 {
		t.Errorf("W = %q, want none (HAVING is output-side)", w)
	}
	if n := len(s.Output()); n != 11 {
		t.Errorf("|O| = %d, want 11", n)
	}
	for _, u := range s.Units {
		if u.Clause == Limit && (u.Struct != "LIMIT ?" || u.Literals[0] != "10") {
			t.Errorf("LIMIT unit %+v", u)
		}
	}
	// SQLite's LIMIT offset, count is LIMIT count OFFSET offset.
	sameSet(t, `SELECT Name FROM country LIMIT 20, 10`, `SELECT Name FROM country LIMIT 10 OFFSET 20`)
}

// TestConventions checks every convention of the TIDE format README's
// "Commitment-set conventions".
func TestConventions(t *testing.T) {
	// Identifiers are case-insensitive.
	sameSet(t, `SELECT NAME FROM COUNTRY WHERE REGION = 'Caribbean'`, `select name from country where region = 'Caribbean'`)
	// ... but literals are not.
	if reflect.DeepEqual(values(extract(t, `SELECT Name FROM country WHERE Region = 'caribbean'`)),
		values(extract(t, `SELECT Name FROM country WHERE Region = 'Caribbean'`))) {
		t.Error("a literal's case was folded")
	}
	// Aliases are resolved to tables, so renaming one changes nothing, and
	// unqualified columns are qualified by the schema.
	sameSet(t,
		`SELECT T1.Name, T2.Language FROM country AS T1 JOIN countrylanguage AS T2 ON T1.Code = T2.CountryCode WHERE T1.Region = 'Caribbean'`,
		`SELECT c.name, l.language FROM country c JOIN countrylanguage l ON c.code = l.countrycode WHERE c.region = 'Caribbean'`)
	sameSet(t,
		`SELECT Name FROM country WHERE Region = 'Caribbean'`,
		`SELECT country.Name FROM country WHERE country.Region = 'Caribbean'`)
	sameSet(t,
		`SELECT T1.Name, Language FROM country AS T1 JOIN countrylanguage ON Code = CountryCode WHERE Percentage > 50`,
		`SELECT country.Name, countrylanguage.Language FROM country JOIN countrylanguage ON country.Code = countrylanguage.CountryCode WHERE countrylanguage.Percentage > 50`)
	// Column aliases are dropped (and a reference to one in ORDER BY or
	// GROUP BY stands for its expression; so does an ordinal).
	sameSet(t, `SELECT Region AS r, COUNT(*) AS n FROM country GROUP BY r ORDER BY n DESC`,
		`SELECT Region, COUNT(*) FROM country GROUP BY Region ORDER BY COUNT(*) DESC`)
	sameSet(t, `SELECT Region, COUNT(*) FROM country GROUP BY 1 ORDER BY 2 DESC`,
		`SELECT Region, COUNT(*) FROM country GROUP BY Region ORDER BY COUNT(*) DESC`)
	// Conjunct reordering is not drift.
	sameSet(t, `SELECT Name FROM country WHERE Region = 'Caribbean' AND Population > 100`,
		`SELECT Name FROM country WHERE Population > 100 AND Region = 'Caribbean'`)
	// SQLite double-quoted names that match no column are string
	// literals; those that match one are identifiers.
	sameSet(t, `SELECT Name FROM country WHERE Region = "Caribbean"`, `SELECT Name FROM country WHERE Region = 'Caribbean'`)
	sameSet(t, `SELECT "Name" FROM "country" WHERE "Region" = "Caribbean"`, `SELECT Name FROM country WHERE Region = 'Caribbean'`)
	sameSet(t, `SELECT Name FROM "country", "city" WHERE Region = "city"`, `SELECT Name FROM country, city WHERE Region = 'city'`)
	sameSet(t, `SELECT Name FROM country WHERE Region = "it's"`, `SELECT Name FROM country WHERE Region = 'it''s'`)
	// ... so is a name declared as an alias, or one next to a dot.
	sameSet(t, `SELECT COUNT(*) AS "total" FROM country ORDER BY "total"`, `SELECT COUNT(*) FROM country ORDER BY COUNT(*)`)
	sameSet(t, `SELECT "T1"."Name" FROM country AS T1`, `SELECT Name FROM country`)
	// Backticks and brackets quote identifiers.
	sameSet(t, "SELECT `Name` FROM `country` WHERE `Region` = 'X'", `SELECT Name FROM country WHERE Region = 'X'`)
	sameSet(t, `SELECT [Name] FROM [country] WHERE [Region] = 'X'`, `SELECT Name FROM country WHERE Region = 'X'`)
	// SQLite's == is =.
	sameSet(t, `SELECT Name FROM country WHERE Region == 'X'`, `SELECT Name FROM country WHERE Region = 'X'`)
	// Every subquery and set-operation branch is its own scope, referenced
	// from the enclosing unit.
	wantUnits(t, `SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'English')`,
		"/: SELECT country.name",
		"/: WHERE country.code IN (subquery)",
		"/{WHERE country.code IN (subquery)}: SELECT countrylanguage.countrycode",
		"/{WHERE country.code IN (subquery)}: WHERE countrylanguage.language = 'English'")
	wantUnits(t, `SELECT Name FROM country WHERE Region = 'A' UNION SELECT Name FROM city WHERE Population > 5 ORDER BY Name LIMIT 3`,
		"/: ORDER BY name ASC", "/: LIMIT 3",
		"/UNION[0]: SELECT country.name", "/UNION[0]: WHERE country.region = 'A'",
		"/UNION[1]: SELECT city.name", "/UNION[1]: WHERE city.population > 5")
	wantUnits(t, `SELECT T.r FROM (SELECT Region AS r FROM country WHERE GNP > 1) AS T`,
		"/: SELECT /FROM[1].r", "/FROM[1]: SELECT country.region", "/FROM[1]: WHERE country.gnp > 1")
	// ... so a literal changed inside a subquery is one changed unit: a
	// value drift.
	r := classify(t,
		`SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'English')`,
		`SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'French')`)
	if r.Subtype != Value || len(r.Removed) != 1 || len(r.Added) != 1 {
		t.Errorf("literal changed in a subquery: %+v, want one changed unit, value", r)
	}
	// JOIN ... ON conditions are not units.
	wantUnits(t, `SELECT T1.Name FROM country AS T1 JOIN city AS T2 ON T1.Code = T2.CountryCode AND T2.Population > 5`,
		"/: SELECT country.name")
	// DISTINCT is one SELECT unit.
	s := wantUnits(t, `SELECT DISTINCT Region FROM country`, "/: SELECT DISTINCT", "/: SELECT country.region")
	if s.Units[0].Clause != Select || s.Units[0].Filtering() {
		t.Errorf("DISTINCT unit %+v", s.Units[0])
	}
	// W = the WHERE units; HAVING is output-side.
	s = extract(t, `SELECT Advisor FROM Student WHERE Sex = 'M' GROUP BY Advisor HAVING COUNT(*) >= 2`)
	if w := s.Filtering(); len(w) != 1 || w[0].Clause != Where {
		t.Errorf("W = %+v", w)
	}
}

func classify(t *testing.T, pre, post string) Result {
	t.Helper()
	r, err := DriftSQL(pre, post, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSchemaAndDialect(t *testing.T) {
	// Without a schema, double-quoted names stay identifiers.
	s, err := Extract(`SELECT a FROM t WHERE b = "x"`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := values(s); !reflect.DeepEqual(got, []string{"/: SELECT t.a", "/: WHERE t.b = t.x"}) {
		t.Errorf("no schema: %q", got)
	}
	// x IS y compares values in SQLite.
	sameSet(t, `SELECT Name FROM country WHERE Region IS 'X'`, `SELECT Name FROM country WHERE Region IS NOT DISTINCT FROM 'X'`)
	sameSet(t, `SELECT Name FROM country WHERE Region IS NOT 'X'`, `SELECT Name FROM country WHERE Region IS DISTINCT FROM 'X'`)
	wantUnits(t, `SELECT Name FROM country WHERE Region IS NOT NULL`, "/: SELECT country.name", "/: WHERE country.region IS NOT NULL")
	// CAST keeps SQLite's type names.
	wantUnits(t, `SELECT CAST(GNP AS REAL) / Population FROM country`, "/: SELECT CAST(country.gnp AS REAL) / country.population")
}

func TestErrors(t *testing.T) {
	_, err := Extract("SELECT Name\nFROM country WHER Region = 'x'", testSchema)
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a ParseError", err)
	}
	if pe.Line != 2 || pe.Column != 19 || !strings.Contains(pe.Error(), `"Region"`) {
		t.Errorf("parse error %+v (%v), want line 2, column 19 near \"Region\"", pe, pe)
	}
	// Positions are those of the query as given, before "..." became '...'.
	_, err = Extract(`SELECT Name FROM country WHERE Region = "Caribbean" AND AND`, testSchema)
	if !errors.As(err, &pe) || pe.Column != 57 {
		t.Errorf("err = %v, want a parse error at column 57", err)
	}
	for _, q := range []string{"", "  -- nothing", "SELECT 1; SELECT 2", "DELETE FROM country", "INSERT INTO country VALUES (1)"} {
		if _, err := Extract(q, testSchema); !errors.Is(err, ErrNotQuery) {
			t.Errorf("Extract(%q) = %v, want ErrNotQuery", q, err)
		}
	}
	if _, err := DriftSQL("SELECT FROM WHERE", "SELECT 1", testSchema); err == nil || !strings.HasPrefix(err.Error(), "pre-drift query: ") {
		t.Errorf("DriftSQL with a bad pre query: %v", err)
	}
	// Reading a database file's schema, and its errors: engines.CommitSchema.
}

// TestDeepQueriesAreParseErrors: the chains that crashed libpg_query
// (issue 25; TIDE's drift test parsed the policy's SQL) are ParseErrors
// that point into the query as given, never a crash.
func TestDeepQueriesAreParseErrors(t *testing.T) {
	for _, q := range []string{
		"SELECT 1" + strings.Repeat("+1", 30000),
		"SELECT `a` FROM t WHERE x = 1" + strings.Repeat(" || 'x'", 30000),
		"SELECT " + strings.Repeat("(SELECT ", 5000) + "1" + strings.Repeat(")", 5000),
	} {
		_, err := Extract(q, nil)
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "nests too deeply") || pe.Offset <= 0 || pe.Line != 1 {
			t.Errorf("%.40q…: %v (%+v), want a ParseError at the token past the limit", q, err, pe)
		}
		if _, err := DriftSQL("SELECT 1", q, nil); err == nil {
			t.Errorf("%.40q…: DriftSQL accepted it", q)
		}
	}
}
