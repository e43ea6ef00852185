package corpus

// ManifestFile is the name of a corpus manifest inside a corpus directory.
const ManifestFile = "corpus.json"

// Manifest is the JSON content of a corpus directory's corpus.json: the
// corpus's name, its databases and its records files.
type Manifest struct {
	// Name identifies the corpus in requests (ResetRequest.corpus).
	Name string `json:"name"`
	// Description is free text shown by ListCorpora.
	Description string `json:"description,omitempty"`
	// Records are the JSONL records files, relative to the directory.
	// Defaults to ["records.jsonl"].
	Records []string `json:"records,omitempty"`
	// Defaults apply to every record unless the record overrides them.
	Defaults Defaults `json:"defaults,omitempty"`
	// Databases are the databases the records run against.
	Databases []Database `json:"databases"`
}

// Defaults are corpus-wide defaults for records.
type Defaults struct {
	// Comparison is the default result-comparison policy.
	Comparison *Comparison `json:"comparison,omitempty"`
}

// Database describes one database of a corpus and its public context.
type Database struct {
	// ID is how records name the database.
	ID string `json:"id"`
	// Engine is "sqlite" or "postgres". A SQLite database is given by
	// exactly one of Path and Script; a PostgreSQL database by exactly one
	// of Dumps and Script, and needs a PostgreSQL server to load
	// (one that Options.Engines connects to: serve --postgres).
	Engine string `json:"engine"`
	// Path is a SQLite database file relative to the corpus directory.
	Path string `json:"path,omitempty"`
	// Script is a SQL script relative to the corpus directory from which
	// the database is built at load time: for SQLite into a private
	// directory, for PostgreSQL into a template database (psql syntax,
	// COPY ... FROM stdin blocks allowed).
	Script string `json:"script,omitempty"`
	// Dumps is a folder relative to the corpus directory holding one
	// PostgreSQL table dump per file, <table>.sql (the output of
	// pg_dump --no-owner --no-privileges -t <table>, as in BIRD-Interact's
	// postgre_table_dumps/<db>_template/), from which an engine "postgres"
	// database is built at load time (docs/corpus-format.md).
	Dumps string `json:"dumps,omitempty"`
	// Schema is the public schema text (DDL and sample rows) shown to the
	// policy. When empty it is derived from the database: each table's DDL
	// followed by its first three rows.
	Schema string `json:"schema,omitempty"`
	// ColumnMeanings maps "table.column" to a public description.
	ColumnMeanings map[string]string `json:"column_meanings,omitempty"`
	// Knowledge is the database's external knowledge base. A record's
	// knowledge ambiguity masks one entry; the others are public.
	Knowledge []KnowledgeEntry `json:"knowledge,omitempty"`
}

// KnowledgeEntry is one external-knowledge definition (BIRD-Interact's
// knowledge base).
type KnowledgeEntry struct {
	// ID is how a knowledge ambiguity names the entry it masks.
	ID string `json:"id"`
	// Name is the entry's short name, such as "Loyal customer".
	Name string `json:"name"`
	// Definition is the entry's text.
	Definition string `json:"definition"`
}
