package loadgen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// DefaultZipfS is the exponent of a key space written `:zipf` without one.
const DefaultZipfS = 1.1

// A Value is how an entry's value is chosen for each request: a fixed
// string, or a template with one key space in braces.
//
//	/orders                  always "/orders"
//	{1..100000}              "1" to "100000", uniformly
//	user-{1..100000}         "user-1" to "user-100000", uniformly
//	user-{1..100000:zipf}    Zipf-skewed with exponent DefaultZipfS: "user-1" most often
//	{0..999:zipf=1.5}        Zipf-skewed with exponent 1.5
//
// A key space {LO..HI} holds the integers LO through HI (0 <= LO <= HI). A
// Zipf-skewed one draws the k-th value (k = 0 for LO) with probability
// proportional to 1/(k+1)^s; s must be greater than 1 (math/rand/v2's
// Zipf). Text outside the braces is copied as is; a value may hold no more
// than one pair of braces, and a brace that does not open a key space is
// an error.
type Value struct {
	prefix, suffix string
	ranged         bool
	lo, hi         uint64
	zipfS          float64 // 0: uniform
}

// ParseValue parses a value template (see Value).
func ParseValue(s string) (Value, error) {
	open := strings.IndexByte(s, '{')
	if open < 0 {
		if strings.IndexByte(s, '}') >= 0 {
			return Value{}, fmt.Errorf("value %q: '}' without '{'", s)
		}
		return Value{prefix: s}, nil
	}
	end := strings.IndexByte(s[open:], '}')
	if end < 0 {
		return Value{}, fmt.Errorf("value %q: '{' without '}'", s)
	}
	end += open
	v := Value{prefix: s[:open], suffix: s[end+1:], ranged: true}
	if strings.ContainsAny(v.prefix, "{}") || strings.ContainsAny(v.suffix, "{}") {
		return Value{}, fmt.Errorf("value %q: at most one key space {LO..HI} per value", s)
	}
	space := s[open+1 : end]
	if i := strings.IndexByte(space, ':'); i >= 0 {
		dist := space[i+1:]
		space = space[:i]
		switch {
		case dist == "uniform":
		case dist == "zipf":
			v.zipfS = DefaultZipfS
		case strings.HasPrefix(dist, "zipf="):
			f, err := strconv.ParseFloat(dist[len("zipf="):], 64)
			if err != nil || !(f > 1) || f > 1e6 {
				return Value{}, fmt.Errorf("value %q: zipf exponent %q: want a number greater than 1", s, dist[len("zipf="):])
			}
			v.zipfS = f
		default:
			return Value{}, fmt.Errorf("value %q: distribution %q: want uniform, zipf or zipf=S", s, dist)
		}
	}
	los, his, ok := strings.Cut(space, "..")
	if !ok {
		return Value{}, fmt.Errorf("value %q: key space %q: want {LO..HI}", s, space)
	}
	var err error
	if v.lo, err = strconv.ParseUint(los, 10, 64); err != nil {
		return Value{}, fmt.Errorf("value %q: key space low end %q: want an integer >= 0", s, los)
	}
	if v.hi, err = strconv.ParseUint(his, 10, 64); err != nil {
		return Value{}, fmt.Errorf("value %q: key space high end %q: want an integer >= 0", s, his)
	}
	if v.hi < v.lo {
		return Value{}, fmt.Errorf("value %q: key space {%d..%d} is empty", s, v.lo, v.hi)
	}
	return v, nil
}

// Size is the number of distinct strings the value can take: 1 for a
// fixed value (at most 2^64-1 is reported for the widest key space).
func (v Value) Size() uint64 {
	if !v.ranged {
		return 1
	}
	n := v.hi - v.lo
	if n == ^uint64(0) {
		return n
	}
	return n + 1
}

// String returns the template v was parsed from, in canonical form.
func (v Value) String() string {
	if !v.ranged {
		return v.prefix
	}
	dist := ""
	if v.zipfS != 0 {
		dist = ":zipf=" + strconv.FormatFloat(v.zipfS, 'g', -1, 64)
	}
	return fmt.Sprintf("%s{%d..%d%s}%s", v.prefix, v.lo, v.hi, dist, v.suffix)
}

// drawer draws one Value's strings from a random source; it is not safe for
// concurrent use.
type drawer struct {
	v    Value
	r    *rand.Rand
	zipf *rand.Zipf
}

func (v Value) drawer(r *rand.Rand) *drawer {
	d := &drawer{v: v, r: r}
	if v.ranged && v.zipfS != 0 {
		d.zipf = rand.NewZipf(r, v.zipfS, 1, v.hi-v.lo)
	}
	return d
}

// n returns the next number of the key space (only for a ranged value).
func (d *drawer) n() uint64 {
	if d.zipf != nil {
		return d.v.lo + d.zipf.Uint64()
	}
	span := d.v.hi - d.v.lo
	if span == ^uint64(0) {
		return d.r.Uint64()
	}
	return d.v.lo + d.r.Uint64N(span+1)
}

func (d *drawer) next() string {
	if !d.v.ranged {
		return d.v.prefix
	}
	return d.v.prefix + strconv.FormatUint(d.n(), 10) + d.v.suffix
}
