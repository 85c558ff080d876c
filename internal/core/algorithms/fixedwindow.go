package algorithms

import "time"

// This file is FixedWindow's arithmetic: its decision (fixedWindow, which
// Decide calls) and its usage operations (Check, Overdraft, Refund). The
// Redis store's Lua mirrors it function for function in the section headed
// "fixedwindow.go" of internal/store/redis/fast.lua (plain numbers) and of
// decide.lua (bignums).

// fixedWindow decides FixedWindow. The state holds the start of the window
// last charged (t) and its count (n).
//
// Windows are [k·P, (k+1)·P). Once now is in a later window than s.t's, the
// count starts over at 0. A now in an earlier window than s.t's (a clock
// that went back) is settled in s.t's window with its count: the window
// ends no sooner and the count is no lower than they were.
func (l *Limit) fixedWindow(s State, now, cost int64) (State, Decision) {
	start := now - now%l.period
	count := int64(s.n)
	if start > s.t {
		count = 0
	} else {
		start = s.t
	}
	end := start + l.period

	var d Decision
	if count > 0 {
		d.ResetAfter = time.Duration(end - now)
	}
	switch {
	case cost <= 0 || cost > l.capacity:
		d.Remaining, d.Debt = max(l.capacity-count, 0), max(count-l.capacity, 0)
		if cost > 0 {
			d.Code = OverCapacity
		}
		return s, d
	case count+cost > l.capacity:
		// count > 0 here; the count starts over when the window ends.
		d.Code = Denied
		d.Remaining, d.Debt = max(l.capacity-count, 0), max(count-l.capacity, 0)
		d.RetryAfter = time.Duration(end - now)
		return s, d
	}
	count += cost
	d.Remaining = l.capacity - count
	d.ResetAfter = time.Duration(end - now)
	return State{restAt: end, t: start, n: uint32(count)}, d
}

// fixedAt returns the window that s settles now in and its count: now's
// window with count 0 once now is past s's window, else s's (see
// fixedWindow).
func (l *Limit) fixedAt(s State, now int64) (start, count int64) {
	start = now - now%l.period
	if start > s.t {
		return start, 0
	}
	return s.t, int64(s.n)
}

// fixedReport is the decision reporting count in window start at now,
// Denied when a cost of extra more does not fit (extra 0: in debt; 1: a
// check), with the RetryAfter of a cost of 1: the count starts over when
// the window ends.
func (l *Limit) fixedReport(start, count, now, extra int64) Decision {
	d := Decision{Remaining: max(l.capacity-count, 0), Debt: max(count-l.capacity, 0)}
	if count > 0 {
		d.ResetAfter = time.Duration(start + l.period - now)
	}
	if count+extra > l.capacity {
		d.Code, d.RetryAfter = Denied, d.ResetAfter
	}
	return d
}

func (l *Limit) fixedOverdraft(s State, now, cost int64) (State, Decision) {
	start, count := l.fixedAt(s, now)
	if cost > 0 {
		count = addCount(count, cost)
		s = State{restAt: start + l.period, t: start, n: uint32(count)}
	}
	return s, l.fixedReport(start, count, now, 0)
}

// fixedRefundAt refunds units charged at chargedAt (≤ now): as fixedRefund
// when chargedAt is in the window s settles now in, else nothing. After a
// clock that went back (now before s's window, where charges of that time
// were settled) it refunds as fixedRefund.
func (l *Limit) fixedRefundAt(s State, now, units, chargedAt int64) (State, Decision) {
	if chargedAt < now-now%l.period && now-now%l.period >= s.t {
		units = 0 // an earlier window's: its count has passed
	}
	return l.fixedRefund(s, now, units)
}

func (l *Limit) fixedRefund(s State, now, units int64) (State, Decision) {
	start, count := l.fixedAt(s, now)
	if units > 0 && count > 0 {
		count = max(count-units, 0)
		if count == 0 {
			s = State{}
		} else {
			s = State{restAt: start + l.period, t: start, n: uint32(count)}
		}
	}
	d := l.fixedReport(start, count, now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
}
