// Package quota divides a limit's rate among the clients that enforce it
// themselves (Envoy's rate_limit_quota filter, the Go client's quota
// mode): each client reports its demand every report interval, and gets an
// assignment — a share of the limit's requests per period, a burst and a
// time to live — that it enforces locally until the next.
//
// # Shares
//
// A bucket has a limit of L requests per period P. Every report interval,
// each client of the bucket reports what it was asked in that interval
// (requests allowed plus denied), which the allocator reads as a demand of
// D = ⌈asked × P / elapsed⌉ requests per period, at least 1. A report
// with no elapsed time (Envoy reports a bucket's first request at once)
// counts as one interval's, and what it asked is added to the next
// report's. The bucket's
// target shares are the max-min fair division of L among the demands of
// its live clients (MaxMinFair): a client asking for less than an equal
// division gets what it asks; the others share the rest equally.
//
// The allocator never lets the shares it has handed out, and that a client
// may still be applying, add up to more than L: a client's share is
// committed until the assignment that carries it expires (its TTL after it
// was sent, plus Delivery), given that every assignment reaches its client
// within Delivery (a quarter of its report interval) of being sent. A TTL
// is 1.5 report intervals rounded up to whole seconds (TTL: 2s for an
// interval of 1s), since Envoy's filter reads whole seconds only. A share
// that shrinks is sent at once, and the larger one stays committed until
// the smaller has reached the client (Delivery: the client replaces its
// token bucket as the assignment arrives), or, should its stream end
// first, until the larger one expires. A share grows only out of what is
// not committed, and to its target in one step: a growth that what is
// free does not cover yet waits for the larger shares held to expire (a
// shrunk share's a quarter interval after it shrank, a quiet client's at
// its assignment's expiry), unless they will not cover it either (the
// limit, or a shared limit's grant, is short), when what is free is
// divided max-min fairly at once; a client holding nothing yet takes its
// part of what is free at once; and a client may grow up to a larger
// share of its own still held (reporting again after it was retired, say)
// at once, committing nothing more. So a client that reports less frees
// its share for the others a quarter interval after that report, and a
// client that goes quiet (its stream ends, or it stops reporting) frees
// it when its last assignment expires: TTL + Delivery (2.25s for an
// interval of 1s) after it was last sent.
//
// A report interval is the report's elapsed time, taken for at most
// MaxInterval (a minute), so a share outlives its client's last report by
// at most MaxLife (1 minute 45 s), whatever the report said; and what a
// report asked saturates rather than wraps (Asked).
//
// Small changes are not sent: a share moves when its target differs from
// it by more than 1/Tolerance of the target (2.5%), so that clients are
// not re-assigned at every report for noise; except that while a client
// needs more (by more than that), every share above its target shrinks to
// it. A share that does not move is sent as the identical assignment
// (its burst and TTL depend on the share, the period and the report
// interval only): Envoy keeps its token bucket only when the new
// assignment equals the old one.
//
// # The bound
//
// A client enforces its share s as a token bucket of rate s/P holding at
// most Burst(s, P) = max(1, ⌊s × BurstTime / P⌋) tokens: what its share
// earns in BurstTime, 50ms. In any stretch of time T, the clients of a
// bucket together admit at most
//
//	L × T / P + Σ_i Burst_i × (1 + k_i)
//
// where Burst_i is the largest burst client i was assigned in T and k_i
// the number of its token buckets that started full in T (Envoy starts a
// new, full token bucket for each assignment that is not identical to the
// one in force; the Go client carries its tokens over, so k_i = 0 for
// it), given delivery within Delivery. Σ Burst_i ≤ L × 50ms / P + N for N
// clients: with steady demand (k_i = 0) and ten clients of a limit of
// 1,000 a second, at most 60 a second beyond it. What a client admits
// without an assignment (before its first, after one expires) is what its
// fallback admits, outside this bound: with Envoy's default (allow all)
// it is what arrives in one round trip.
//
// # Limits shared by several daemons
//
// When several daemons hand out shares of the same limits (behind a load
// balancer, on one Redis), each keeps its own clients in an Allocator
// made by NewShared, and a ledger (internal/store/redis: QuotaLedger)
// keeps, per bucket, one entry per daemon: the most its clients may be
// applying together (its grant), its live clients' demands, and until
// when the entry holds. A daemon's Allocator then
//
//   - divides the limit max-min fairly among the demands of every client
//     of every daemon (its own and the Others of its pool), and takes the
//     targets of its own clients (an uneven division's remainder goes to
//     the others' clients first, so that the daemons' targets together
//     never exceed the limit);
//   - grows its clients' shares only out of its grant, less what they may
//     already be applying;
//   - answers reports in two ticks (a tick is 100ms in the daemon): the
//     first publishes their demands without growing its grant, the second
//     claims what its clients' targets want, computed on the other
//     daemons' demands as they published them meanwhile; the Tick after
//     the ledger's answer sends the assignments. So clients that report
//     together on several daemons (a change of demand everywhere) are
//     divided on each other's new demands, not the old;
//   - sends no assignment that may be applied after its pool's Until.
//
// The ledger grants a daemon at most the limit less the grants of the
// other daemons' entries in force, and never less than what the daemon's
// clients may already be applying (Claim.Keep). A daemon asks (Claims)
// every tick for the buckets whose claim has news, whose pool is due for
// renewal, or whose last claim is half a report interval old (so that the
// others' demands it divides by are at most that old); while a claim is in flight the bucket's grant is lowered to
// its Keep (no growth on the old grant, which the ledger may be lowering).
// So the grants in force never add up to more than the limit, and the
// shares a daemon's clients may apply never exceed its grant: the sum over
// every client of every daemon is at most the limit, as within one.
//
// A daemon's entry lives Lease (its clients' longest assignment life plus
// LeaseSlack) beyond its last claim, so that a daemon that stops without a
// word holds its grant for as long as its clients may apply what it sent
// them, and at most LeaseSlack longer. If the ledger cannot be
// reached, a daemon's pools run out at their Until: it stops renewing
// assignments, and its clients fall back (quota_fallback) as their last
// assignments expire.
//
// The Allocator is pure logic: time comes in as an argument (Unix
// nanoseconds, from internal/core/clock), and it is not safe for concurrent use.
package quota

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Limit is what a bucket's clients share: Requests per Period.
type Limit struct {
	Requests int64
	Period   time.Duration
}

// Assignment is what a client is told to enforce for a bucket.
type Assignment struct {
	// Share is the client's requests per Limit.Period; 0 denies all.
	Share int64
	// Period is the bucket's Limit.Period.
	Period time.Duration
	// Burst is the most tokens the client's bucket holds (0 with Share 0).
	Burst int64
	// TTL is how long the assignment holds after it is received.
	TTL time.Duration
}

// Push is an assignment that changed without the client asking: it should
// be sent to Client for Bucket now.
type Push struct {
	Bucket, Client string
	Assignment
}

// Tuning of the allocator, in report intervals.
const (
	// TTLNum, TTLDen: an assignment lives 1.5 report intervals, rounded up
	// to whole seconds (TTL), so that a report a little late does not let
	// it expire, and a share that shrinks is free again soon.
	TTLNum, TTLDen = 3, 2
	// DeliveryDen: an assignment is assumed to reach its client within a
	// quarter of the client's report interval of being sent.
	DeliveryDen = 4
	// Tolerance: a share moves when its target is more than 1/Tolerance of
	// the target away.
	Tolerance = 40
)

// BurstTime is how long a share takes to earn its burst: a client's token
// bucket holds what its share earns in BurstTime, at least one token.
// Envoy starts every new token bucket full, so this is what a client may
// admit at once on top of its share's rate.
const BurstTime = 50 * time.Millisecond

// TTL returns the time to live of an assignment to a client that reports
// every interval: 1.5 intervals rounded up to whole seconds, at least 1s.
// Envoy's filter arms an assignment's expiry from the whole seconds of its
// time to live only (assignment_time_to_live.seconds()), so a time to live
// is always whole seconds.
func TTL(interval time.Duration) time.Duration {
	d := max(interval, 0) / TTLDen * TTLNum
	if d < 0 || d > math.MaxInt64-time.Second { // saturate rather than overflow
		return math.MaxInt64 / time.Second * time.Second
	}
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

// Burst returns the most tokens the bucket of a share of share requests
// per period holds: what it earns in BurstTime, rounded down, at least 1
// (0 for a share of 0).
func Burst(share int64, period time.Duration) int64 {
	if share <= 0 {
		return 0
	}
	if period <= 0 {
		return 1
	}
	hi, lo := bits.Mul64(uint64(share), uint64(BurstTime))
	if hi >= uint64(period) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(period))
	return max(1, int64(min(q, math.MaxInt64)))
}

// Allocator keeps the buckets, their clients and their shares.
type Allocator struct {
	buckets map[string]*bucket
	// interval is the report interval assumed for a client until it says
	// (its first report's elapsed time is 0 or absent).
	interval time.Duration
	// shared: the limits are shared with other daemons' clients through a
	// ledger (shared.go); released are the buckets forgotten since the
	// last Claims, whose ledger entries are to be removed.
	shared   bool
	released []string
}

type bucket struct {
	limit   Limit
	clients map[string]*client
	// pool is this daemon's part of a shared limit, from the ledger (nil
	// when not shared, or before the first sync); claimed is what the last
	// claim said, to tell whether the next one has news.
	pool      *Pool
	claimed   Claim
	claimedAt int64
	news      bool // a report since the last claim
	// publishing: the last claim published news without growing; the
	// next is the full claim, and until it is answered nothing is sent.
	publishing bool
}

type client struct {
	demand   int64         // requests per period, from the last report
	interval time.Duration // between its reports
	reported int64         // when it last reported
	// unelapsed is what reports with no elapsed time counted, to be added
	// to the next report that says how long it covers.
	unelapsed uint64
	gone      bool // its stream ended

	share  int64 // the last share sent
	sentAt int64 // when it was sent
	holds  []hold
	// due: it reported, and is answered by the next assignment that can
	// be sent (a shared limit: after the ledger's answer).
	due bool
}

// hold is a larger share sent earlier that the client may still apply:
// until it has received the smaller one (a Delivery after it was sent),
// or, should its stream end first, until the larger one expires.
type hold struct {
	share  int64
	until  int64
	expiry int64 // of the assignment that carried the larger share
}

// New returns an allocator that assumes a report interval of interval (at
// most MaxInterval) for clients that have not said theirs.
func New(interval time.Duration) *Allocator {
	return &Allocator{buckets: map[string]*bucket{}, interval: min(interval, MaxInterval)}
}

func (c *client) ttl() time.Duration { return TTL(c.interval) }

// expiry is when the last share sent stops being committed.
func (c *client) expiry() int64 {
	return c.sentAt + int64(c.ttl()) + int64(c.interval/DeliveryDen)
}

// live reports whether the client takes part in the division at now: its
// stream is open, and its last assignment has not expired or its report
// awaits an answer.
func (c *client) live(now int64) bool { return !c.gone && (c.due || now < c.expiry()) }

// committed is the most the client may be applying at now.
func (c *client) committed(now int64) int64 {
	var m int64
	if now < c.expiry() {
		m = c.share
	}
	for _, h := range c.holds {
		if now < h.until {
			m = max(m, h.share)
		}
	}
	return m
}

func (c *client) assignment(l Limit) Assignment {
	return Assignment{Share: c.share, Period: l.Period, TTL: c.ttl(), Burst: Burst(c.share, l.Period)}
}

// Report records that client asked asked requests of bucket in the elapsed
// time since its previous report (0 for its first), under limit (which may
// have changed since the last report: a reload), and rebalances the bucket.
// Its report interval, and so its assignment's time to live, is elapsed
// bounded by MaxInterval (Interval).
// It returns the client's assignment, to be sent to it now (its time to
// live starts now), and the assignments of other clients that changed, to
// be pushed to them now. For a shared limit (NewShared) ok is false and
// nothing is to be sent now: the client's assignment is pushed by the
// Tick after the ledger has answered the bucket's next claim.
func (a *Allocator) Report(bucketKey string, limit Limit, clientID string, asked uint64, elapsed time.Duration, now int64) (as Assignment, ok bool, pushes []Push) {
	b := a.buckets[bucketKey]
	if b == nil {
		b = &bucket{clients: map[string]*client{}}
		a.buckets[bucketKey] = b
	}
	b.limit = limit
	c := b.clients[clientID]
	if c == nil {
		c = &client{interval: a.interval}
		b.clients[clientID] = c
	}
	if elapsed > 0 {
		// What a report with no elapsed time counted belongs to this one's
		// interval (Envoy reports a bucket's first request at once).
		asked = Asked(asked, c.unelapsed)
		c.unelapsed = 0
		c.interval = Interval(elapsed, a.interval) // at most MaxInterval
		c.demand = demand(asked, elapsed, limit.Period)
	} else {
		// A first report: what it asked, as if in one interval.
		c.unelapsed = Asked(c.unelapsed, asked)
		c.demand = demand(c.unelapsed, c.interval, limit.Period)
	}
	if now >= c.expiry() {
		c.share = 0 // expired: what it had may have gone to others
	}
	c.gone = false
	c.reported = now
	if a.shared {
		// Answered once the ledger has had the report's news and the
		// bucket's full claim has been answered (Claims).
		c.due, b.news = true, true
		return Assignment{}, false, nil
	}
	pushes = a.rebalance(bucketKey, b, now, clientID)
	c.sentAt, c.due = now, false // the reply carries its assignment, renewed
	return c.assignment(limit), true, pushes
}

// demand returns asked per elapsed as requests per period, rounded up, at
// least 1.
func demand(asked uint64, elapsed, period time.Duration) int64 {
	if elapsed <= 0 || period <= 0 {
		return 1
	}
	const most = 1 << 62
	if asked > most/uint64(period) {
		return most // more than any limit: saturate rather than overflow
	}
	d := (int64(asked)*int64(period) + int64(elapsed) - 1) / int64(elapsed)
	return max(d, 1)
}

// Gone records that client's stream for bucket ended: its share stays
// committed until its last assignment expires, and is then divided among
// the others (by Tick).
func (a *Allocator) Gone(bucketKey, clientID string, now int64) []Push {
	b := a.buckets[bucketKey]
	if b == nil || b.clients[clientID] == nil {
		return nil
	}
	c := b.clients[clientID]
	c.gone = true
	for i := range c.holds { // a smaller share sent may not have reached it
		c.holds[i].until = max(c.holds[i].until, c.holds[i].expiry)
	}
	if a.shared {
		return nil // the next Tick rebalances, after the ledger
	}
	return a.rebalance(bucketKey, b, now, "")
}

// Tick rebalances every bucket at now: shares that expired (clients gone
// quiet, shares shrunk) go to the clients that need them. It returns the
// assignments to push, and forgets clients and buckets with nothing left.
func (a *Allocator) Tick(now int64) []Push {
	var pushes []Push
	for _, key := range a.bucketKeys() {
		pushes = append(pushes, a.rebalance(key, a.buckets[key], now, "")...)
	}
	return pushes
}

func (a *Allocator) bucketKeys() []string {
	keys := make([]string, 0, len(a.buckets))
	for k := range a.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// rebalance moves the bucket's shares towards their targets at now. The
// client reporting (if any) is live, and gets its assignment in the reply,
// so it is not among the pushes.
func (a *Allocator) rebalance(key string, b *bucket, now int64, reporting string) []Push {
	live := func(id string) bool { return id == reporting || b.clients[id].live(now) }
	ids := prune(b, now, live)
	if len(ids) == 0 {
		delete(a.buckets, key)
		if b.pool != nil {
			a.released = append(a.released, key)
		}
		return nil
	}
	if !a.usable(b, now) || b.publishing {
		return nil // nothing can be sent: the ledger's answer is awaited
	}
	lives, demands := holdQuiet(b, ids, live)
	targets := a.targets(b, demands)
	changed := map[string]bool{}
	shrink(b, lives, targets, now, changed)
	a.grow(b, ids, lives, targets, now, changed)
	var pushes []Push
	for _, id := range lives {
		c := b.clients[id]
		if !changed[id] && !c.due {
			continue
		}
		c.sentAt, c.due = now, false
		if id != reporting {
			pushes = append(pushes, Push{Bucket: key, Client: id, Assignment: c.assignment(b.limit)})
		}
	}
	return pushes
}

// prune drops the holds that expired at now and the clients that are not
// live and may apply nothing sent to them, and returns the others' ids,
// sorted.
func prune(b *bucket, now int64, live func(id string) bool) []string {
	ids := make([]string, 0, len(b.clients))
	for id, c := range b.clients {
		c.holds = slices.DeleteFunc(c.holds, func(h hold) bool { return now >= h.until })
		if !live(id) && c.committed(now) == 0 {
			delete(b.clients, id) // nothing sent that it may still apply
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// holdQuiet returns the live clients among ids and their demands; the
// share of each other client (gone or quiet) becomes a hold, committed
// until it expires.
func holdQuiet(b *bucket, ids []string, live func(id string) bool) (lives []string, demands []int64) {
	for _, id := range ids {
		if live(id) {
			lives = append(lives, id)
			demands = append(demands, b.clients[id].demand)
		} else if c := b.clients[id]; c.share > 0 {
			c.holds = append(c.holds, hold{c.share, c.expiry(), c.expiry()})
			c.share = 0
		}
	}
	return lives, demands
}

// shrink lowers to its target each share of lives above it by more than
// the tolerance, or by anything while another client needs more (its
// target more than the tolerance above its share). The larger share stays
// committed until the smaller one has reached the client (the filter
// replaces its token bucket as the new assignment arrives), or until it
// expires if the stream ends.
func shrink(b *bucket, lives []string, targets []int64, now int64, changed map[string]bool) {
	needs := false
	for i, id := range lives {
		if t, s := targets[i], b.clients[id].share; t > s && t-s > t/Tolerance {
			needs = true
		}
	}
	for i, id := range lives {
		c := b.clients[id]
		if t := targets[i]; t < c.share && (needs || c.share-t > t/Tolerance) {
			c.holds = append(c.holds, hold{c.share, min(c.expiry(), now+int64(c.interval/DeliveryDen)), c.expiry()})
			c.share = t
			changed[id] = true
		}
	}
}

// grow raises the shares of lives below their targets by more than the
// tolerance, out of what no client of ids may be applying (growth).
func (a *Allocator) grow(b *bucket, ids, lives []string, targets []int64, now int64, changed map[string]bool) {
	// eventual is what will be free once the larger shares held have
	// expired.
	free, eventual := a.capacity(b), a.capacity(b)
	for _, id := range ids {
		free -= b.clients[id].committed(now)
		eventual -= b.clients[id].share
	}
	var growing []string
	var held, wants, own []int64
	for i, id := range lives {
		c := b.clients[id]
		if t := targets[i]; t > c.share && t-c.share > t/Tolerance {
			growing = append(growing, id)
			held = append(held, c.share)
			wants = append(wants, t-c.share)
			own = append(own, c.committed(now)-c.share)
		}
	}
	for i, g := range growth(free, eventual, held, wants, own) {
		if g > 0 {
			b.clients[growing[i]].share += g
			changed[growing[i]] = true
		}
	}
}

// growth returns how much each share, holding held[i] and wanting
// wants[i] more, grows out of free (eventual once the larger shares held
// have expired); own[i] of a growth costs nothing, being below a larger
// share the same client may still apply. When eventual covers every
// growth, a share grows to its target in one step, the smallest growths
// first as far as free covers them, and the others wait for the held
// shares to expire: a client is sent one assignment per change of its
// target (Envoy starts a new, full token bucket for each), except that a
// client holding nothing yet takes a max-min fair part of what is left at
// once, so that it is not denied everything meanwhile. When it does not
// (the limit, or a daemon's grant, is short), waiting would not help: free
// is divided max-min fairly now.
func growth(free, eventual int64, held, wants, own []int64) []int64 {
	var total int64
	for _, w := range wants { // saturating: a want may be up to 2^62
		total += min(w, math.MaxInt64-total)
	}
	if total > eventual {
		return MaxMinFair(free, wants)
	}
	g := make([]int64, len(wants))
	order := make([]int, len(wants))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(wants[x]-own[x], wants[y]-own[y]) })
	for _, i := range order {
		if cost := max(wants[i]-own[i], 0); cost <= free {
			g[i], free = wants[i], free-cost
		}
	}
	var starting []int
	var rest []int64
	for i := range wants {
		if g[i] == 0 && held[i] == 0 {
			starting = append(starting, i)
			rest = append(rest, wants[i])
		}
	}
	for j, x := range MaxMinFair(free, rest) {
		g[starting[j]] = x
	}
	return g
}

// Has reports whether the allocator keeps the bucket: it has clients, or
// shares that may still be applied.
func (a *Allocator) Has(bucketKey string) bool { return a.buckets[bucketKey] != nil }

// ClientView is one client of a bucket, for the console.
type ClientView struct {
	Client string `json:"client"`
	// Demand is requests per period, from its last report.
	Demand int64 `json:"demand"`
	// Share is the requests per period last sent to it.
	Share int64 `json:"share"`
	// Committed is the most it may be applying now (a larger share sent
	// earlier that has not expired included).
	Committed int64 `json:"committed"`
	Burst     int64 `json:"burst"`
	// Interval is its report interval.
	Interval time.Duration `json:"interval"`
	Live     bool          `json:"live"`
}

// BucketView is one bucket and its clients, for the console.
type BucketView struct {
	Bucket   string        `json:"bucket"`
	Requests int64         `json:"requests"`
	Period   time.Duration `json:"period"`
	Clients  []ClientView  `json:"clients"`
	// Shared is this daemon's part of a limit shared with other daemons
	// (NewShared), nil before the ledger's first answer.
	Shared *SharedView `json:"shared,omitempty"`
}

// SharedView is a daemon's part of a shared limit, for the console.
type SharedView struct {
	// Grant is what this daemon's clients may together be applying.
	Grant int64 `json:"grant"`
	// OtherClients are the other daemons' live clients, OtherDemand what
	// they ask together, in requests per period.
	OtherClients int   `json:"other_clients"`
	OtherDemand  int64 `json:"other_demand"`
}

// View returns every bucket and its clients at now, buckets by key,
// clients by id.
func (a *Allocator) View(now int64) []BucketView {
	var views []BucketView
	for _, key := range a.bucketKeys() {
		b := a.buckets[key]
		v := BucketView{Bucket: key, Requests: b.limit.Requests, Period: b.limit.Period}
		if p := b.pool; p != nil {
			v.Shared = &SharedView{Grant: p.Grant, OtherClients: len(p.Others)}
			for _, d := range p.Others { // saturating: a demand may be up to 2^62
				v.Shared.OtherDemand += min(d, math.MaxInt64-v.Shared.OtherDemand)
			}
		}
		for id, c := range b.clients {
			v.Clients = append(v.Clients, ClientView{
				Client: id, Demand: c.demand, Share: c.share, Committed: c.committed(now),
				Burst: c.assignment(b.limit).Burst, Interval: c.interval, Live: c.live(now),
			})
		}
		slices.SortFunc(v.Clients, func(x, y ClientView) int { return strings.Compare(x.Client, y.Client) })
		views = append(views, v)
	}
	return views
}
