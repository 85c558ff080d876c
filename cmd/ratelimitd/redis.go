package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
)

// redisFlags are the flags of the Redis store that need work after
// parsing; the rest write into cfg.Redis and cfg.RedisGuard directly.
type redisFlags struct {
	cluster                string
	sentinel               string
	passwordFile           string
	sentinelPasswordFile   string
	tls                    bool
	tlsCA, tlsCert, tlsKey string
	// fallbackPassword is the password when neither --redis-password-file
	// nor $RATELIMITD_REDIS_PASSWORD gives one: REDIS_AUTH's, under
	// envoyproxy/ratelimit's environment.
	fallbackPassword string
	// fallbackSentinelPassword is the sentinels' password when neither
	// --redis-sentinel-password-file nor its variable gives one:
	// REDIS_SENTINEL_AUTH's.
	fallbackSentinelPassword string
	// layout is --redis-key-layout.
	layout string
	// fs holds the flags: whether --redis-key-prefix was given (its default
	// is none with the upstream layout).
	fs *flag.FlagSet
}

func addRedisFlags(fs *flag.FlagSet, cfg *daemon.Config) *redisFlags {
	f := &redisFlags{fs: fs}
	r, g := &cfg.Redis, &cfg.RedisGuard
	fs.StringVar(&cfg.Store, "store", "memory", "where buckets live: memory (this daemon's own) or redis (shared by every daemon on the same Redis; see docs/redis.md)")
	fs.StringVar(&r.Addr, "redis-addr", "127.0.0.1:6379", "standalone Redis `host:port` (--store redis); with --redis-sentinel, the sentinels' addresses, comma-separated")
	fs.StringVar(&f.cluster, "redis-cluster", "", "Redis Cluster seed `addresses`, comma-separated (instead of --redis-addr)")
	fs.StringVar(&f.sentinel, "redis-sentinel", "", "reach the Redis `master` of this name through Redis Sentinel, following its failovers: --redis-addr is then the sentinels' host:port addresses, comma-separated")
	fs.StringVar(&r.SentinelUsername, "redis-sentinel-username", "", "ACL user name for the sentinels (--redis-sentinel)")
	fs.StringVar(&f.sentinelPasswordFile, "redis-sentinel-password-file", "", "`file` holding the sentinels' password (--redis-sentinel); or $RATELIMITD_REDIS_SENTINEL_PASSWORD. --redis-tls* apply to the sentinels too")
	fs.StringVar(&r.Username, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&f.passwordFile, "redis-password-file", "", "`file` holding the Redis password (a trailing line break is ignored); or $RATELIMITD_REDIS_PASSWORD. Never on the command line: --redis-password is refused")
	fs.BoolVar(&f.tls, "redis-tls", false, "connect to Redis over TLS, trusting the system's roots (or --redis-tls-ca)")
	fs.StringVar(&f.tlsCA, "redis-tls-ca", "", "PEM CA certificates `file` to trust for Redis (implies --redis-tls)")
	fs.StringVar(&f.tlsCert, "redis-tls-cert", "", "PEM client certificate `file` for Redis (with --redis-tls-key; implies --redis-tls)")
	fs.StringVar(&f.tlsKey, "redis-tls-key", "", "PEM private key `file` of --redis-tls-cert")
	r.Timeout = redisstore.DefaultTimeout
	fs.Var((*positiveDuration)(&r.Timeout), "redis-timeout", "how long one request may wait for Redis before the failure mode decides it (a positive `duration`)")
	fs.Var(&g.FailureMode, "redis-failure-mode", "`mode` while Redis fails or is slower than --redis-timeout: open (default: admit, as a bucket at rest would) or closed (deny, retry after 1s)")
	fs.IntVar(&g.BreakerFailures, "redis-breaker-failures", guard.DefaultBreakerFailures, "open the circuit breaker after `n` failed exchanges with Redis in a row: requests are then decided by the failure mode at once, without waiting for Redis")
	fs.DurationVar(&g.BreakerCooloff, "redis-breaker-cooloff", guard.DefaultBreakerCooloff, "how long the open circuit breaker decides by the failure mode before one request probes Redis again")
	fs.StringVar(&r.KeyPrefix, "redis-key-prefix", redisstore.DefaultKeyPrefix, "`prefix` of every Redis key (none by default with --redis-key-layout upstream, as upstream's CACHE_KEY_PREFIX)")
	fs.StringVar(&f.layout, "redis-key-layout", "ratelimitd", "`layout` of the keys: ratelimitd, or upstream to keep fixed windows of a second to a day as envoyproxy/ratelimit keeps them (<domain>_<key>_<value>_…_<window start>, a plain count), so that a deployment replaces upstream on its Redis keeping every count (see docs/redis.md)")
	fs.BoolVar(&r.SpreadKeys, "redis-spread-keys", false, "no {domain} hash tag: spread a domain's buckets over a cluster's nodes; requests then settle per slot (see docs/redis.md)")
	fs.IntVar(&g.DenyCache, "redis-deny-cache", 0, "remember up to `n` buckets over their limit until their retry_after, denying them without asking Redis (0: off)")
	return f
}

// apply fills cfg.Redis from the flags that need work.
func (f *redisFlags) apply(cfg *daemon.Config) error {
	if err := f.applyLayout(cfg); err != nil {
		return err
	}
	if cfg.Store != "redis" {
		return nil
	}
	if cfg.RedisGuard.BreakerFailures < 1 {
		return errors.New("--redis-breaker-failures: must be at least 1")
	}
	if cfg.RedisGuard.BreakerCooloff <= 0 {
		return errors.New("--redis-breaker-cooloff: must be positive")
	}
	if err := f.applyPasswords(cfg); err != nil {
		return err
	}
	if err := f.applyTopology(cfg); err != nil {
		return err
	}
	if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" {
		c, err := daemon.RedisTLS(f.tlsCA, f.tlsCert, f.tlsKey)
		if err != nil {
			return err
		}
		cfg.Redis.TLS = c
	}
	return nil
}

// applyLayout applies --redis-key-layout: upstream's keeps fixed windows'
// counters as envoyproxy/ratelimit does, with no key prefix unless
// --redis-key-prefix is given.
func (f *redisFlags) applyLayout(cfg *daemon.Config) error {
	switch f.layout {
	case "ratelimitd":
	case "upstream":
		if cfg.Store != "redis" {
			return errors.New("--redis-key-layout upstream: needs --store redis")
		}
		cfg.Redis.Counters = true
		prefixSet := false
		f.fs.Visit(func(fl *flag.Flag) { prefixSet = prefixSet || fl.Name == "redis-key-prefix" })
		if !prefixSet {
			cfg.Redis.KeyPrefix = ""
		}
	default:
		return fmt.Errorf("--redis-key-layout: %q is neither ratelimitd nor upstream", f.layout)
	}
	return nil
}

// applyPasswords reads the Redis and sentinel passwords from their files
// or environment variables, else takes the fallbacks.
func (f *redisFlags) applyPasswords(cfg *daemon.Config) error {
	password, err := secret("redis-password-file", f.passwordFile, "RATELIMITD_REDIS_PASSWORD")
	if err != nil {
		return err
	}
	if password == "" {
		password = f.fallbackPassword
	}
	cfg.Redis.Password = password
	if cfg.Redis.SentinelPassword, err = secret("redis-sentinel-password-file", f.sentinelPasswordFile, "RATELIMITD_REDIS_SENTINEL_PASSWORD"); err != nil {
		return err
	}
	if cfg.Redis.SentinelPassword == "" {
		cfg.Redis.SentinelPassword = f.fallbackSentinelPassword
	}
	return nil
}

// applyTopology applies --redis-sentinel (--redis-addr then lists the
// sentinels) or --redis-cluster, never both.
func (f *redisFlags) applyTopology(cfg *daemon.Config) error {
	if f.sentinel != "" {
		if f.cluster != "" {
			return errors.New("--redis-sentinel and --redis-cluster: choose one")
		}
		cfg.Redis.SentinelMaster = f.sentinel
		cfg.Redis.SentinelAddrs = splitAddrs(cfg.Redis.Addr)
		if len(cfg.Redis.SentinelAddrs) == 0 {
			return errors.New("--redis-sentinel: --redis-addr names no sentinel")
		}
		cfg.Redis.Addr = ""
	}
	if f.cluster != "" {
		cfg.Redis.ClusterAddrs = splitAddrs(f.cluster)
		if len(cfg.Redis.ClusterAddrs) == 0 {
			return errors.New("--redis-cluster: no address")
		}
		cfg.Redis.Addr = ""
	}
	return nil
}

// splitAddrs splits comma-separated addresses, dropping empty ones.
func splitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
