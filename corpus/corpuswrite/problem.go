package corpuswrite

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with an importer's input, located as
// precisely as the importer can: the input file, its line (0 when not tied
// to one), the task's id in the benchmark (empty when unknown) and the
// field.
type Problem struct {
	// File is the input file (or database file) at fault.
	File string
	// Line is the 1-based line of File, 0 when not tied to one.
	Line int
	// InstanceID is the task's instance_id, empty when unknown.
	InstanceID string
	// Field is the JSON field at fault, empty when none.
	Field string
	// Msg says what is wrong.
	Msg string
}

// String formats the problem as "file:line: instance_id ID: field: msg".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.InstanceID != "" {
		fmt.Fprintf(&b, "instance_id %s: ", p.InstanceID)
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ImportError is returned by an importer whose input is unusable: it lists
// every problem found. Nothing is written to the output directory then.
type ImportError struct {
	// Importer names the importer in the message ("tide", "birdinteract").
	Importer string
	// Problems are all the problems found, in input order.
	Problems []Problem
}

// Error lists the problems, one per line.
func (e *ImportError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s import failed: %d problem(s)", e.Importer, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}
