package redis

import (
	_ "embed"
	"errors"
	"fmt"
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
)

// The scripts. settle decides and charges one request (or one slot's share
// of it); undo takes back a share's charges when another slot denied or
// failed. Both read the time and store states with state.lua.
var (
	settleScript = goredis.NewScript(bignumLua + stateLua + decideLua + settleLua)
	undoScript   = goredis.NewScript(bignumLua + stateLua + undoLua)
)

// argsPerCharge is how many ARGV settle.lua takes per key.
const argsPerCharge = 12

// settleArgs returns settle.lua's ARGV for charges[i], i in idx: now as hex
// ("" for Redis TIME), whether to set expiry, whether in try mode.
func settleArgs(now string, expire, try bool, charges []store.Charge, idx []int) []any {
	args := make([]any, 0, 3+argsPerCharge*len(idx))
	args = append(args, now, flag(expire), flag(try))
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

// hexNow is the injected now as settle.lua takes it: within [0, MaxTime],
// as Decide takes it.
func hexNow(now int64) string {
	return strconv.FormatInt(min(max(now, 0), algorithms.MaxTime), 16)
}

// settleReply is settle.lua's reply.
type settleReply struct {
	decisions string
	committed bool
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
	if !ok || len(a) < 2 {
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
	if len(a) > 2 {
		r.peeks = str(a[2])
		for i := 3; i+2 < len(a); i += 3 {
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
