package redis

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// The settle script's replies are decoded by parseSettleReplies,
// parseSettleReply and decodeDecisions. A reply comes from Redis, which a
// daemon trusts no more than it must: whatever it holds, decoding returns
// decisions or an error, never panics, and never returns a decision the
// engine could not represent. Run longer with
//
//	go test -run '^$' -fuzz '^FuzzDecisions$' -fuzztime 30s ./internal/store/redis/

// formatDecision writes d as settle.lua's bignum path does: code remaining
// reset retry delay, hexadecimal, separated by spaces.
func formatDecision(d algorithms.Decision) string {
	// Remaining, or minus the Debt: "-" and hexadecimal.
	return fmt.Sprintf("%x %x %x %x %x", int64(d.Code), d.Remaining-d.Debt, int64(d.ResetAfter), int64(d.RetryAfter), int64(d.Delay))
}

// replyOf makes a reply shaped as go-redis returns a Lua table: a []any of
// the elements of s split at "|", each an int64 where it parses as one
// (Redis writes Lua numbers as integers) and a string otherwise.
func replyOf(s string) []any {
	var a []any
	for _, p := range strings.Split(s, "|") {
		if v, err := strconv.ParseInt(p, 10, 64); err == nil {
			a = append(a, v)
		} else {
			a = append(a, p)
		}
	}
	return a
}

// FuzzDecisions decodes arbitrary decision elements for n keys, and checks
// that what decodes is representable and, encoded again as the script
// would (the fast path's five integers), decodes to the same.
func FuzzDecisions(f *testing.F) {
	f.Add("0|5|1000000000|0|0", 1)
	f.Add("1|0|1000000000|500000000|0|0 9 0 0 5f5e100", 2)
	f.Add("2|0|0|0|0", 1)
	f.Add("0|5|1000000000|0|0|7", 1)
	f.Add("3|0|0|0|0", 1)
	f.Add("0|-5|0|0|0", 1)
	f.Add("1|-9223372036854775807|0|0|0", 1)
	f.Add("1|-9223372036854775808|0|0|0", 1)
	f.Add("1 -5 3b9aca00 0 0", 1)
	f.Add("1 -7fffffffffffffff 0 0 0", 1)
	f.Add("1 --5 0 0 0", 1)
	f.Add("1 5 -3b9aca00 0 0", 1)
	f.Add("0 ffffffffffffffff 0 0 0", 1)
	f.Add("0 5 1 0", 1)
	f.Add("0|5", 1)
	f.Add("", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = min(max(n, 0), 64)
		idx := make([]int, n)
		for i := range idx {
			idx[i] = n - 1 - i // any order: decisions land where idx says
		}
		elems := replyOf(s)
		decisions := make([]algorithms.Decision, n)
		fast, err := decodeDecisions(elems, idx, decisions, 0)
		if err != nil {
			return
		}
		if l, err := decisionsLen(elems, n); err != nil || l != len(elems) {
			t.Fatalf("%q: decoded as %d decisions, but decisionsLen says %d, %v", s, n, l, err)
		}
		if fast < 0 || fast > n {
			t.Fatalf("%q: %d fast decisions of %d", s, fast, n)
		}
		var again []any
		for _, d := range decisions {
			if d.Code > algorithms.OverCapacity || d.Remaining < 0 || d.Debt < 0 || d.Remaining > 0 && d.Debt > 0 || d.ResetAfter < 0 || d.RetryAfter < 0 || d.Delay < 0 {
				t.Fatalf("%q: decision %+v", s, d)
			}
		}
		for _, i := range idx {
			d := decisions[i]
			again = append(again, int64(d.Code), d.Remaining-d.Debt, int64(d.ResetAfter), int64(d.RetryAfter), int64(d.Delay))
		}
		round := make([]algorithms.Decision, n)
		if _, err := decodeDecisions(again, idx, round, 0); err != nil {
			t.Fatalf("re-decoding %v: %v", again, err)
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
	f.Add(uint8(1), int64(-3), int64(time.Minute), int64(time.Second), int64(0))
	f.Add(uint8(1), int64(math.MinInt64), int64(time.Minute), int64(time.Second), int64(0))
	f.Fuzz(func(t *testing.T, code uint8, remaining, reset, retry, delay int64) {
		// A negative remaining stands for a debt.
		d := algorithms.Decision{Code: algorithms.Code(code % 3), Remaining: max(remaining, 0), Debt: abs(min(remaining, 0)),
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

// FuzzSettleReply decodes arbitrary replies (see replyOf) of a try-mode
// share of keys keys and of a batch of requests of keys keys each.
// Decoding must return an error or replies, never panic; every write must
// name a key of the share, and the requests' decisions must be exactly the
// elements between their committed flags, the reply's last two elements
// being the instant the script decided at.
func FuzzSettleReply(f *testing.F) {
	f.Add("1|0|5|1000000000|0|0", 1)
	f.Add("1|0|5|1000000000|0|0|0|4|1000000000|0|0|1|old|new", 1)
	f.Add("1|0|5|1000000000|0|0|1 0 0 3b9aca00 0|0|5|1000000000|0|0|1 0 0 3b9aca00 0|2|a|b", 2)
	f.Add("0|1 0 0 3b9aca00 0|p|q|r", 1)
	f.Add("1|0|5|1000000000|0|0|0|5|1000000000|0|0|3|a|b", 1)
	f.Add("a", 1)
	f.Add("1|0|5|1000000000|0|0|1|1|0|0|1000|0", 1)
	// As the script replies: the requests, then the instant it decided at.
	f.Add("1|0|5|1000000000|0|0|1764331200000|123456", 1)
	f.Add("1|0|5|1000000000|0|0|1 0 0 3b9aca00 0|0|5|1000000000|0|0|1 0 0 3b9aca00 0|2|a|b|1764331200000|0", 2)
	f.Fuzz(func(t *testing.T, s string, keys int) {
		keys = min(max(keys, 0), 16)
		reply := replyOf(s)
		if r, err := parseSettleReply(reply, keys); err == nil {
			for _, w := range r.writes {
				if w.index < 0 || w.index >= keys {
					t.Fatalf("%q: write %+v outside %d keys", s, w, keys)
				}
			}
			if !r.committed && (len(r.peeks) > 0 || len(r.writes) > 0) {
				t.Fatalf("%q: a denied share with peeks or writes", s)
			}
		}
		for _, requests := range []int{1, 2, 3} {
			counts := make([]int, requests)
			for i := range counts {
				counts[i] = keys
			}
			rs, err := parseSettleReplies(reply, counts)
			if err != nil {
				continue
			}
			total := 0
			for _, r := range rs {
				total += 1 + len(r.decisions)
			}
			if total+2 != len(reply) { // and the instant's two
				t.Fatalf("%q as %d requests: %d elements and the instant's 2 accounted for, %d in the reply", s, requests, total, len(reply))
			}
		}
	})
}
