package redis

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
)

// The settle script's replies are decoded by parseSettleReply and
// parseDecisions. A reply comes from Redis, which a daemon trusts no more
// than it must: whatever it holds, decoding returns decisions or an error,
// never panics, and never returns a decision the engine could not
// represent. Run longer with
//
//	go test -run '^$' -fuzz '^FuzzDecisions$' -fuzztime 30s ./internal/store/redis/

// formatDecision writes d as settle.lua does: code remaining reset retry
// delay, hexadecimal, separated by spaces.
func formatDecision(d algorithms.Decision) string {
	return fmt.Sprintf("%x %x %x %x %x", int64(d.Code), d.Remaining, int64(d.ResetAfter), int64(d.RetryAfter), int64(d.Delay))
}

// FuzzDecisions decodes arbitrary decision strings for n keys, and checks
// that well-formed ones decode to exactly what was written.
func FuzzDecisions(f *testing.F) {
	f.Add("0 5 3b9aca00 0 0", 1)
	f.Add("1 0 3b9aca00 1dcd6500 0,0 9 0 0 5f5e100", 2)
	f.Add("2 0 0 0 0", 1)
	f.Add("0 5 3b9aca00 0 0,", 1)
	f.Add("3 0 0 0 0", 1)
	f.Add("0 ffffffffffffffff 0 0 0", 1)
	f.Add("0 5 1 0", 1)
	f.Add("", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = min(max(n, 0), 64)
		idx := make([]int, n)
		for i := range idx {
			idx[i] = n - 1 - i // any order: decisions land where idx says
		}
		decisions := make([]algorithms.Decision, n)
		if err := parseDecisions(s, idx, decisions); err != nil {
			return
		}
		// parseDecisions accepts one trailing "," (settle.lua never
		// writes one); any other extra decision is an error.
		parts := strings.Split(strings.TrimSuffix(s, ","), ",")
		if n > 0 && len(parts) != n {
			t.Fatalf("%q for %d keys: accepted %d decisions", s, n, len(parts))
		}
		for j, d := range decisions {
			if d.Code > algorithms.OverCapacity || d.Remaining < 0 || d.ResetAfter < 0 || d.RetryAfter < 0 || d.Delay < 0 {
				t.Fatalf("%q: decision %d is %+v", s, j, d)
			}
		}
		// What decoded, written again, decodes to the same.
		var again []string
		for j := range n {
			again = append(again, formatDecision(decisions[idx[j]]))
		}
		round := make([]algorithms.Decision, n)
		if err := parseDecisions(strings.Join(again, ","), idx, round); err != nil {
			t.Fatalf("re-decoding %q: %v", again, err)
		}
		for j := range round {
			if round[j] != decisions[j] {
				t.Fatalf("%q: %+v re-decoded as %+v", s, decisions[j], round[j])
			}
		}
	})
}

// FuzzDecisionRoundTrip writes any representable decision as the script
// does and decodes it.
func FuzzDecisionRoundTrip(f *testing.F) {
	f.Add(uint8(0), int64(5), int64(time.Second), int64(0), int64(0))
	f.Add(uint8(1), int64(0), int64(time.Minute), int64(time.Second), int64(0))
	f.Add(uint8(2), int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, code uint8, remaining, reset, retry, delay int64) {
		d := algorithms.Decision{Code: algorithms.Code(code % 3), Remaining: abs(remaining),
			ResetAfter: time.Duration(abs(reset)), RetryAfter: time.Duration(abs(retry)), Delay: time.Duration(abs(delay))}
		got, err := parseDecision(formatDecision(d))
		if err != nil || got != d {
			t.Fatalf("%+v: decoded %+v, %v", d, got, err)
		}
	})
}

func abs(v int64) int64 {
	if v < 0 {
		v = -(v + 1) // no overflow at MinInt64
	}
	return v
}

// FuzzSettleReply decodes replies shaped as go-redis returns a Lua table:
// a []any of strings, here from a fuzzed string split at "|", with an
// element of another type when asked. A reply is the request's own
// ("committed, paths, ':' and the decisions") and, in try mode, the peeks
// and a (key index, old, new) triple per write. Decoding must return an
// error or a reply, never panic, and every write must come from a whole
// triple of strings.
func FuzzSettleReply(f *testing.F) {
	f.Add("1f:0 5 3b9aca00 0 0", false)
	f.Add("1f:0 5 3b9aca00 0 0|0 4 3b9aca00 0 0|1|old|new", false)
	f.Add("1fb:0 5 3b9aca00 0 0,1 0 0 3b9aca00 0|0 5 3b9aca00 0 0|x|1|a", false)
	f.Add("0b:1 0 0 3b9aca00 0|p|q|r|s", false)
	f.Add("a", false)
	f.Add("1f:0 5 3b9aca00 0 0|0 5 3b9aca00 0 0", true)
	f.Fuzz(func(t *testing.T, s string, other bool) {
		var reply []any
		for _, p := range strings.Split(s, "|") {
			reply = append(reply, p)
		}
		if other {
			reply = append(reply, int64(7)) // go-redis gives integers as int64
		}
		r, err := parseSettleReply(reply)
		if other && (len(reply) == 2 || (len(reply) > 2 && (len(reply)-2)%3 == 0)) && err == nil {
			// the integer is the peeks or part of a write: it must be reported
			t.Fatalf("%q with an integer: no error", reply)
		}
		if err != nil {
			return
		}
		if want := max(0, (len(reply)-2)/3); len(r.writes) != want {
			t.Fatalf("%q: %d writes, want %d", reply, len(r.writes), want)
		}
	})
}
