package redis

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

var (
	//go:embed bignum.lua
	bignumLua string
	//go:embed state.lua
	stateLua string
	//go:embed decide.lua
	decideLua string
	//go:embed settle.lua
	settleLua string
	//go:embed undo.lua
	undoLua string
	//go:embed fast.lua
	fastLua string
	//go:embed now.lua
	nowLua string
)

// bignumsLua is the bignums library: bignum.lua, state.lua and decide.lua
// inside a function, bignums(), that builds them the first time a script
// calls it and returns what the scripts use. A script's body runs whole on
// every call, and Redis's Lua spends most of a call on creating the
// functions a script defines: the library's are made only for a charge
// that takes the bignum path.
var bignumsLua = "local bignumsLib\nlocal function bignums()\nif bignumsLib then return bignumsLib end\n" +
	bignumLua + stateLua + decideLua +
	"\nbignumsLib = {fromhex = fromhex, tohex = tohex, ZERO = ZERO, newLimit = newLimit, decide = decideAny, apply = apply, refundAt = refundAt, " +
	"bigNow = bigNow, parseState = parseState, restAtOf = restAtOf, formatState = formatState, formatDecision = formatDecision, put = put, " +
	"small = small, add = add, mul = mul, divmod = divmod, num = num}\n" +
	"return bignumsLib\nend\n"

// The scripts. settle decides and charges one request (or one slot's share
// of it); undo takes back a share's charges when another slot denied or
// failed. Both read the time with now.lua; settle decides on fast.lua's
// plain numbers where they fit, on the bignums library otherwise.
var (
	settleScript = goredis.NewScript(nowLua + bignumsLua + fastLua + settleLua)
	undoScript   = goredis.NewScript(nowLua + bignumsLua + undoLua)
)

// argsPerCharge is how many ARGV settle.lua takes per key.
const argsPerCharge = 1

// settleHead returns the start of settle.lua's ARGV: now as nowArgs makes
// it, the store's linger, whether in try mode. The requests' arguments
// (appendRequest) follow.
func (s *Store) settleHead(now [2]string, try bool, requests int) []any {
	return append(make([]any, 0, 4+requests*(1+argsPerCharge)), now[0], now[1], s.linger, flag(try))
}

// appendRequest appends settle.lua's arguments for the request of
// charges[i], i in idx: their number (followed, when one of them is a
// quota's, by each one's store.Charge.Quota: see settle.lua), then each
// charge as one string (see settle.lua), taken from specs; counters[i]
// says that charges[i] is kept as a counter (nil: none is).
func appendRequest(args []any, specs *chargeSpecs, charges []store.Charge, idx []int, counters []bool) []any {
	switch {
	case hasQuota(charges, idx):
		b := strconv.AppendInt(make([]byte, 0, 8+4*len(idx)), int64(len(idx)), 10)
		for _, i := range idx {
			q := charges[i].Quota
			if charges[i].Shadow {
				q = 0
			}
			b = strconv.AppendUint(append(b, ' '), uint64(q), 10)
		}
		args = append(args, string(b))
	case len(idx) < len(counts):
		args = append(args, counts[len(idx)])
	default:
		args = append(args, strconv.Itoa(len(idx)))
	}
	for _, i := range idx {
		args = append(args, specs.of(&charges[i], counters != nil && counters[i]))
	}
	return args
}

// hasQuota reports whether a charge among charges[i], i in idx, is a
// quota's (store.Charge.Quota, not a shadow charge).
func hasQuota(charges []store.Charge, idx []int) bool {
	for _, i := range idx {
		if charges[i].Quota != 0 && !charges[i].Shadow {
			return true
		}
	}
	return false
}

// counts are the request sizes as settle.lua takes them, made once.
var counts = func() []any {
	c := make([]any, 65)
	for n := range c {
		c[n] = strconv.Itoa(n)
	}
	return c
}()

// chargeSpecs are the charge strings settle.lua takes, made once per
// limit, cost and shadow flag and kept (as arguments ready for go-redis):
// a store sees few distinct ones, its policy's limits at a cost of 1, and
// formatting one costs more than the rest of sending it. At most
// maxChargeSpecs are kept; beyond, the cache starts over.
type chargeSpecs struct {
	m sync.Map // chargeSpecKey → any (a string)
	n atomic.Int64
}

const maxChargeSpecs = 4096

type chargeSpecKey struct {
	limit   algorithms.Limit
	cost    int64
	kind    algorithms.Kind
	shadow  bool
	probe   bool
	counter bool
}

// of returns the charge string of c, kept as a counter when counter.
func (cs *chargeSpecs) of(c *store.Charge, counter bool) any {
	if chargedAt(c) {
		return formatCharge(c, counter) // one refund's: not kept
	}
	k := chargeSpecKey{*c.Limit, c.Cost, c.Kind, c.Shadow, c.Probe, counter}
	if v, ok := cs.m.Load(k); ok {
		return v
	}
	v := any(formatCharge(c, counter))
	if cs.n.Add(1) > maxChargeSpecs {
		cs.m.Clear()
		cs.n.Store(1)
	}
	cs.m.Store(k, v)
	return v
}

// formatCharge returns c as one settle.lua charge string; counter marks a
// charge kept as a counter (isCounter), which always takes fast.lua's path.
func formatCharge(c *store.Charge, counter bool) string {
	l := c.Limit
	capacity := l.Capacity()
	kind := c.Kind
	if kind > algorithms.Refund {
		kind = algorithms.Admit // as store.Charge.Decide takes it
	}
	cost := scriptCost(c, kind)
	b := make([]byte, 0, 128)
	b = append(b, '0', '0'+byte(l.Algorithm()), ' ')
	b = strconv.AppendInt(b, l.Requests(), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(l.Period()), 16)
	b = append(b, ' ')
	b = strconv.AppendInt(b, capacity, 10)
	b = append(b, ' ')
	switch {
	case c.Probe:
		b = append(b, '2') // a probe: shadow, never written
	default:
		b = append(b, flag(c.Shadow)...)
	}
	b = append(b, '0'+byte(kind), ' ')
	b = strconv.AppendInt(b, cost, 10)
	fast := fastPath(l)
	switch l.Algorithm() {
	case algorithms.TokenBucket, algorithms.LeakyBucket, algorithms.LeakyBucketQueue:
		var fits bool
		b, fits = appendBucketTimes(b, c, kind, cost)
		fast = fast && fits
	}
	if chargedAt(c) {
		at := nowArgs(c.ChargedAt)
		b = append(append(append(append(b, " @"...), at[0]...), ' '), at[1]...)
	}
	switch {
	case counter:
		b[0] = '3'
	case fast:
		b[0] = '1'
	}
	return string(b)
}

// chargedAt reports whether c is a refund that names when its units were
// charged (store.Charge.ChargedAt), which the script then refunds as
// algorithms.Limit.RefundAt does.
func chargedAt(c *store.Charge) bool {
	return c.Kind == algorithms.Refund && c.ChargedAt != 0
}

// scriptCost returns the cost settle.lua is passed for c, of kind: in a
// range that Lua's doubles hold exactly, with the same decisions. For an
// admit, a cost above Capacity is OverCapacity whatever it is, and one at
// most 0 a peek; a check decides a cost of 1. A window's overdraft
// saturates its count at MaxCount, and a refund takes at most its two
// counts; the buckets take the size of an overdraft or refund from k
// (appendBucketTimes), and only whether it is within Capacity from the
// cost.
func scriptCost(c *store.Charge, kind algorithms.Kind) int64 {
	l := c.Limit
	switch {
	case kind == algorithms.Check:
		return 1
	case kind == algorithms.Overdraft && l.Burst() == 0:
		return min(max(c.Cost, 0), algorithms.MaxCount)
	case kind == algorithms.Refund && l.Burst() == 0:
		return min(max(c.Cost, 0), 2*algorithms.MaxCount)
	}
	return min(max(c.Cost, 0), l.Capacity()+1)
}

// appendBucketTimes appends a bucket's C, k and a (and a1, for an
// overdraft, a refund or a check: see decide.lua) of the charge c, of kind
// and script cost, and reports whether they fit fast.lua's path.
func appendBucketTimes(b []byte, c *store.Charge, kind algorithms.Kind, cost int64) ([]byte, bool) {
	l := c.Limit
	capacity := l.Capacity()
	k := min(cost, capacity) // a cost outside [1, Capacity] uses neither k nor a
	fits := true
	rational := func(ns, frac int64) { b = appendRational(b, ns, frac) }
	rational(l.Times(capacity))
	if kind == algorithms.Overdraft || kind == algorithms.Refund {
		// k of the whole cost, saturated at MaxSpan: d + k is bounded
		// there (Limit.Overdraft). fast.lua keeps d + k below 2^52.
		ns, frac := l.TimesSaturated(max(c.Cost, 0))
		fits = ns < 1<<50
		rational(ns, frac)
	} else {
		rational(l.Times(k))
	}
	rational(l.Times(capacity - k))
	switch kind {
	case algorithms.Overdraft, algorithms.Refund:
		rational(l.Times(capacity - 1))
	case algorithms.Check:
		rational(l.Times(capacity - k)) // a1 = a, for a cost of 1
	}
	return b, fits
}

// fastPath reports whether settle.lua may decide l on plain Lua numbers
// (fast.lua), as its header says: a period below 2^49 ns; for the windows,
// a period of whole milliseconds or below 9·10^9 ns; for sliding_window and
// the buckets, Capacity·Period below 2^52; for the buckets, Requests at
// most Period in ns (one request a nanosecond). The script still takes the
// bignum path for a state that does not fit. A concurrency always takes
// this path, every state of it included (fast.lua's concurrency.go
// section): NewLimit bounds its lease by algorithms.MaxLease, below 2^49
// ns, and the bignum path does not decide it.
func fastPath(l *algorithms.Limit) bool {
	p := int64(l.Period())
	if p >= 1<<49 {
		return false
	}
	window := p%1_000_000 == 0 || p < 9_000_000_000
	hi, lo := bits.Mul64(uint64(l.Capacity()), uint64(p))
	products := hi == 0 && lo < 1<<52
	switch l.Algorithm() {
	case algorithms.FixedWindow:
		return window
	case algorithms.SlidingWindow:
		return window && products
	case algorithms.Concurrency:
		return true
	default:
		// R ≤ P keeps a debt, (d-C)·R/P for a backlog d below 2^52 ns,
		// below 2^52 (fast.lua's fastGcraRemaining).
		return products && l.Requests() <= p
	}
}

// isCounter reports whether a charge on l whose store.Charge.Counter is set
// is kept as a counter under envoyproxy/ratelimit's key (counterKey): when l
// is a fixed window whose period is a whole number of seconds and takes
// fast.lua's path (shorter than 2^49 ns, about 6.5 days: a second, minute,
// hour or day; a week, month or year keep ratelimitd's own keys).
func isCounter(l *algorithms.Limit) bool {
	p := int64(l.Period())
	return l.Algorithm() == algorithms.FixedWindow && p%int64(time.Second) == 0 && fastPath(l)
}

// appendRational appends ns + frac/R (Limit.Times) as settle.lua takes
// it: " " and whole nanoseconds in hexadecimal, " " and the remainder over
// R in decimal.
func appendRational(b []byte, ns, frac int64) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, ns, 16)
	b = append(b, ' ')
	return strconv.AppendInt(b, frac, 10)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// redisTime is now as the scripts take it to read Redis TIME.
var redisTime = [2]string{"", ""}

// nowArgs is an injected now as the scripts take it: within [0, MaxTime],
// as Decide takes it, in milliseconds and the nanoseconds beyond them.
func nowArgs(now int64) [2]string {
	now = algorithms.ClampTime(now)
	return [2]string{strconv.FormatInt(now/1e6, 10), strconv.FormatInt(now%1e6, 10)}
}

// settleReply is one request's part of settle.lua's reply, as go-redis
// returns it.
type settleReply struct {
	committed bool
	// at is the instant the script decided at (Redis TIME, or the
	// store's clock's now), in ns: algorithms.Decision.At.
	at int64
	// decisions holds the request's decisions, per key five int64 (fast.lua's
	// path) or one string (the bignums'): decodeDecisions decodes them.
	decisions []any
	// try mode, committed: the decisions had the request been denied (as
	// decisions), and per key written its index in the share, old and new
	// value.
	peeks  []any
	writes []write
}

type write struct {
	index    int
	old, new string
}

// decisionsLen returns how many elements of a, from its first, hold the
// decisions of keys keys (see settleReply.decisions).
func decisionsLen(a []any, keys int) (int, error) {
	i := 0
	for range keys {
		if i >= len(a) {
			return 0, fmt.Errorf("settle script: reply ends before the decisions of %d keys", keys)
		}
		if _, ok := a[i].(string); ok {
			i++
		} else {
			i += 5
		}
	}
	if i > len(a) {
		return 0, fmt.Errorf("settle script: reply ends within the decisions of %d keys", keys)
	}
	return i, nil
}

// splitNow returns the instant that ends a settle reply a (two integers,
// milliseconds and the nanoseconds beyond them), in ns, and the rest of a.
func splitNow(a []any) (int64, []any, error) {
	if len(a) < 2 {
		return 0, nil, errors.New("settle script: reply ends before its instant")
	}
	ms, ok1 := a[len(a)-2].(int64)
	sub, ok2 := a[len(a)-1].(int64)
	if !ok1 || !ok2 || ms < 0 || ms > algorithms.MaxTime/1e6 || sub < 0 || sub >= 1e6 {
		return 0, nil, fmt.Errorf("settle script: bad instant %v %v", a[len(a)-2], a[len(a)-1])
	}
	return algorithms.ClampTime(ms*1e6 + sub), a[:len(a)-2], nil
}

// nextRequest parses from a the reply of one request of keys keys (not its
// try-mode part), and returns it and the rest of a.
func nextRequest(a []any, keys int) (settleReply, []any, error) {
	if len(a) == 0 {
		return settleReply{}, nil, errors.New("settle script: reply ends before a request's")
	}
	committed, ok := a[0].(int64)
	if !ok || committed < 0 || committed > 1 {
		return settleReply{}, nil, fmt.Errorf("settle script: unexpected committed flag %v", a[0])
	}
	n, err := decisionsLen(a[1:], keys)
	if err != nil {
		return settleReply{}, nil, err
	}
	return settleReply{committed: committed == 1, decisions: a[1 : 1+n]}, a[1+n:], nil
}

// parseSettleReplies parses the reply of a script that settled requests of
// keys[i] keys each (not in try mode).
func parseSettleReplies(v any, keys []int) ([]settleReply, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("settle script: unexpected reply %T", v)
	}
	at, a, err := splitNow(a)
	if err != nil {
		return nil, err
	}
	r := make([]settleReply, len(keys))
	for i, k := range keys {
		if r[i], a, err = nextRequest(a, k); err != nil {
			return nil, err
		}
		r[i].at = at
	}
	if len(a) > 0 {
		return nil, fmt.Errorf("settle script: %d elements after the last request's reply", len(a))
	}
	return r, nil
}

// parseSettleReply parses the reply of a script that settled one request
// of keys keys in try mode.
func parseSettleReply(v any, keys int) (settleReply, error) {
	a, ok := v.([]any)
	if !ok {
		return settleReply{}, fmt.Errorf("settle script: unexpected reply %T", v)
	}
	at, a, err := splitNow(a)
	if err != nil {
		return settleReply{}, err
	}
	r, a, err := nextRequest(a, keys)
	r.at = at
	if err != nil || !r.committed {
		if err == nil && len(a) > 0 {
			err = errors.New("settle script: elements after a denied share's reply")
		}
		return r, err
	}
	n, err := decisionsLen(a, keys)
	if err != nil {
		return r, err
	}
	r.peeks, a = a[:n], a[n:]
	if len(a)%3 != 0 {
		return r, fmt.Errorf("settle script: %d elements of writes, not triples", len(a))
	}
	for ; len(a) > 0; a = a[3:] {
		idx, ok1 := a[0].(int64)
		old, ok2 := a[1].(string)
		new, ok3 := a[2].(string)
		if !ok1 || !ok2 || !ok3 || idx < 1 || idx > int64(keys) {
			return r, fmt.Errorf("settle script: bad write %v", a[:3])
		}
		r.writes = append(r.writes, write{index: int(idx) - 1, old: old, new: new})
	}
	return r, nil
}

// decodeDecisions writes the decisions elems holds (settleReply.decisions,
// one per element of idx), decided at the instant at (Decision.At), into
// decisions[idx[j]], and returns how many
// were decided on fast.lua's path.
func decodeDecisions(elems []any, idx []int, decisions []algorithms.Decision, at int64) (fast int, err error) {
	defer func() {
		for _, i := range idx {
			decisions[i].At = at
		}
	}()
	for _, i := range idx {
		if len(elems) == 0 {
			return fast, errors.New("settle script: fewer decisions than keys")
		}
		if s, ok := elems[0].(string); ok {
			if decisions[i], err = parseDecision(s); err != nil {
				return fast, err
			}
			elems = elems[1:]
			continue
		}
		if len(elems) < 5 {
			return fast, errors.New("settle script: a decision of fewer than five integers")
		}
		var f [5]int64
		for k := range f {
			v, ok := elems[k].(int64)
			// Remaining is minus the Debt when the bucket owes.
			if !ok || v < 0 && (k != 1 || v == math.MinInt64) {
				return fast, fmt.Errorf("settle script: bad decision field %v", elems[k])
			}
			f[k] = v
		}
		if f[0] > int64(algorithms.OverCapacity) {
			return fast, fmt.Errorf("settle script: bad decision code %d", f[0])
		}
		decisions[i] = algorithms.Decision{
			Code:       algorithms.Code(f[0]),
			Remaining:  max(f[1], 0),
			Debt:       max(-f[1], 0),
			ResetAfter: time.Duration(f[2]),
			RetryAfter: time.Duration(f[3]),
			Delay:      time.Duration(f[4]),
		}
		elems = elems[5:]
		fast++
	}
	if len(elems) > 0 {
		return fast, errors.New("settle script: more decisions than keys")
	}
	return fast, nil
}

// parseDecision parses a decision of the bignum path: "code remaining
// reset retry delay", hexadecimal, remaining "-" and the debt when the
// bucket owes.
func parseDecision(s string) (algorithms.Decision, error) {
	var f [5]int64
	var debt int64
	for k := range f {
		var field string
		var ok bool
		field, s, ok = strings.Cut(s, " ")
		if ok != (k < len(f)-1) {
			return algorithms.Decision{}, fmt.Errorf("settle script: bad decision %q", s)
		}
		owes := false
		if k == 1 {
			field, owes = strings.CutPrefix(field, "-")
		}
		v, err := strconv.ParseUint(field, 16, 63)
		if err != nil {
			return algorithms.Decision{}, fmt.Errorf("settle script: bad decision field %q: %v", field, err)
		}
		if owes {
			debt, v = int64(v), 0
		}
		f[k] = int64(v)
	}
	if f[0] > int64(algorithms.OverCapacity) {
		return algorithms.Decision{}, fmt.Errorf("settle script: bad decision code %d", f[0])
	}
	return algorithms.Decision{
		Code:       algorithms.Code(f[0]),
		Remaining:  f[1],
		Debt:       debt,
		ResetAfter: time.Duration(f[2]),
		RetryAfter: time.Duration(f[3]),
		Delay:      time.Duration(f[4]),
	}, nil
}
