package llm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// ParseJSON decodes the JSON in a model's content into v, tolerating what
// models wrap around it: ```json fences, prose before and after. It decodes
// the whole content when that is valid JSON, else the first balanced JSON
// object ({...}, braces inside strings ignored) that is valid JSON. Errors
// are *Error of KindMalformed and quote the content's start.
func ParseJSON(content string, v any) error {
	trimmed := strings.TrimSpace(content)
	if trimmed != "" && json.Valid([]byte(trimmed)) {
		return decode(trimmed, content, v)
	}
	unterminated := false
	// Each candidate costs a scan to its end (and a validation): bound the
	// total, so that content with many nested or unclosed braces costs
	// linear time, not quadratic (1 MB of "{" would take minutes).
	budget := 16*len(content) + 1<<20
	for i := 0; i < len(content) && budget >= 0; i++ {
		if content[i] != '{' {
			continue
		}
		end := balancedObject(content, i)
		if end < 0 {
			unterminated = true
			budget -= len(content) - i
			continue
		}
		budget -= 2 * (end - i)
		if cand := content[i:end]; json.Valid([]byte(cand)) {
			return decode(cand, content, v)
		}
	}
	if budget < 0 {
		return errorf(KindMalformed, 0, nil, "no valid JSON object among the first braces (too many nested or unclosed ones) in %q", excerpt([]byte(content)))
	}
	if unterminated {
		return errorf(KindMalformed, 0, nil, "unterminated JSON object (output cut short?) in %q", excerpt([]byte(content)))
	}
	return errorf(KindMalformed, 0, nil, "no JSON object in %q", excerpt([]byte(content)))
}

func decode(js, content string, v any) error {
	if err := json.Unmarshal([]byte(js), v); err != nil {
		return errorf(KindMalformed, 0, err, "decoding the JSON in %q", excerpt([]byte(content)))
	}
	return nil
}

// balancedObject returns the end (exclusive) of the object that starts at
// s[start] == '{', or -1 when it does not close.
func balancedObject(s string, start int) int {
	depth, inString, escaped := 0, false, false
	for i := start; i < len(s); i++ {
		ch := s[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
			continue
		}
		switch ch {
		case '"':
			inString = true
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

var blankLines = regexp.MustCompile(`\r?\n[ \t\r]*\n`)

// TruncateSchema fits a schema text (tables as blank-line separated CREATE
// blocks) into maxTokens by EstimateTokens. A schema that fits is returned
// as it is. Otherwise it keeps the longest prefix of whole tables that fits
// together with a closing note "-- N more tables omitted", separates the
// blocks by one blank line and reports true. maxTokens <= 0 means no limit.
func TruncateSchema(schema string, maxTokens int) (string, bool) {
	if maxTokens <= 0 || EstimateTokens(schema) <= maxTokens {
		return schema, false
	}
	var blocks []string
	for _, b := range blankLines.Split(schema, -1) {
		if b = strings.Trim(b, "\r\n"); strings.TrimSpace(b) != "" {
			blocks = append(blocks, b)
		}
	}
	note := func(n int) string { return fmt.Sprintf("-- %d more tables omitted", n) }
	var out strings.Builder
	kept := 0
	for kept < len(blocks) {
		size := out.Len() + len(blocks[kept]) + 2 + len(note(len(blocks)-kept-1))
		if kept > 0 {
			size += 2
		}
		if (2*size+6)/7 > maxTokens { // EstimateTokens of a text of that size
			break
		}
		if kept > 0 {
			out.WriteString("\n\n")
		}
		out.WriteString(blocks[kept])
		kept++
	}
	if kept == len(blocks) {
		// Only the spacing between blocks was too long.
		return out.String(), true
	}
	if kept > 0 {
		out.WriteString("\n\n")
	}
	out.WriteString(note(len(blocks) - kept))
	return out.String(), true
}
