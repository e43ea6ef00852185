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
// object ({...}, braces inside strings ignored) that is valid JSON — or
// that becomes valid once repaired (see RepairJSON: a raw newline inside a
// string, as models write multi-line SQL, or a stray backslash). Errors are
// *Error of KindMalformed and quote the content's start.
func ParseJSON(content string, v any) error {
	objs, err := jsonObjects(content, 1)
	if len(objs) == 0 {
		return err
	}
	return decode(objs[0], content, v)
}

// MaxJSONObjects is the most objects JSONObjects returns.
const MaxJSONObjects = 16

// JSONObjects returns the top-level JSON objects of a model's content, in
// order, each as valid JSON text (repaired by RepairJSON where it needed
// it): the whole content when it is one object, else every balanced object
// ({...}, braces inside strings ignored) that is valid JSON or becomes
// valid once repaired, an object inside another one not counted. At most
// MaxJSONObjects are returned, and the work is bounded as ParseJSON's.
// Callers that must see exactly one answer (the oracle's matcher, the
// asker) use it to tell one object from several.
func JSONObjects(content string) []string {
	objs, _ := jsonObjects(content, MaxJSONObjects)
	return objs
}

// jsonObjects returns up to limit objects of content (see JSONObjects) and,
// when it found none, why, as a KindMalformed *Error.
func jsonObjects(content string, limit int) ([]string, error) {
	trimmed := strings.TrimSpace(content)
	if trimmed != "" && (trimmed[0] == '{' || limit == 1) && json.Valid([]byte(trimmed)) {
		// ParseJSON decodes any valid content as a whole (and fails on a
		// kind v cannot hold); JSONObjects looks inside an array.
		return []string{trimmed}, nil
	}
	var objs []string
	unterminated := false
	// Each candidate costs a scan to its end (and a validation, and maybe a
	// repair): bound the total, so that content with many nested or
	// unclosed braces costs linear time, not quadratic (1 MB of "{" would
	// take minutes).
	budget := 16*len(content) + 1<<20
	for i := 0; i < len(content) && budget >= 0 && len(objs) < limit; i++ {
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
		cand := content[i:end]
		if !json.Valid([]byte(cand)) {
			budget -= 2 * (end - i)
			fixed, changed := RepairJSON(cand)
			if !changed || !json.Valid([]byte(fixed)) {
				continue
			}
			cand = fixed
		}
		objs = append(objs, cand)
		i = end - 1 // the next top-level object starts after this one
	}
	switch {
	case len(objs) > 0:
		return objs, nil
	case budget < 0:
		return nil, errorf(KindMalformed, 0, nil, "no valid JSON object among the first braces (too many nested or unclosed ones) in %q", excerpt([]byte(content)))
	case unterminated:
		return nil, errorf(KindMalformed, 0, nil, "unterminated JSON object (output cut short?) in %q", excerpt([]byte(content)))
	}
	return nil, errorf(KindMalformed, 0, nil, "no JSON object in %q", excerpt([]byte(content)))
}

// RepairJSON fixes, inside the strings of a JSON text, what models get
// wrong and encoding/json refuses: a raw control character (a newline or a
// tab in multi-line SQL) is escaped, and a backslash that starts no valid
// escape ("\d" in a regular expression, "\_" in a LIKE pattern) is
// doubled, so the string keeps the text the model meant. Outside strings
// nothing changes. It reports whether it changed anything.
func RepairJSON(s string) (string, bool) {
	var b strings.Builder
	changed, inString := false, false
	start := 0 // s[start:i] is still to be copied
	fix := func(i int, with string) {
		if !changed {
			b.Grow(len(s) + 16)
			changed = true
		}
		b.WriteString(s[start:i])
		b.WriteString(with)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch {
		case c == '"':
			inString = false
		case c == '\\':
			if i+1 < len(s) && validEscape(s[i+1:]) {
				i++ // keep the escape as it is
				continue
			}
			fix(i, `\\`)
			start = i + 1
		case c < 0x20:
			esc := map[byte]string{'\n': `\n`, '\r': `\r`, '\t': `\t`}[c]
			if esc == "" {
				esc = fmt.Sprintf(`\u%04x`, c)
			}
			fix(i, esc)
			start = i + 1
		}
	}
	if !changed {
		return s, false
	}
	b.WriteString(s[start:])
	return b.String(), true
}

// validEscape reports whether rest (what follows a backslash in a JSON
// string) starts a valid escape.
func validEscape(rest string) bool {
	switch rest[0] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		if len(rest) < 5 {
			return false
		}
		for _, h := range rest[1:5] {
			if !strings.ContainsRune("0123456789abcdefABCDEF", h) {
				return false
			}
		}
		return true
	}
	return false
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
