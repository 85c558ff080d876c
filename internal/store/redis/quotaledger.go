package redis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

//go:embed quotaledger.lua
var quotaLedgerLua string

var quotaLedgerScript = goredis.NewScript(quotaLedgerLua)

// QuotaLedger keeps in Redis the ledger of quota shares that daemons on the
// same Redis share (package quota, "Limits shared by several daemons"):
// one key per bucket, under Config.KeyPrefix + "quota:", holding one entry
// per daemon, each read and written by quotaledger.lua, atomically. Its
// entries expire, on the store's clock (Redis TIME, or Config.Clock), at
// the lease their daemon last asked for, at most quota.MaxLease; the key
// expires with its last entry (and Config.Linger after).
//
// It is safe for concurrent use; a daemon uses one, under an id of its own.
type QuotaLedger struct {
	s  *Store
	id string
}

// QuotaLedger returns the store's ledger of quota shares for this daemon,
// under a random id (a daemon that restarts is a new one: its old entries
// hold until their leases end).
func (s *Store) QuotaLedger() *QuotaLedger {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &QuotaLedger{s: s, id: hex.EncodeToString(b)}
}

// Sync sends the claims, pipelined (per node on a cluster), and returns
// the grants in their order, or the first error (a *guard.ConfigError
// when Redis refuses the daemon for its configuration).
func (l *QuotaLedger) Sync(ctx context.Context, claims []quota.Claim) ([]quota.Grant, error) {
	now := ""
	if c := l.s.clock; c != nil {
		now = strconv.FormatInt(c.Now()/1e6, 10)
	}
	cmds := make([]*goredis.Cmd, len(claims))
	run := func(eval func(ctx context.Context, p goredis.Pipeliner, keys []string, args ...any) *goredis.Cmd) error {
		_, err := l.s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, c := range claims {
				cmds[i] = eval(ctx, p, []string{l.s.prefix + "quota:" + c.Bucket}, l.args(c, now)...)
			}
			return nil
		})
		return err
	}
	err := run(func(ctx context.Context, p goredis.Pipeliner, keys []string, args ...any) *goredis.Cmd {
		return quotaLedgerScript.EvalSha(ctx, p, keys, args...)
	})
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") { // not loaded yet: EVAL loads it
		err = run(func(ctx context.Context, p goredis.Pipeliner, keys []string, args ...any) *goredis.Cmd {
			return quotaLedgerScript.Eval(ctx, p, keys, args...)
		})
	}
	if err != nil {
		return nil, configError(l.s.explain(err))
	}
	grants := make([]quota.Grant, len(claims))
	for i, cmd := range cmds {
		g, err := parseGrant(cmd.Val())
		if err != nil {
			return nil, fmt.Errorf("redis: the quota ledger's reply for bucket %q: %w", claims[i].Bucket, err)
		}
		grants[i] = g
	}
	return grants, nil
}

// maxLeaseMs is the longest lease an entry holds in the ledger, in ms:
// quota.MaxLease, rounded up. A key expires at most that long after its
// last write.
var maxLeaseMs = (quota.MaxLease + time.Millisecond - 1).Milliseconds()

// args returns quotaledger.lua's ARGV for c, at nowMs ("": Redis TIME).
func (l *QuotaLedger) args(c quota.Claim, nowMs string) []any {
	var demands strings.Builder
	for i, d := range c.Demands {
		if i > 0 {
			demands.WriteByte(',')
		}
		demands.WriteString(strconv.FormatInt(max(d, 0), 10))
	}
	lease := c.Lease.Milliseconds()
	if c.Lease > 0 {
		lease++ // rounded up: never shorter than asked
	}
	return []any{l.id, c.Limit, c.Keep, c.Want, lease, demands.String(), nowMs, maxLeaseMs, l.s.linger}
}

// parseGrant reads quotaledger.lua's reply: the grant, and the others'
// demands joined by ",".
func parseGrant(v any) (quota.Grant, error) {
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return quota.Grant{}, fmt.Errorf("%v, not [grant, demands]", v)
	}
	gs, _ := r[0].(string)
	ds, _ := r[1].(string)
	grant, err := strconv.ParseInt(gs, 10, 64)
	if err != nil {
		return quota.Grant{}, err
	}
	g := quota.Grant{Grant: grant}
	if ds != "" {
		for _, f := range strings.Split(ds, ",") {
			d, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return quota.Grant{}, err
			}
			g.Others = append(g.Others, d)
		}
	}
	if grant < 0 {
		return quota.Grant{}, errors.New("a negative grant")
	}
	return g, nil
}
