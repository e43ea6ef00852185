// Package schema holds the JSON Schema of the episode record
// (episode.v1.json, driver.Record) and checks records against it, so that
// every writer's output and every reader's input can be held to one
// layout.
package schema

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// EpisodeV1 is the schema's text.
//
//go:embed episode.v1.json
var EpisodeV1 []byte

// episodeURL is the schema's $id.
const episodeURL = "https://avtgym.dev/schema/episode.v1.json"

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(EpisodeV1))
	if err != nil {
		return nil, fmt.Errorf("schema: episode.v1.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(episodeURL, doc); err != nil {
		return nil, fmt.Errorf("schema: episode.v1.json: %w", err)
	}
	return c.Compile(episodeURL)
})

// ValidateRecord checks one record (a JSON object) against the schema.
func ValidateRecord(record []byte) error {
	s, err := compiled()
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(record))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// ValidateLines checks every line of a JSON Lines stream, naming the first
// bad line by its number (from 1) in name. It returns how many records it
// read.
func ValidateLines(name string, r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	n, line := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := ValidateRecord(b); err != nil {
			return n, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	return n, nil
}
