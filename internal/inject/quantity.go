package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Decoding a pod parses every resource quantity in it
// (k8s.io/apimachinery's ParseQuantity), whose cost grows with the number's
// digits and its decimal exponent: "1e-3000000" takes about 0.3 s, and an
// exponent just past 2^31 ("1e2147483648") never ends. A webhook answers
// within the API server's timeout (5 s here) and must not spin a CPU on one
// request, so quantity-like values past these bounds are refused before the
// pod is decoded. No real quantity comes near them: the largest a
// Kubernetes quantity holds is about 9.2e18.
const (
	// maxQuantityDigits bounds the digits of a number in the pod.
	maxQuantityDigits = 64
	// maxExponentDigits bounds the digits of a decimal exponent (after
	// leading zeros): at most 9999.
	maxExponentDigits = 4
)

// costlyQuantity returns the first value in the JSON text raw, a string or
// a number, that a quantity parser would take too long on (see
// maxQuantityDigits), and whether there is one. Any value, not only the
// fields that are quantities: the pod is not decoded yet, and a false
// alarm only needs a number of more than 64 digits or an exponent past
// 9999 in a string.
func costlyQuantity(raw []byte) (string, bool) {
	if !mayHoldCostlyNumber(raw) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			// io.EOF ends a valid text; a broken one is for the decoder
			// to reject.
			return "", false
		}
		var s string
		switch v := tok.(type) {
		case string:
			s = v
		case json.Number:
			s = string(v)
		default:
			continue
		}
		if quantityTooCostly(s) {
			return s, true
		}
	}
}

// quantityTooCostly reports whether s starts like a number (an optional
// sign, then digits and at most one point) whose digits exceed
// maxQuantityDigits, or continues with a decimal exponent ("e" or "E", an
// optional sign, digits) of more than maxExponentDigits digits.
func quantityTooCostly(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits, point := 0, false
mantissa:
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			break mantissa
		}
	}
	if digits == 0 {
		return false
	}
	if digits > maxQuantityDigits {
		return true
	}
	if i >= len(s) || s[i] != 'e' && s[i] != 'E' {
		return false
	}
	exp := s[i+1:]
	if exp != "" && (exp[0] == '+' || exp[0] == '-') {
		exp = exp[1:]
	}
	if exp == "" || strings.Trim(exp, "0123456789") != "" {
		return false // not a decimal exponent, so not a quantity's
	}
	return len(strings.TrimLeft(exp, "0")) > maxExponentDigits
}

// mayHoldCostlyNumber is costlyQuantity's quick look at the text: false
// when it has no run of more than maxQuantityDigits digits, no "e" or "E"
// followed by more than maxExponentDigits digits (signs and points aside),
// and no escape sequence that could spell either.
func mayHoldCostlyNumber(raw []byte) bool {
	if bytes.Contains(raw, []byte(`\u`)) {
		return true
	}
	run, exp := 0, -1 // digits in the current run; in an exponent (-1: none)
	for i, c := range raw {
		switch {
		case c >= '0' && c <= '9':
			run++
			if exp >= 0 {
				exp++
			}
			if run > maxQuantityDigits || exp > maxExponentDigits {
				return true
			}
		case c == '.':
			exp = -1
		case (c == '+' || c == '-') && i > 0 && (raw[i-1] == 'e' || raw[i-1] == 'E'):
		case c == 'e' || c == 'E':
			run, exp = 0, 0
		default:
			run, exp = 0, -1
		}
	}
	return false
}

// errCostlyQuantity explains a refusal by costlyQuantity.
func errCostlyQuantity(v string) error {
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return fmt.Errorf("the pod holds %q, a number too long or an exponent too large to parse as a resource quantity in bounded time (at most %d digits, exponents up to %d digits)",
		v, maxQuantityDigits, maxExponentDigits)
}
