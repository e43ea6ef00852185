// Package demo embeds the demo corpus written for avtgym: a retail shop and
// a clinic database, built from SQL scripts at load time, and their task
// records. It is what `avtgym serve` serves when no corpus is named.
package demo

import "embed"

// FS holds corpus.json, the database scripts and the records.
//
//go:embed corpus.json *.sql *.jsonl
var FS embed.FS
