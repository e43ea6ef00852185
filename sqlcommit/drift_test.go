package sqlcommit

import "testing"

// TestAlgorithm1 checks Classify on pairs of queries. Each expected answer
// is argued from the paper (§2.2, Algorithm 1, Figure 7 R1/R2/R7) and
// PROTOCOL.md §9: drift iff S_pre ⊄ S_post; VALUE iff O unchanged and
// exactly one predicate literal replaced (same structure, other filters
// fixed); CONSTRAINT iff O unchanged and W_post ⊊ W_pre; PROJECTION iff W
// unchanged and O_pre ⊄ O_post, aspect_change when FROM tables, WHERE
// column set and GROUP BY keys stay identical, target_change otherwise;
// anything else REJECT.
func TestAlgorithm1(t *testing.T) {
	const base = `SELECT Name, Population FROM country WHERE Region = 'Caribbean' AND GNP > 100`
	cases := []struct {
		name, pre, post string
		want            Subtype
		intent          Intent
	}{
		// Non-monotonicity test (§2.2): no change and pure additions are not drift.
		{"identical", base, base, NoDrift, ""},
		{"added predicate only: a pure addition", base, base + ` AND Continent = 'X'`, NoDrift, ""},
		{"reordered conjuncts: same set", base, `SELECT Name, Population FROM country WHERE GNP > 100 AND Region = 'Caribbean'`, NoDrift, ""},
		{"alias renamed: aliases resolve to tables", `SELECT T1.Name FROM country AS T1 WHERE T1.GNP > 1`, `SELECT c.Name FROM country AS c WHERE c.GNP > 1`, NoDrift, ""},
		{"identifier case changed: case-insensitive", base, `select NAME, population from COUNTRY where REGION = 'Caribbean' and gnp > 100`, NoDrift, ""},
		{"added SELECT item only", base, `SELECT Name, Population, GNP FROM country WHERE Region = 'Caribbean' AND GNP > 100`, NoDrift, ""},
		{"added LIMIT only", base, base + ` LIMIT 5`, NoDrift, ""},
		{"added ORDER BY only", base, base + ` ORDER BY Name`, NoDrift, ""},
		{"added DISTINCT only", base, `SELECT DISTINCT Name, Population FROM country WHERE Region = 'Caribbean' AND GNP > 100`, NoDrift, ""},
		{"ORDER BY alias vs expression: column aliases resolve", `SELECT Region, COUNT(*) AS n FROM country GROUP BY Region ORDER BY n DESC`, `SELECT Region, COUNT(*) FROM country GROUP BY Region ORDER BY COUNT(*) DESC`, NoDrift, ""},
		{"double-quoted string vs single-quoted: the same literal", `SELECT Name FROM country WHERE Region = "Caribbean"`, `SELECT Name FROM country WHERE Region = 'Caribbean'`, NoDrift, ""},

		// VALUE: exactly one literal of one predicate replaced, all else fixed.
		{"literal changed in WHERE", base, `SELECT Name, Population FROM country WHERE Region = 'Polynesia' AND GNP > 100`, Value, ""},
		{"numeric literal changed", base, `SELECT Name, Population FROM country WHERE Region = 'Caribbean' AND GNP > 500`, Value, ""},
		{"literal changed inside a subquery: one changed unit in the subquery's scope",
			`SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'English')`,
			`SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'Dutch')`, Value, ""},
		{"IN list element changed: one literal", `SELECT Name FROM country WHERE Region IN ('A', 'B')`, `SELECT Name FROM country WHERE Region IN ('A', 'C')`, Value, ""},
		{"BETWEEN bound changed: one literal", `SELECT Name FROM country WHERE GNP BETWEEN 1 AND 10`, `SELECT Name FROM country WHERE GNP BETWEEN 1 AND 20`, Value, ""},
		{"HAVING literal changed: HAVING is output-side", `SELECT Advisor FROM Student GROUP BY Advisor HAVING COUNT(*) >= 2`, `SELECT Advisor FROM Student GROUP BY Advisor HAVING COUNT(*) >= 3`, Projection, AspectChange},
		{"LIKE pattern changed", `SELECT Name FROM country WHERE Name LIKE 'A%'`, `SELECT Name FROM country WHERE Name LIKE 'B%'`, Value, ""},
		{"literal changed in a UNION branch", `SELECT Name FROM country WHERE Region = 'A' UNION SELECT Name FROM city WHERE Population > 5`, `SELECT Name FROM country WHERE Region = 'B' UNION SELECT Name FROM city WHERE Population > 5`, Value, ""},
		{"double-quoted literal replaced", `SELECT Name FROM country WHERE Region = "Caribbean"`, `SELECT Name FROM country WHERE Region = 'Melanesia'`, Value, ""},
		{"string literal replaced by a number: still one literal, same structure", `SELECT Name FROM country WHERE Code = '1'`, `SELECT Name FROM country WHERE Code = 2`, Value, ""},
		{"literal changed in a scalar subquery of SELECT: a WHERE unit of its scope",
			`SELECT Name, (SELECT COUNT(*) FROM city WHERE Population > 10) FROM country`,
			`SELECT Name, (SELECT COUNT(*) FROM city WHERE Population > 20) FROM country`, Value, ""},

		// CONSTRAINT: filters removed, nothing else changed.
		{"one predicate removed", base, `SELECT Name, Population FROM country WHERE Region = 'Caribbean'`, Constraint, ""},
		{"two predicates removed", base + ` AND Continent = 'X'`, `SELECT Name, Population FROM country WHERE GNP > 100`, Constraint, ""},
		{"all WHERE predicates removed", base, `SELECT Name, Population FROM country`, Constraint, ""},
		{"HAVING conjunct removed: HAVING is output-side", `SELECT Advisor FROM Student WHERE Sex = 'M' GROUP BY Advisor HAVING COUNT(*) >= 2`, `SELECT Advisor FROM Student WHERE Sex = 'M' GROUP BY Advisor`, Projection, AspectChange},
		{"predicate removed inside a subquery: W_post ⊊ W_pre over scoped units",
			`SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'English' AND IsOfficial = 'T')`,
			`SELECT Name FROM country WHERE Code IN (SELECT CountryCode FROM countrylanguage WHERE Language = 'English')`, Constraint, ""},

		// PROJECTION: only output-side units change, filters identical.
		{"SELECT column replaced", base, `SELECT Name, GNP FROM country WHERE Region = 'Caribbean' AND GNP > 100`, Projection, AspectChange},
		{"SELECT column removed", base, `SELECT Name FROM country WHERE Region = 'Caribbean' AND GNP > 100`, Projection, AspectChange},
		{"aggregate changed", `SELECT Advisor, AVG(Age) FROM Student GROUP BY Advisor`, `SELECT Advisor, MIN(Age) FROM Student GROUP BY Advisor`, Projection, AspectChange},
		{"ORDER BY direction changed", base + ` ORDER BY GNP DESC LIMIT 3`, base + ` ORDER BY GNP ASC LIMIT 3`, Projection, AspectChange},
		{"LIMIT changed", base + ` ORDER BY GNP DESC LIMIT 3`, base + ` ORDER BY GNP DESC LIMIT 5`, Projection, AspectChange},
		{"LIMIT removed", base + ` ORDER BY GNP DESC LIMIT 3`, base + ` ORDER BY GNP DESC`, Projection, AspectChange},
		{"OFFSET changed", base + ` LIMIT 3 OFFSET 1`, base + ` LIMIT 3 OFFSET 2`, Projection, AspectChange},
		{"DISTINCT removed", `SELECT DISTINCT Region FROM country`, `SELECT Region FROM country`, Projection, AspectChange},
		{"GROUP BY key changed: R7 target_change", `SELECT Continent, COUNT(*) FROM country GROUP BY Continent`, `SELECT Region, COUNT(*) FROM country GROUP BY Region`, Projection, TargetChange},
		{"new table joined for a new column: FROM tables differ, target_change",
			`SELECT T1.Name FROM country AS T1 WHERE T1.Region = 'Caribbean'`,
			`SELECT T2.Name FROM country AS T1 JOIN city AS T2 ON T1.Code = T2.CountryCode WHERE T1.Region = 'Caribbean'`, Projection, TargetChange},

		// REJECT: drift, but no subtype's scope constraint holds.
		{"predicate removed under OR: the disjunction is one unit, replaced", `SELECT Name FROM country WHERE Region = 'A' OR GNP > 1`, `SELECT Name FROM country WHERE Region = 'A'`, Rejected, ""},
		{"two literals changed in two predicates", base, `SELECT Name, Population FROM country WHERE Region = 'Polynesia' AND GNP > 500`, Rejected, ""},
		{"both BETWEEN bounds changed: two literals", `SELECT Name FROM country WHERE GNP BETWEEN 1 AND 10`, `SELECT Name FROM country WHERE GNP BETWEEN 2 AND 20`, Rejected, ""},
		{"IN list grown: structure changes", `SELECT Name FROM country WHERE Region IN ('A', 'B')`, `SELECT Name FROM country WHERE Region IN ('A', 'B', 'C')`, Rejected, ""},
		{"projection and filter changed together", base, `SELECT Name, GNP FROM country WHERE Region = 'Polynesia' AND GNP > 100`, Rejected, ""},
		{"predicate removed and LIMIT changed", base + ` LIMIT 3`, `SELECT Name, Population FROM country WHERE Region = 'Caribbean' LIMIT 5`, Rejected, ""},
		{"operator changed: structure differs", base, `SELECT Name, Population FROM country WHERE Region = 'Caribbean' AND GNP >= 100`, Rejected, ""},
		{"filtered column changed", base, `SELECT Name, Population FROM country WHERE Continent = 'Caribbean' AND GNP > 100`, Rejected, ""},
		{"predicate replaced by another", base, `SELECT Name, Population FROM country WHERE Region = 'Caribbean' AND Population > 100`, Rejected, ""},
		{"literal changed and a predicate added", base, `SELECT Name, Population FROM country WHERE Region = 'Polynesia' AND GNP > 100 AND Continent = 'X'`, Rejected, ""},
		{"UNION became INTERSECT: every branch scope changes", `SELECT Name FROM country WHERE Region = 'A' UNION SELECT Name FROM city`, `SELECT Name FROM country WHERE Region = 'A' INTERSECT SELECT Name FROM city`, Rejected, ""},
	}
	for _, c := range cases {
		r := classify(t, c.pre, c.post)
		if r.Subtype != c.want || r.Intent != c.intent || r.Drift != (c.want != NoDrift) {
			t.Errorf("%s:\n pre  %s\n post %s\n got drift=%v %q %q, want %q %q\n removed %v\n added %v",
				c.name, c.pre, c.post, r.Drift, r.Subtype, r.Intent, c.want, c.intent, r.Removed, r.Added)
		}
	}
	if len(cases) < 40 {
		t.Errorf("only %d pairs", len(cases))
	}
}
