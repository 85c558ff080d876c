// Package algorithms is the decision arithmetic of ratelimitd. Given a
// bucket's State, the time now, the cost of a request and the bucket's
// Limit, Limit.Decide returns the bucket's new State and a Decision. It does
// no I/O, reads no clock (now is an argument, as in golang.org/x/time/rate's
// AllowN), starts no goroutine or timer and does not allocate: a bucket is
// settled lazily, when a request arrives.
//
// # Choosing an algorithm
//
// L is Requests, P is Period, B is Burst (the capacity of the buckets).
//
//	                    burst             at a window edge      RetryAfter: until     choose for
//	fixed_window        L at once         2L within 2ns         the window ends       parity with envoyproxy/ratelimit;
//	                                                                                  a quota per calendar period
//	sliding_window      L at once         L+⌊2L/P⌋ within 2ns   the weighted count    a per-period limit without the
//	                                                            has room              double burst, in O(1) state
//	token_bucket        B at once, then   no windows            enough tokens have    APIs: bursts of B allowed, the
//	                    L per P                                 refilled              average held to L per P
//	leaky_bucket        same as           no windows            the level has         the same decisions, described as
//	                    token_bucket                            drained enough        a level draining at L per P
//	leaky_bucket_queue  none: admitted    no windows            the queue has room    smoothing traffic to a backend;
//	                    leave P/L apart                                               the caller waits Delay
//	concurrency         L in flight       no windows            enough units expire   streams, long calls: L at once,
//	                    at once                                 by their lease        each released by a refund
//
// Every State is 24 bytes. The windows keep a window start and one count
// (fixed) or two (sliding); the buckets keep one exact time and their rate;
// a concurrency keeps its expiry and seven 16-bit counts.
//
// # Exact arithmetic
//
// Times are integer nanoseconds. A rate is the exact rational L/P, never a
// float: the buckets keep times as whole nanoseconds plus a fraction over L,
// and products that can exceed 64 bits are taken in 128 (math/bits). So
// there is no drift: "5 per second" and "1 per 200ms" give the same
// answers, and a token bucket at 7 per 3s with a burst of 4, full at first
// and then asked for one request at a time at least every 3s/7, has
// admitted exactly 4 + ⌊T·7/3s⌋ after a time T, however many decisions
// that took.
//
// # Token bucket and leaky bucket
//
// A token bucket holds up to B tokens, starts full, and refills
// continuously at L per P: a request a third of the way into a period sees
// a third of a period's refill, exactly. A leaky bucket (a meter) holds a
// level of up to B that drains continuously at L per P. The level is always
// B minus the tokens, so "cost tokens are there" and "level + cost fits B"
// are one condition: the two are one algorithm, and TokenBucket and
// LeakyBucket give identical decisions.
//
// Both are computed as GCRA (the generic cell rate algorithm), whose state
// is a single time: the theoretical arrival time TAT at which the bucket is
// back at rest (full of tokens, empty of level). With I = P/L, the time one
// request takes to drain, and C = B·I, the backlog d = max(TAT-now, 0) is
// the level times I. A charge of cost is admitted iff d + cost·I ≤ C, and
// then TAT becomes now + d + cost·I. For a denial, RetryAfter is
// d + cost·I - C rounded up to a whole nanosecond: waiting exactly that
// long admits the same cost, 1ns less does not. Remaining is the whole
// tokens, ⌊(C-d)/I⌋; ResetAfter is d rounded up.
//
// # Leaky bucket as a queue
//
// LeakyBucketQueue shapes instead of metering. The same arithmetic admits a
// request while the queue (the requests admitted but not yet gone, the one
// leaving now included) stays within B, and the Decision's Delay says how
// long the request must wait before it proceeds: the backlog ahead of it,
// rounded up. Admitted requests of cost 1 therefore proceed P/L apart, the
// first at once; a request is denied only when the queue is full. With
// B = 1 a request is admitted only when the queue is empty, and never waits.
//
// # Fixed window
//
// Windows are the half-open intervals [k·P, (k+1)·P), aligned to multiples
// of P since time 0; with now counted from the Unix epoch that is the
// alignment of envoyproxy/ratelimit, so its configurations behave the
// same. Each window admits up to L hits; RetryAfter for a denial is the
// time to the window's end, when the count starts over.
//
// The boundary problem: the count forgets the previous window at once, so
// L hits just before a boundary and L more just after it are all admitted,
// 2L within 2ns. Over any interval of length P, up to 2L are admitted.
//
// # Sliding window
//
// Windows are aligned as for fixed_window. At now = S + e in the window
// [S, S+P), with n hits counted in it and m in the window before, the hits
// in the last period are estimated as m·(P-e)/P + n: the previous count
// weighted by its overlap with the interval (now-P, now]. A charge is
// admitted iff the estimate with it is at most L, compared exactly in
// integers. RetryAfter is exact: the earliest moment, in this window or a
// later one, at which the decaying estimate leaves room for the cost.
//
// Accuracy bound: over any interval of length d, 0 < d ≤ P, sliding_window
// admits at most L + ⌊L·d/P⌋ hits. An interval inside one window admits at
// most L. One that spans a boundary at S admits x ≤ m before S and, in its
// part of length d' ≤ d after S, y with m·(P-d')/P + y ≤ L, so
// x + y ≤ L + m·d'/P ≤ L + L·d/P. Where fixed windows admit 2L within 2ns
// across a boundary, sliding_window admits at most L + ⌊2L/P⌋ there. The
// bound is not a guarantee of L per period: an adversary that spends L
// just before a boundary can still spend close to L more late in the next
// window, so an interval of length P can see up to 2L-1 (never 2L).
//
// # Checks, overdraft and refunds
//
// Usage that is known only after the fact (the tokens an LLM call used)
// is charged with three more decisions beside Decide; a charge's Kind
// (Admit, Check, Overdraft, Refund) names the one that decides it
// (Limit.Apply):
//
//   - Check decides a cost of 1 without charging it: Denied, with the
//     RetryAfter of a cost of 1, exactly when Decide would deny it; else
//     Allowed, reporting the bucket as a peek does. It costs no more than
//     a Decide.
//   - Overdraft takes its cost in full whatever is left: the bucket may go
//     into debt, holding more use than its capacity. Its decision reports
//     the bucket after the charge and is Denied when the bucket is in debt
//     then (with the RetryAfter of a cost of 1), Allowed otherwise — and
//     then it is exactly Decide's admission of the same cost. Either way
//     the charge is taken.
//   - Refund gives units back, never past rest (full bucket, empty
//     window), and reports the bucket after it. A sliding window takes
//     the units off its current window's count first, then off the
//     previous window's. A bucket brought back to rest is the zero State.
//   - RefundAt gives back units charged at a given instant where that
//     charge went, or nowhere: a window's units off the count of the window
//     they were charged in while it counts (a fixed window's current one,
//     a sliding window's current or previous one), a bucket's time cost
//     less the time since the charge, a concurrency's units off the
//     generation they joined while it lives. It never gives back more than
//     not charging would have left.
//
// A bucket in debt denies every Check and every charge of cost ≥ 1 until
// its own refill has paid the debt back: the buckets at their rate (the
// backlog d exceeds C, and drains as time passes), the windows as their
// counts age out (a fixed window's count is gone when its window ends; a
// sliding window's is weighed out as the next window goes by). In debt,
// Remaining is 0 and ResetAfter is the time until the bucket is back at
// rest, debt included.
//
// The bound on debt keeps every value within its type whatever the cost
// (math.MaxInt64 included): a bucket's backlog stops at MaxSpan (146
// years of its refill, the capacity included; an overdraft that would
// take it further leaves it at MaxSpan), and a window's count stops at
// MaxCount = 2^32-1 (for a window of MaxCount requests, an overdraft
// therefore never leaves it in debt). A backlog past MaxSpan, after a
// clock that went back, is left as it is by an overdraft.
//
// # Concurrency
//
// A concurrency limits the units in flight, not their rate: L is the most
// at once (Requests, at most MaxInFlight) and T the lease (Period, at most
// MaxLease). A
// charge of cost is admitted iff the units in flight plus cost are at most
// L; a Refund releases units, never below zero; and a unit never released
// expires by itself, no sooner than T after it was charged and less than
// T/6 later, so that a caller that crashed holding units gives them back
// without help.
//
// Units are counted in generations: slots of G = ceil(T/6) aligned to
// multiples of G, a count per slot, seven slots kept. Every unit charged
// in a slot expires together, at the slot's last nanosecond plus T: that
// is the T/6. RetryAfter for a denial is when enough units have expired by
// their lease if nothing is released (a release admits sooner);
// ResetAfter is when the last one expires.
//
// Releases are anonymous (Envoy's is_negative_hits names no request), so a
// refund releases the oldest units in flight, taking them from the oldest
// generation first. That is the only choice that never counts fewer units
// than are running, given that every request is shorter than the lease:
// releasing the newest would leave an older unit's date on a unit still
// running, and a chain of overlapping requests would carry the first one's
// date until the count expired under a running request. The price: the
// units of a caller that crashed are released by the others' releases, and
// as many of the others' units stay counted in their place, each lasting
// its own lease. The count in flight is never below what runs and never
// above the units charged in the last T + G; an excess left by a crash
// lasts until charges pause for a lease. A refund that names its charge
// time (RefundAt, which ratelimit.v1 callers and the Go client's Lease
// send) releases the units of that charge's generation instead: exactly
// its own, so others' releases never take a crashed caller's units, which
// then expire on time under any traffic. T must exceed the longest request:
// a unit that outlives its lease frees a place while its request still
// runs.
//
// Overdraft charges in full into now's generation (whose count stops at
// MaxInFlight): the limit may be in debt, more units in flight than L,
// until releases and leases bring it back. A changed L keeps the counts;
// a changed T is another limit, and another bucket.
//
// # Clocks that go back
//
// A now earlier than one a State has seen never admits more than the later
// now did. For the buckets the backlog TAT-now only grows as now goes back.
// The windows settle a now before the State's window in that window, with
// its counts (and, for sliding_window, the previous count at full weight).
// A now outside [0, MaxTime] is taken as the nearer end of that range.
//
// # A changed limit
//
// A reload may put a bucket under a changed limit of the same period: other
// requests or burst, or another of token_bucket, leaky_bucket and
// leaky_bucket_queue (the stores keep the bucket: internal/engine's keys
// name a limit by its kind of state and period). The new limit keeps what
// was used:
//
//   - fixed_window: the window's count. Raised from 10 to 40 with 22
//     counted, 18 are left in the window; lowered to 5, the count denies
//     until the window ends, as debt does.
//   - sliding_window: both windows' counts, weighed as always.
//   - token_bucket, leaky_bucket, leaky_bucket_queue: the level, the
//     requests charged and not yet drained (the tokens missing; the queue).
//     The burst is a capacity: a changed burst changes what is left, not
//     what was used. A changed rate changes how fast the level drains: a
//     state records the Requests it was written at (states written before
//     they did are taken as the deciding limit's), and keeps draining at
//     that rate until a decision writes it — an admission, an overdraft
//     charge, a refund — which converts it at that moment, exactly (a
//     backlog d at m per P is d·m/R at R per P, in 128 bits, at most
//     MaxSpan). A decision that writes nothing (a peek, a check, a denial)
//     reports the bucket at its old rate with the new capacity, so its
//     RetryAfter and ResetAfter come true if nothing else arrives: raised
//     from 10 to 40 per hour with 22 used, 18 are left, the next one
//     refills 360s later (not 90s) until a charge is admitted.
//
// A changed period, or a change between a window and a bucket algorithm or
// between the two windows, makes a new bucket: the keys differ. A State
// applied to a Limit of another period or kind gives answers that are
// unspecified but never panic, and Remaining stays within [0, Capacity].
package algorithms
