package postgres

// Result cells. Values arrive in PostgreSQL's text format (the session pins
// DateStyle ISO, IntervalStyle postgres, TimeZone UTC, extra_float_digits 1,
// bytea_output hex) and become the cells sqlexec.Result documents:
//
//   - smallint, integer, bigint, oid: int64;
//   - real, double precision: float64 (NaN and ±Infinity included);
//   - numeric: float64, the nearest double (exact for up to 15 significant
//     digits; the comparator's tolerance is 1e-6 relative and BIRD-Interact
//     rounds to 2 places), except an integral value beyond 2^53 that fits an
//     int64, which is int64 so that it stays exact; NaN and ±Infinity as
//     float64. Never text: text never equals a number in the comparator;
//   - boolean: int64 1 or 0;
//   - date: "YYYY-MM-DD"; timestamp: "YYYY-MM-DD HH:MM:SS[.ffffff]" (PostgreSQL
//     drops trailing zeros of the fraction); timestamptz: the same in UTC
//     followed by "+00"; time, timetz, interval: their text; BC dates and
//     infinity keep PostgreSQL's text ("0044-03-15 BC", "infinity");
//   - json, jsonb: canonical JSON text: object keys sorted by bytes, no
//     insignificant white space, numbers as written, strings with only the
//     escapes JSON requires;
//   - bytea: []byte;
//   - everything else (text, varchar, char(n) with its padding, uuid, arrays,
//     ranges, enums, composites, money, inet, ...): PostgreSQL's text form;
//   - NULL: nil.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Type OIDs (pg_type.dat).
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidNumeric     = 1700
	oidJSONB       = 3802
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestampTZ = 1184
)

// converter turns one text-format value (nil for NULL) into a cell. The value
// is only valid during the call: converters copy what they keep.
type converter func(v []byte) any

// costKind says how a column's cells are counted from their raw values.
type costKind uint8

const (
	costText   costKind = iota // a string of the raw length
	costNumber                 // an int64 or float64
	costBytea                  // bytes decoded from hex
	costJSON                   // canonical JSON: at most the raw length
)

func converterFor(oid uint32) (converter, costKind) {
	switch oid {
	case oidInt2, oidInt4, oidInt8, oidOID:
		return convInt, costNumber
	case oidFloat4, oidFloat8:
		return convFloat, costNumber
	case oidNumeric:
		return convNumeric, costNumber
	case oidBool:
		return convBool, costNumber
	case oidJSON, oidJSONB:
		return convJSON, costJSON
	case oidBytea:
		return convBytea, costBytea
	}
	return convText, costText
}

// rawCost is what a row's cells will count (sqlexec.CellBytes), from their
// raw values: exact for PostgreSQL's output of every kind but JSON, for which
// it is an upper bound.
func rawCost(vals [][]byte, kinds []costKind) int64 {
	var n int64
	for i, v := range vals {
		n += 16
		switch {
		case v == nil:
		case kinds[i] == costNumber:
			n += 8
		case kinds[i] == costBytea && len(v) >= 2 && v[0] == '\\' && v[1] == 'x':
			n += int64(len(v)-2) / 2
		default:
			n += int64(len(v))
		}
	}
	return n
}

func convText(v []byte) any {
	if v == nil {
		return nil
	}
	return string(v)
}

func convInt(v []byte) any {
	if v == nil {
		return nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return string(v)
	}
	return n
}

func convFloat(v []byte) any {
	if v == nil {
		return nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return string(v)
	}
	return f
}

func convNumeric(v []byte) any {
	if v == nil {
		return nil
	}
	s := string(v)
	switch s {
	case "NaN":
		return math.NaN()
	case "Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if strings.Trim(frac, "0") == "" {
		digits := strings.TrimLeft(strings.TrimPrefix(intPart, "-"), "0")
		if len(digits) > 15 {
			if n, err := strconv.ParseInt(intPart, 10, 64); err == nil && (n > 1<<53 || n < -(1<<53)) {
				return n
			}
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return f
}

func convBool(v []byte) any {
	switch string(v) {
	case "t":
		return int64(1)
	case "f":
		return int64(0)
	}
	return convText(v)
}

func convBytea(v []byte) any {
	if v == nil {
		return nil
	}
	if len(v) >= 2 && v[0] == '\\' && v[1] == 'x' {
		out := make([]byte, hex.DecodedLen(len(v)-2))
		if _, err := hex.Decode(out, v[2:]); err == nil {
			return out
		}
	}
	return bytes.Clone(v)
}

func convJSON(v []byte) any {
	if v == nil {
		return nil
	}
	s, err := canonicalJSON(v)
	if err != nil {
		return string(v)
	}
	return s
}

// canonicalJSON re-encodes a JSON document with sorted object keys, no
// insignificant white space, numbers as written and minimal string escapes.
// Duplicate keys (possible in json, not jsonb) keep the last value, as jsonb
// does.
func canonicalJSON(v []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(v))
	writeJSON(&b, x)
	return b.String(), nil
}

func writeJSON(b *strings.Builder, x any) {
	switch t := x.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(string(t))
	case string:
		writeJSONString(b, t)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, k)
			b.WriteByte(':')
			writeJSON(b, t[k])
		}
		b.WriteByte('}')
	}
}

// writeJSONString writes s quoted with the escapes JSON requires (", \ and
// control characters), as PostgreSQL's jsonb output does.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			if c < utf8.RuneSelf {
				b.WriteByte(c)
				i++
				continue
			}
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b.WriteString(`\ufffd`)
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&0xf])
		}
		i++
	}
	b.WriteByte('"')
}
