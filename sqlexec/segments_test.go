package sqlexec

import (
	"reflect"
	"testing"
)

func TestSegments(t *testing.T) {
	type S = Segment
	cases := []struct {
		name string
		sql  string
		want []Segment
	}{
		{"empty", "", nil},
		{"comment only", "  -- nothing\n /* here */ ", nil},
		{"no keyword", "PRAGMA foreign_keys", []S{{"", "PRAGMA foreign_keys"}}},
		{"simple", "SELECT name,\n\t  city FROM   customers WHERE city = 'Paris' ORDER BY name LIMIT 5 OFFSET 10",
			[]S{{"SELECT", "SELECT name, city"}, {"FROM", "FROM customers"}, {"WHERE", "WHERE city = 'Paris'"},
				{"ORDER BY", "ORDER BY name"}, {"LIMIT", "LIMIT 5"}, {"OFFSET", "OFFSET 10"}}},
		{"group having lower case", "select region, sum(x) from t group  by region having sum(x) > 3",
			[]S{{"SELECT", "select region, sum(x)"}, {"FROM", "from t"}, {"GROUP BY", "group by region"},
				{"HAVING", "having sum(x) > 3"}}},
		{"join variants", "SELECT * FROM a LEFT OUTER JOIN b ON a.id = b.id JOIN c USING (id) natural inner join d CROSS JOIN e",
			[]S{{"SELECT", "SELECT *"}, {"FROM", "FROM a"}, {"JOIN", "LEFT OUTER JOIN b ON a.id = b.id"},
				{"JOIN", "JOIN c USING (id)"}, {"JOIN", "natural inner join d"}, {"JOIN", "CROSS JOIN e"}}},
		{"keywords in literals, quoted identifiers and comments",
			"SELECT 'from where' AS \"order by\", [limit] -- FROM x\nFROM t /* WHERE y */ WHERE `select` = 1",
			[]S{{"SELECT", "SELECT 'from where' AS \"order by\", [limit]"}, {"FROM", "FROM t"}, {"WHERE", "WHERE `select` = 1"}}},
		{"with and set operations", "WITH r AS (SELECT 1 AS v) SELECT v FROM r UNION ALL SELECT 2 INTERSECT SELECT 2 EXCEPT SELECT 3",
			[]S{{"WITH", "WITH r AS ("}, {"SELECT", "SELECT 1 AS v)"}, {"SELECT", "SELECT v"}, {"FROM", "FROM r"},
				{"UNION", "UNION ALL"}, {"SELECT", "SELECT 2"}, {"INTERSECT", "INTERSECT"}, {"SELECT", "SELECT 2"},
				{"EXCEPT", "EXCEPT"}, {"SELECT", "SELECT 3"}}},
		{"subquery and leading parenthesis", "(SELECT a FROM t WHERE a IN (SELECT b FROM u))",
			[]S{{"SELECT", "(SELECT a"}, {"FROM", "FROM t"}, {"WHERE", "WHERE a IN ("}, {"SELECT", "SELECT b"}, {"FROM", "FROM u))"}}},
		{"window order by and words that are not clauses", "SELECT rank() OVER (ORDER BY s) AS grouping, orderly FROM t",
			[]S{{"SELECT", "SELECT rank() OVER ("}, {"ORDER BY", "ORDER BY s) AS grouping, orderly"}, {"FROM", "FROM t"}}},
		{"group without by is no clause", "SELECT group_concat(x) FROM t",
			[]S{{"SELECT", "SELECT group_concat(x)"}, {"FROM", "FROM t"}}},
		{"two statements", "SELECT 1;\nSELECT 2 FROM t;",
			[]S{{"SELECT", "SELECT 1;"}, {"SELECT", "SELECT 2"}, {"FROM", "FROM t;"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Segments(c.sql); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Segments(%q)\n got %q\nwant %q", c.sql, got, c.want)
			}
		})
	}
}
