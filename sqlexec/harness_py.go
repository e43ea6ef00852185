package sqlexec

// Python's numbers as BIRD-Interact's harness preprocesses them
// (process_decimals_recursive in evaluation/src/eval_bird_interact.py): a
// Decimal is quantized to 0.01 with ROUND_HALF_UP, a float becomes
// round(x, 2). Python compares int, bool, float and Decimal by their exact
// values, so their PyValue keys are exact rationals.

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// PyRound2 is Python's round(x, 2) of a float: the decimal nearest to x's
// exact binary value with two places (ties, which only exactly
// representable values such as 0.125 can be, to even), read back as the
// nearest float. Infinities and NaN are returned as they are.
func PyRound2(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	// Go's 'f' format with a precision rounds the exact value correctly,
	// halfway cases to even, as Python's _Py_dg_dtoa mode 3 does.
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	if err != nil {
		return x
	}
	return r
}

// PyFloat is a float cell: round(x, 2), keyed by its exact value.
func PyFloat(x float64) PyValue {
	return pyNumber(PyRound2(x))
}

// pyNumber keys a float by its exact value (no rounding).
func pyNumber(x float64) PyValue {
	switch {
	case math.IsNaN(x):
		return PyValue{Key: pyNum + "nan", NaN: true}
	case math.IsInf(x, 1):
		return PyValue{Key: pyNum + "inf"}
	case math.IsInf(x, -1):
		return PyValue{Key: pyNum + "-inf"}
	}
	return PyValue{Key: pyNum + new(big.Rat).SetFloat64(x).RatString()}
}

// PyInt is an int (or bool, 1 or 0) cell from its decimal text.
func PyInt(text string) PyValue {
	n, ok := new(big.Int).SetString(strings.TrimPrefix(text, "+"), 10)
	if !ok {
		return PyValue{Key: pyStr + text}
	}
	return PyValue{Key: pyNum + n.String()}
}

// decimalPrec is the precision of Python's default decimal context.
const decimalPrec = 28

// PyDecimal is a Decimal cell from PostgreSQL's numeric text:
// quantize(Decimal('0.01'), ROUND_HALF_UP), which raises InvalidOperation
// for an infinity and when the quantized coefficient needs more than 28
// digits; a NaN stays NaN (quantize of a quiet NaN is NaN).
func PyDecimal(text string) PyValue {
	switch text {
	case "NaN":
		return PyValue{Key: pyNum + "nan", NaN: true}
	case "Infinity", "-Infinity":
		return PyValue{Err: "decimal.InvalidOperation: quantize of Decimal('" + text + "')"}
	}
	q, ok := quantize2(text)
	if !ok {
		return PyValue{Key: pyStr + text}
	}
	digits := new(big.Int).Abs(q).String()
	if len(digits) > decimalPrec {
		return PyValue{Err: "decimal.InvalidOperation: quantize of Decimal('" + text + "') needs more than 28 digits"}
	}
	return PyValue{Key: pyNum + new(big.Rat).SetFrac(q, big.NewInt(100)).RatString()}
}

// quantize2 returns text (a decimal number, optionally with an exponent)
// times 100, rounded half away from zero to an integer.
func quantize2(text string) (*big.Int, bool) {
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, false
	}
	r.Mul(r, big.NewRat(100, 1))
	num, den := r.Num(), r.Denom()
	q, m := new(big.Int).QuoRem(new(big.Int).Abs(num), den, new(big.Int))
	if m.Lsh(m, 1).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if num.Sign() < 0 {
		q.Neg(q)
	}
	return q, true
}

// PyFloatRepr is Python's repr of a float as json.dumps writes it: the
// shortest digits that read back as x, in fixed notation when the decimal
// exponent is in [-4, 16) (with ".0" when integral), else as d.ddde±XX;
// NaN and the infinities as NaN, Infinity and -Infinity.
func PyFloatRepr(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(x, 'e', -1, 64) // -d.ddde±XX
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			return sign + "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			return sign + digits[:decpt] + "." + digits[decpt:]
		}
	}
	m := digits[:1]
	if len(digits) > 1 {
		m += "." + digits[1:]
	}
	es := "+"
	if exp < 0 {
		es, exp = "-", -exp
	}
	xs := strconv.Itoa(exp)
	if len(xs) < 2 {
		xs = "0" + xs
	}
	return sign + m + "e" + es + xs
}
