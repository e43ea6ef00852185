// Package corpus owns the task-record model: records and corpus manifests,
// loading and validating a corpus directory against its databases, and the
// embedded demo corpus. See docs/corpus-format.md for the file format.
package corpus

import (
	"sort"
	"strconv"
	"strings"
	"unicode"

	"avtgym/sqlexec"
	"avtgym/sqlexec/postgres"
)

// Corpus is a loaded, validated corpus: its records, with their databases
// open and their references checked.
type Corpus struct {
	// Name is the corpus name from the manifest.
	Name string
	// Description is the manifest's description.
	Description string
	// Tasks are the records in file order.
	Tasks []*Task
	// Cache holds the reference results of the corpus's tasks.
	Cache *sqlexec.Cache

	byID    map[string]*Task
	avts    map[string][]*Task
	dbs     map[string]*DB
	dbOrder []string
	cleanup func() error
	// pgOwned is the PostgreSQL connection the load opened from
	// Options.PostgresURL (nil when none, or when the caller gave one).
	pgOwned *postgres.Server
}

// DB is one open database of a corpus with its public context.
type DB struct {
	// Spec is the manifest entry.
	Spec Database
	// Engine runs queries on the database, read-only.
	Engine sqlexec.Engine
	// Schema is the public schema text (the manifest's, or derived).
	Schema string
}

// Task is a record as served: the record with its database, the resolved
// comparison policy and what the server needs to check tokens.
type Task struct {
	*Record
	// Corpus is the corpus the task belongs to.
	Corpus *Corpus
	// DB is the task's database.
	DB *DB
	// Hash is a content hash of the record and the corpus defaults it
	// inherits; an episode token remembers it so that a token issued for
	// an older version of the record is rejected.
	Hash [32]byte
	// Policy is the resolved comparison policy (defaults applied, order
	// "auto" decided against the reference).
	Policy sqlexec.Policy
	// ReferenceSQL is the reference statements joined into one text.
	ReferenceSQL string
	// RefKey is the task's key in the corpus's reference cache.
	RefKey string
	// PublicKnowledge is the database's knowledge base minus the entries
	// this record masks.
	PublicKnowledge []KnowledgeEntry
	// File and Line locate the record in its records file.
	File string
	Line int
}

// Task returns the task with the given id.
func (c *Corpus) Task(id string) (*Task, bool) {
	t, ok := c.byID[id]
	return t, ok
}

// Interpretations returns the tasks of one AVT in corpus order.
func (c *Corpus) Interpretations(avtID string) []*Task { return c.avts[avtID] }

// AVTCount is the number of distinct AVTs.
func (c *Corpus) AVTCount() int { return len(c.avts) }

// DBs returns the database ids in manifest order.
func (c *Corpus) DBs() []string { return c.dbOrder }

// Splits returns the split labels in use, sorted.
func (c *Corpus) Splits() []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range c.Tasks {
		if t.Split != "" && !seen[t.Split] {
			seen[t.Split] = true
			out = append(out, t.Split)
		}
	}
	sort.Strings(out)
	return out
}

// Close closes the databases and removes any database built at load time.
func (c *Corpus) Close() error {
	var first error
	for _, id := range c.dbOrder {
		if err := c.dbs[id].Engine.Close(); err != nil && first == nil {
			first = err
		}
	}
	if c.cleanup != nil {
		if err := c.cleanup(); err != nil && first == nil {
			first = err
		}
	}
	if c.pgOwned != nil {
		c.pgOwned.Close()
	}
	return first
}

// Problem is one validation problem, located as precisely as the loader
// could: file, line (0 when the problem is not tied to a line) and field.
type Problem struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ValidationError lists every problem found while loading a corpus. A
// corpus with any problem is not served.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid corpus: ")
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problem(s)")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
