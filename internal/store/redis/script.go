package redis

import (
	_ "embed"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
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
	"\nbignumsLib = {fromhex = fromhex, tohex = tohex, ZERO = ZERO, newLimit = newLimit, decide = decide, " +
	"bigNow = bigNow, parseState = parseState, restAtOf = restAtOf, formatState = formatState, put = put}\n" +
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
const argsPerCharge = 13

// settleArgs returns settle.lua's ARGV for charges[i], i in idx: now as
// nowArgs makes it, whether to set expiry, whether in try mode.
func settleArgs(now [2]string, expire, try bool, charges []store.Charge, idx []int) []any {
	args := make([]any, 0, 4+argsPerCharge*len(idx))
	args = append(args, now[0], now[1], flag(expire), flag(try))
	for _, i := range idx {
		c := &charges[i]
		l := c.Limit
		capacity := l.Capacity()
		// The decisions for a cost above Capacity are all OverCapacity,
		// and for a cost at most 0 all peeks: pass those costs in a range
		// that Lua's doubles hold exactly.
		cost := min(max(c.Cost, 0), capacity+1)
		args = append(args,
			strconv.Itoa(int(l.Algorithm())),
			strconv.FormatInt(l.Requests(), 10),
			strconv.FormatInt(int64(l.Period()), 16),
			strconv.FormatInt(capacity, 10),
			strconv.FormatInt(cost, 10),
			flag(c.Shadow),
			flag(fastPath(l)),
		)
		switch l.Algorithm() {
		case algorithms.TokenBucket, algorithms.LeakyBucket, algorithms.LeakyBucketQueue:
			k := min(cost, capacity) // a cost outside [1, Capacity] uses neither k nor a
			args = appendRational(args, l, capacity)
			args = appendRational(args, l, k)
			args = appendRational(args, l, capacity-k)
		default:
			args = append(args, "0", "0", "0", "0", "0", "0")
		}
	}
	return args
}

// fastPath reports whether settle.lua may decide l on plain Lua numbers
// (fast.lua), as its header says: a period below 2^49 ns; for the windows,
// a period of whole milliseconds or below 9·10^9 ns; for sliding_window and
// the buckets, Capacity·Period below 2^52. The script still takes the
// bignum path for a state that does not fit.
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
	default:
		return products
	}
}

// appendRational appends n·P/R (0 ≤ n ≤ Capacity), Limit.Times, as
// settle.lua takes it: whole nanoseconds in hexadecimal and the remainder
// over R in decimal.
func appendRational(args []any, l *algorithms.Limit, n int64) []any {
	ns, frac := l.Times(n)
	return append(args, strconv.FormatInt(ns, 16), strconv.FormatInt(frac, 10))
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
	now = min(max(now, 0), algorithms.MaxTime)
	return [2]string{strconv.FormatInt(now/1e6, 10), strconv.FormatInt(now%1e6, 10)}
}

// settleReply is settle.lua's reply.
type settleReply struct {
	decisions string
	committed bool
	paths     string // per key, "f" (fast.lua) or "b" (bignums)
	// try mode, committed: the decisions had the request been denied, and
	// per key written its index in the share, old and new value.
	peeks  string
	writes []write
}

type write struct {
	index    int
	old, new string
}

func parseSettleReply(v any) (settleReply, error) {
	var r settleReply
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return r, fmt.Errorf("settle script: unexpected reply %T", v)
	}
	var err error
	str := func(x any) string {
		s, ok := x.(string)
		if !ok && err == nil {
			err = fmt.Errorf("settle script: unexpected reply element %T", x)
		}
		return s
	}
	r.decisions = str(a[0])
	r.committed = str(a[1]) == "1"
	r.paths = str(a[2])
	if len(a) > 3 {
		r.peeks = str(a[3])
		for i := 4; i+2 < len(a); i += 3 {
			idx, e := strconv.Atoi(str(a[i]))
			if e != nil && err == nil {
				err = fmt.Errorf("settle script: bad key index: %v", e)
			}
			r.writes = append(r.writes, write{index: idx - 1, old: str(a[i+1]), new: str(a[i+2])})
		}
	}
	return r, err
}

// parseDecisions writes the decisions of s ("code remaining reset retry
// delay" per key, hexadecimal, joined by ",") into decisions[idx[j]].
func parseDecisions(s string, idx []int, decisions []algorithms.Decision) error {
	for j, i := range idx {
		var one string
		one, s, _ = strings.Cut(s, ",")
		d, err := parseDecision(one)
		if err != nil {
			return err
		}
		decisions[i] = d
		if j == len(idx)-1 && s != "" {
			return errors.New("settle script: more decisions than keys")
		}
	}
	return nil
}

func parseDecision(s string) (algorithms.Decision, error) {
	var f [5]int64
	for k := range f {
		var field string
		var ok bool
		field, s, ok = strings.Cut(s, " ")
		if ok != (k < len(f)-1) {
			return algorithms.Decision{}, fmt.Errorf("settle script: bad decision %q", s)
		}
		v, err := strconv.ParseUint(field, 16, 63)
		if err != nil {
			return algorithms.Decision{}, fmt.Errorf("settle script: bad decision field %q: %v", field, err)
		}
		f[k] = int64(v)
	}
	if f[0] > int64(algorithms.OverCapacity) {
		return algorithms.Decision{}, fmt.Errorf("settle script: bad decision code %d", f[0])
	}
	return algorithms.Decision{
		Code:       algorithms.Code(f[0]),
		Remaining:  f[1],
		ResetAfter: time.Duration(f[2]),
		RetryAfter: time.Duration(f[3]),
		Delay:      time.Duration(f[4]),
	}, nil
}
