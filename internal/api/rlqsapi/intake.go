package rlqsapi

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

// Bounds on what quota clients make the server keep.
const (
	// MaxStreamBuckets is how many buckets served by quota one stream may
	// report.
	MaxStreamBuckets = 1024
	// MaxBuckets is how many buckets served by quota the server keeps, for
	// all tenants together.
	MaxBuckets = 1 << 16
	// MaxTenantBuckets is how many of them one tenant's streams may bring
	// in: a sixteenth, so that it takes sixteen tenants at their bound to
	// fill the table.
	MaxTenantBuckets = MaxBuckets / 16
	// MaxPending is how many actions a stream's reports may leave unsent
	// before its next usage waits for them to be sent (a client that does
	// not read its answers stops being read).
	MaxPending = 1024
)

// WithTenant has tenant name, at a stream's first report, the caller that
// its buckets count against (MaxTenantBuckets): "" for a caller it cannot
// tell apart from others, whose streams count against their domain. Without
// it every stream counts against its domain.
func WithTenant(tenant func(ctx context.Context, domain string) string) Option {
	return func(s *Server) { s.tenant = tenant }
}

// WithLogger has the server log to l (slog.Default without it): the
// ledger's failures and recovery, and buckets refused at a bound.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// tenantOf is the tenant of a stream of domain.
func (s *Server) tenantOf(ctx context.Context, domain string) string {
	if s.tenant != nil {
		if t := s.tenant(ctx, domain); t != "" {
			return "caller " + strconv.Quote(t)
		}
	}
	return "domain " + strconv.Quote(domain)
}

// table is the buckets served by quota, by allocator key, and how many of
// them each tenant brought in. A bucket counts against the tenant whose
// report brought it in until the allocator forgets it, whoever reports it
// meanwhile.
type table struct {
	buckets map[string]bucketInfo
	tenants map[string]int
}

func newTable() table {
	return table{buckets: map[string]bucketInfo{}, tenants: map[string]int{}}
}

// keep records info for key, counted against info.tenant when key is new.
func (t *table) keep(key string, info bucketInfo) {
	if old, ok := t.buckets[key]; ok {
		info.tenant = old.tenant
	} else {
		t.tenants[info.tenant]++
	}
	t.buckets[key] = info
}

// forget removes key, if kept.
func (t *table) forget(key string) {
	info, ok := t.buckets[key]
	if !ok {
		return
	}
	delete(t.buckets, key)
	if t.tenants[info.tenant]--; t.tenants[info.tenant] <= 0 {
		delete(t.tenants, info.tenant)
	}
}

// refusal says why a bucket new to a stream is not served: "" when it is.
// s.mu is held.
func (s *Server) refusal(st *stream, key string) string {
	st.mu.Lock()
	_, known := st.buckets[key]
	n := len(st.buckets)
	st.mu.Unlock()
	switch {
	case known:
		return ""
	case n >= MaxStreamBuckets:
		return "this stream already reports " + strconv.Itoa(n) + " buckets, the most one stream may"
	}
	if _, ok := s.table.buckets[key]; ok {
		return ""
	}
	if n := s.table.tenants[st.tenant]; n >= MaxTenantBuckets {
		return "the " + st.tenant + " already has " + strconv.Itoa(n) + " buckets served by quota, the most one tenant may"
	}
	if n := len(s.table.buckets); n >= MaxBuckets {
		return "the server already serves " + strconv.Itoa(n) + " buckets by quota, the most it keeps"
	}
	return ""
}

// refuse answers a bucket beyond a bound with DENY_ALL for an assignment's
// life (the limit is not divided for it, and not given away either), and
// says so in the log (at most a line a minute while refusals go on) and in
// ratelimitd_quota_refused_total.
func (s *Server) refuse(st *stream, id *rlqsv3.BucketId, why string, elapsed time.Duration) {
	s.metrics.Refused(st.domain)
	if log, since, n := s.full.Start(); log { // the first refusal, then at most a line a minute
		s.log.Warn("quota: buckets beyond a bound are answered DENY_ALL (docs/quota.md, Bounds)",
			"why", why, "refused", n, "since_first_refusal", since)
	}
	s.send(st, blanketAction(id, typev3.RateLimitStrategy_DENY_ALL, s.ttl(elapsed)))
}

// ttl is the time to live of a blanket answer to a report of elapsed:
// an assignment's, for the report interval elapsed says (quota.Interval:
// at most quota.MaxInterval).
func (s *Server) ttl(elapsed time.Duration) time.Duration {
	return quota.TTL(quota.Interval(elapsed, s.interval))
}

// backlog waits, while st has MaxPending actions or more unsent, for its
// sender to take them; it returns the error that ends the stream when the
// stream ends or the server drains meanwhile.
func (s *Server) backlog(ctx context.Context, st *stream) error {
	for {
		st.mu.Lock()
		n := len(st.pending)
		st.mu.Unlock()
		if n < MaxPending {
			return nil
		}
		select {
		case <-st.sent:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.drain:
			return errDraining
		}
	}
}

var errDraining = status.Error(codes.Unavailable, "ratelimitd is shutting down: reconnect to report again")
