package postgres

// Harness cells (sqlexec.Limits.Harness): each text-format value becomes the
// sqlexec.PyValue that BIRD-Interact's harness holds for it, which is
// psycopg2 2.9's Python object for the column's type (its default
// typecasters) after preprocess_results and process_decimals_recursive
// (evaluation/src/eval_bird_interact.py, commit 451fe2c):
//
//   - smallint, integer, bigint, oid: int; boolean: bool (== 1 or 0);
//   - real, double precision: float, then round(x, 2);
//   - numeric: Decimal, then quantize(Decimal('0.01'), ROUND_HALF_UP),
//     which raises InvalidOperation for ±Infinity and past 28 digits;
//   - date, timestamp, timestamptz: date or datetime, then
//     strftime('%Y-%m-%d'): a str, the year unpadded as glibc writes it
//     ("44-03-15"); infinity is date.max or datetime.max (9999-12-31),
//     -infinity date.min ("1-01-01"); a BC date raises ValueError in
//     psycopg2 (the query fails);
//   - time, timetz: datetime.time (timetz aware: compared in UTC; naive
//     and aware times are never equal); 24:00:00 is time(0, 0);
//   - interval: timedelta, a month counted as 30 days and a year as 365;
//   - json, jsonb: json.loads; a dict or list is then rounded inside
//     (floats only) and written as json.dumps(sort_keys=True), a str; a
//     scalar stays a scalar (1 equals the integer 1, "a" the text 'a');
//   - arrays of the builtin types psycopg2 casts (below): a list of the
//     elements as above, then json.dumps, which raises TypeError for a
//     Decimal, date, datetime, time, timedelta or memoryview inside;
//   - bytea: memoryview (compared and hashed by its bytes);
//   - everything else (text, varchar, char(n) with its padding, name, uuid,
//     enums, money, inet, other arrays, ...): str, PostgreSQL's text;
//   - NULL: None.
//
// The session's settings (convert.go: DateStyle ISO, IntervalStyle
// postgres, TimeZone UTC, extra_float_digits 1) are the harness server's
// defaults, so the texts psycopg2 parses there are the texts parsed here.

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"avtgym/sqlexec"
)

// Type OIDs of the harness's conversion (pg_type.dat) besides convert.go's.
const (
	oidChar        = 18
	oidName        = 19
	oidTime        = 1083
	oidTimeTZ      = 1266
	oidInterval    = 1186
	oidBoolArr     = 1000
	oidByteaArr    = 1001
	oidCharArr     = 1002
	oidNameArr     = 1003
	oidInt2Arr     = 1005
	oidInt4Arr     = 1007
	oidTextArr     = 1009
	oidBpcharArr   = 1014
	oidVarcharArr  = 1015
	oidInt8Arr     = 1016
	oidFloat4Arr   = 1021
	oidFloat8Arr   = 1022
	oidOIDArr      = 1028
	oidTimestampA  = 1115
	oidDateArr     = 1182
	oidTimeArr     = 1183
	oidTimestampTA = 1185
	oidIntervalArr = 1187
	oidNumericArr  = 1231
	oidTimeTZArr   = 1270
	oidJSONArr     = 199
	oidJSONBArr    = 3807
)

// pyKind is the Python type psycopg2 gives a value of a column type.
type pyKind uint8

const (
	pkStr pyKind = iota
	pkInt
	pkBool
	pkFloat
	pkDecimal
	pkDate // date, datetime: strftime to a str
	pkTime
	pkTimeTZ
	pkInterval
	pkJSON
	pkBytes
)

// pyKindOf maps a scalar type; pyArrayOf an array type to its element's
// kind (ok false: not an array psycopg2 casts).
func pyKindOf(oid uint32) pyKind {
	switch oid {
	case oidInt2, oidInt4, oidInt8, oidOID:
		return pkInt
	case oidBool:
		return pkBool
	case oidFloat4, oidFloat8:
		return pkFloat
	case oidNumeric:
		return pkDecimal
	case oidDate, oidTimestamp, oidTimestampTZ:
		return pkDate
	case oidTime:
		return pkTime
	case oidTimeTZ:
		return pkTimeTZ
	case oidInterval:
		return pkInterval
	case oidJSON, oidJSONB:
		return pkJSON
	case oidBytea:
		return pkBytes
	}
	return pkStr
}

func pyArrayOf(oid uint32) (pyKind, bool) {
	switch oid {
	case oidInt2Arr, oidInt4Arr, oidInt8Arr, oidOIDArr:
		return pkInt, true
	case oidBoolArr:
		return pkBool, true
	case oidFloat4Arr, oidFloat8Arr:
		return pkFloat, true
	case oidNumericArr:
		return pkDecimal, true
	case oidTextArr, oidVarcharArr, oidBpcharArr, oidNameArr, oidCharArr:
		return pkStr, true
	case oidDateArr, oidTimestampA, oidTimestampTA:
		return pkDate, true
	case oidTimeArr:
		return pkTime, true
	case oidTimeTZArr:
		return pkTimeTZ, true
	case oidIntervalArr:
		return pkInterval, true
	case oidByteaArr:
		return pkBytes, true
	case oidJSONArr, oidJSONBArr:
		return pkJSON, true
	}
	return 0, false
}

// harnessConverterFor is converterFor under sqlexec.Limits.Harness.
func harnessConverterFor(oid uint32) converter {
	if elem, ok := pyArrayOf(oid); ok {
		return func(v []byte) any {
			if v == nil {
				return sqlexec.PyValue{Key: "N"}
			}
			return harnessArray(string(v), elem)
		}
	}
	kind := pyKindOf(oid)
	return func(v []byte) any {
		if v == nil {
			return sqlexec.PyValue{Key: "N"}
		}
		return harnessScalar(string(v), kind)
	}
}

// errValue is a value whose conversion or preprocessing raises.
func errValue(msg string) sqlexec.PyValue { return sqlexec.PyValue{Err: msg} }

func harnessScalar(s string, kind pyKind) sqlexec.PyValue {
	switch kind {
	case pkInt:
		return sqlexec.PyInt(s)
	case pkBool:
		if s == "t" {
			return sqlexec.PyInt("1")
		}
		return sqlexec.PyInt("0")
	case pkFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return sqlexec.PyValue{Key: "S" + s}
		}
		return sqlexec.PyFloat(f)
	case pkDecimal:
		return sqlexec.PyDecimal(s)
	case pkDate:
		d, err := pyDate(s)
		if err != "" {
			return errValue(err)
		}
		return sqlexec.PyValue{Key: "S" + d}
	case pkTime, pkTimeTZ:
		return pyTime(s, kind == pkTimeTZ)
	case pkInterval:
		us, ok := pyInterval(s)
		if !ok {
			return errValue("psycopg2.InterfaceError: cannot parse the interval " + strconv.Quote(s))
		}
		return sqlexec.PyValue{Key: "d" + us.String()}
	case pkJSON:
		return harnessJSON(s)
	case pkBytes:
		// A read-only memoryview hashes as its bytes: set() takes it.
		return sqlexec.PyValue{Key: "B" + string(convBytea([]byte(s)).([]byte))}
	}
	return sqlexec.PyValue{Key: "S" + s}
}

// pyDate is strftime('%Y-%m-%d') of psycopg2's date or datetime for a
// date, timestamp or timestamptz text ("" and a message: psycopg2 raises).
func pyDate(s string) (string, string) {
	switch {
	case strings.HasPrefix(s, "infinity"):
		return "9999-12-31", ""
	case strings.HasPrefix(s, "-infinity"):
		return "1-01-01", ""
	case strings.HasSuffix(s, " BC"):
		return "", "ValueError: year is out of range (a BC date, in psycopg2)"
	}
	y, rest, ok := strings.Cut(s, "-")
	if !ok || len(rest) < 5 {
		return "", "ValueError: cannot parse the date " + strconv.Quote(s)
	}
	n, err := strconv.Atoi(y)
	if err != nil || n < 1 || n > 9999 {
		return "", "ValueError: year " + y + " is out of range"
	}
	return strconv.Itoa(n) + "-" + rest[:5], ""
}

// pyTime is datetime.time of a time or timetz text: the key is the time of
// day in microseconds, for an aware time after subtracting its UTC offset
// (as Python compares aware times).
func pyTime(s string, tz bool) sqlexec.PyValue {
	clock, off := s, ""
	if tz {
		if i := strings.LastIndexAny(s, "+-"); i > 0 {
			clock, off = s[:i], s[i:]
		}
	}
	us, ok := clockMicros(clock)
	if !ok {
		return errValue("ValueError: cannot parse the time " + strconv.Quote(s))
	}
	if us == 24*3600*1e6 {
		us = 0 // psycopg2 gives time(0, 0) for 24:00:00
	}
	if !tz {
		return sqlexec.PyValue{Key: "t" + strconv.FormatInt(us, 10)}
	}
	sign := int64(1)
	if off[0] == '-' {
		sign = -1
	}
	parts := strings.Split(off[1:], ":")
	var secs int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || i > 2 {
			return errValue("ValueError: cannot parse the time " + strconv.Quote(s))
		}
		secs += n * []int64{3600, 60, 1}[i]
	}
	return sqlexec.PyValue{Key: "z" + strconv.FormatInt(us-sign*secs*1e6, 10)}
}

// clockMicros parses HH:MM[:SS[.ffffff]] into microseconds.
func clockMicros(s string) (int64, bool) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, false
	}
	h, err1 := strconv.ParseInt(parts[0], 10, 64)
	m, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || h < 0 || m < 0 {
		return 0, false
	}
	us := (h*3600 + m*60) * 1e6
	if len(parts) == 3 {
		sec, frac, _ := strings.Cut(parts[2], ".")
		n, err := strconv.ParseInt(sec, 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		us += n * 1e6
		if frac != "" {
			frac = (frac + "000000")[:6]
			f, err := strconv.ParseInt(frac, 10, 64)
			if err != nil {
				return 0, false
			}
			us += f
		}
	}
	return us, true
}

// pyInterval is psycopg2's timedelta of an interval text (IntervalStyle
// postgres: "1 year 2 mons -3 days +04:05:06.5"), in microseconds: a year
// is 365 days and a month 30, as psycopg2 counts them.
func pyInterval(s string) (*big.Int, bool) {
	total := new(big.Int)
	fields := strings.Fields(s)
	day := big.NewInt(86400e6)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			sign := int64(1)
			if f[0] == '-' {
				sign, f = -1, f[1:]
			} else if f[0] == '+' {
				f = f[1:]
			}
			us, ok := clockMicros(f)
			if !ok {
				return nil, false
			}
			total.Add(total, big.NewInt(sign*us))
			continue
		}
		n, ok := new(big.Int).SetString(strings.TrimPrefix(f, "+"), 10)
		if !ok || i+1 >= len(fields) {
			return nil, false
		}
		i++
		var days int64
		switch strings.TrimSuffix(fields[i], "s") {
		case "year":
			days = 365
		case "mon":
			days = 30
		case "day":
			days = 1
		default:
			return nil, false
		}
		n.Mul(n, big.NewInt(days))
		total.Add(total, n.Mul(n, day))
	}
	return total, true
}

// maxPyJSONDepth approximates the nesting at which Python's json.loads
// raises RecursionError (its recursion limit is 1000 frames).
const maxPyJSONDepth = 990

// pyJSON is a Python object of json.loads or of an array's elements: nil,
// bool, *big.Int (int), float64, string, []any (list), map[string]any
// (dict), or pyOpaque (a Decimal, date, ... json.dumps cannot write).
type pyOpaque struct{ typ string }

// harnessJSON is a json or jsonb value: json.loads, then a dict or list
// rounded and dumped, a scalar kept.
func harnessJSON(s string) sqlexec.PyValue {
	x, err := pyLoads(s)
	if err != nil {
		return errValue(err.Error())
	}
	return pyPreprocessed(x)
}

// pyPreprocessed is preprocess_results of one non-date item:
// process_decimals_recursive, then json.dumps(sort_keys=True) for a list
// or dict.
func pyPreprocessed(x any) sqlexec.PyValue {
	switch t := x.(type) {
	case nil:
		return sqlexec.PyValue{Key: "N"}
	case bool:
		if t {
			return sqlexec.PyInt("1")
		}
		return sqlexec.PyInt("0")
	case *big.Int:
		return sqlexec.PyInt(t.String())
	case float64:
		return sqlexec.PyFloat(t)
	case string:
		return sqlexec.PyValue{Key: "S" + t}
	case sqlexec.PyValue:
		return t
	}
	var b strings.Builder
	if err := pyDumps(&b, x); err != nil {
		return errValue(err.Error())
	}
	return sqlexec.PyValue{Key: "S" + b.String()}
}

// pyLoads is Python's json.loads: an integer literal is an int, a literal
// with a fraction or an exponent a float (an overflow is inf), duplicate
// keys keep the last value.
func pyLoads(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, errors.New("json.JSONDecodeError: " + err.Error())
	}
	return pyFromJSON(x, 0)
}

func pyFromJSON(x any, depth int) (any, error) {
	if depth > maxPyJSONDepth {
		return nil, errors.New("RecursionError: maximum recursion depth exceeded while decoding a JSON document")
	}
	switch t := x.(type) {
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			n, _ := new(big.Int).SetString(s, 10)
			return n, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil
	case []any:
		for i, e := range t {
			v, err := pyFromJSON(e, depth+1)
			if err != nil {
				return nil, err
			}
			t[i] = v
		}
		return t, nil
	case map[string]any:
		for k, e := range t {
			v, err := pyFromJSON(e, depth+1)
			if err != nil {
				return nil, err
			}
			t[k] = v
		}
		return t, nil
	}
	return x, nil
}

// pyDumps writes x as json.dumps(x, sort_keys=True) does: ", " and ": "
// separators, keys sorted by code point, ASCII only (\uXXXX escapes),
// floats rounded (round(x, 2), process_decimals_recursive) and written by
// Python's repr, NaN and Infinity as such. A Decimal, date, time,
// timedelta or memoryview inside raises TypeError.
func pyDumps(b *strings.Builder, x any) error {
	switch t := x.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[t])
	case *big.Int:
		b.WriteString(t.String())
	case float64:
		b.WriteString(sqlexec.PyFloatRepr(sqlexec.PyRound2(t)))
	case string:
		pyDumpString(b, t)
	case pyOpaque:
		return errors.New("TypeError: Object of type " + t.typ + " is not JSON serializable")
	case sqlexec.PyValue: // an element that failed to convert
		return errors.New(t.Err)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := pyDumps(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys) // UTF-8 byte order is code point order
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyDumpString(b, k)
			b.WriteString(": ")
			if err := pyDumps(b, t[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	}
	return nil
}

// pyDumpString writes s as json.dumps with ensure_ascii: every character
// outside ' '..'~' escaped, \", \\, \n, \r, \t, \b, \f by name, others as
// \uXXXX (lower-case hex; surrogate pairs beyond U+FFFF).
func pyDumpString(b *strings.Builder, s string) {
	const hexd = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		for sh := 12; sh >= 0; sh -= 4 {
			b.WriteByte(hexd[(r>>sh)&0xf])
		}
	}
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= ' ' && r <= '~':
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			u4(0xd800 | (r>>10)&0x3ff)
			u4(0xdc00 | r&0x3ff)
		default:
			u4(r)
		}
	}
	b.WriteByte('"')
}

// harnessArray is an array psycopg2 casts: a list of its elements
// (converted as their type's values), then process_decimals_recursive and
// json.dumps.
func harnessArray(s string, elem pyKind) sqlexec.PyValue {
	if i := strings.Index(s, "="); i >= 0 && strings.HasPrefix(s, "[") {
		s = s[i+1:] // "[0:1]={1,2}": psycopg2 skips the dimensions
	}
	p := arrayParser{s: s}
	x, ok := p.parse(elem, 0)
	if !ok || p.i != len(p.s) {
		return sqlexec.PyValue{Key: "S" + s}
	}
	return pyPreprocessed(x)
}

type arrayParser struct {
	s string
	i int
}

// maxArrayDepth is PostgreSQL's MAXDIM.
const maxArrayDepth = 6

func (p *arrayParser) parse(elem pyKind, depth int) (any, bool) {
	if depth > maxArrayDepth || p.i >= len(p.s) || p.s[p.i] != '{' {
		return nil, false
	}
	p.i++
	out := []any{}
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return out, true
	}
	for p.i < len(p.s) {
		var v any
		switch p.s[p.i] {
		case '{':
			sub, ok := p.parse(elem, depth+1)
			if !ok {
				return nil, false
			}
			v = sub
		case '"':
			str, ok := p.quoted()
			if !ok {
				return nil, false
			}
			v = arrayElem(str, elem)
		default:
			j := p.i
			for j < len(p.s) && p.s[j] != ',' && p.s[j] != '}' {
				j++
			}
			raw := p.s[p.i:j]
			p.i = j
			if strings.EqualFold(raw, "NULL") {
				v = nil
			} else {
				v = arrayElem(raw, elem)
			}
		}
		out = append(out, v)
		if p.i >= len(p.s) {
			return nil, false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return out, true
		default:
			return nil, false
		}
	}
	return nil, false
}

func (p *arrayParser) quoted() (string, bool) {
	var b bytes.Buffer
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch c {
		case '\\':
			p.i++
			if p.i < len(p.s) {
				b.WriteByte(p.s[p.i])
			}
		case '"':
			p.i++
			return b.String(), true
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

// arrayElem is one array element as the Python object psycopg2 makes.
func arrayElem(s string, elem pyKind) any {
	switch elem {
	case pkInt:
		n, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return s
		}
		return n
	case pkBool:
		return s == "t"
	case pkFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return s
		}
		return f
	case pkDecimal:
		if v := sqlexec.PyDecimal(s); v.Err != "" {
			return v // quantize raises before json.dumps does
		}
		return pyOpaque{"Decimal"}
	case pkDate:
		if strings.Contains(s, ":") || strings.HasPrefix(s, "infinity") || strings.HasPrefix(s, "-infinity") {
			return pyOpaque{"datetime"}
		}
		return pyOpaque{"date"}
	case pkTime, pkTimeTZ:
		return pyOpaque{"time"}
	case pkInterval:
		return pyOpaque{"timedelta"}
	case pkBytes:
		return pyOpaque{"memoryview"}
	case pkJSON:
		x, err := pyLoads(s)
		if err != nil {
			return errValue(err.Error())
		}
		return x
	}
	return s
}
