package redis

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
)

// Configuration errors. Redis refuses a daemon for its configuration, not
// for an outage, with these error prefixes: an ACL that lacks a command
// or key pattern (NOPERM; inside a script, "ERR The user executing the
// script can't run this command"), a wrong or missing password
// (WRONGPASS, NOAUTH, "ERR AUTH ... called without any password
// configured"), a command renamed away or unknown (inside a script too),
// and NOSCRIPT, which outlives the EVAL fallback only when the script
// will not load. Waiting does not mend them: the store reports them as
// *guard.ConfigError.
var configErrors = []string{
	"NOPERM",
	"WRONGPASS",
	"NOAUTH",
	"NOSCRIPT",
	"ERR AUTH",
	"ERR unknown command",
	"ERR unknown subcommand",
	"ERR The user executing the script can't run this command",
	"ERR Unknown Redis command called from script",
}

// configError returns err as a *guard.ConfigError when Redis refused the
// daemon for its configuration (see configErrors), and err otherwise.
func configError(err error) error {
	var rerr goredis.Error
	if err == nil || guard.IsConfigError(err) || !errors.As(err, &rerr) {
		return err
	}
	for _, p := range configErrors {
		if strings.HasPrefix(rerr.Error(), p) {
			return &guard.ConfigError{Err: err}
		}
	}
	return err
}

// The scripts, all of them, for the commands they call.
//
//go:embed *.lua
var luaFiles embed.FS

// scriptCommands returns the commands the scripts call (redis.call and
// redis.pcall), upper case, sorted.
func scriptCommands() []string {
	call := regexp.MustCompile(`redis\.p?call\(\s*["']([A-Za-z]+)["']`)
	files, _ := luaFiles.ReadDir(".")
	var cmds []string
	for _, f := range files {
		b, _ := luaFiles.ReadFile(f.Name())
		for _, m := range call.FindAllSubmatch(b, -1) {
			cmds = append(cmds, strings.ToUpper(string(m[1])))
		}
	}
	slices.Sort(cmds)
	return slices.Compact(cmds)
}

// commands run, for Check, each command that the scripts call, on its
// own, on a key of its own: harmlessly, leaving the key absent or expiring
// within a second.
var commands = map[string]func(ctx context.Context, c goredis.Cmdable, key string) error{
	"GET": func(ctx context.Context, c goredis.Cmdable, key string) error { return c.Get(ctx, key).Err() },
	"SET": func(ctx context.Context, c goredis.Cmdable, key string) error {
		return c.Set(ctx, key, "-", time.Second).Err()
	},
	"SETRANGE": func(ctx context.Context, c goredis.Cmdable, key string) error {
		return c.SetRange(ctx, key, 0, "-").Err()
	},
	"DEL":  func(ctx context.Context, c goredis.Cmdable, key string) error { return c.Del(ctx, key).Err() },
	"TIME": func(ctx context.Context, c goredis.Cmdable, _ string) error { return c.Time(ctx).Err() },
}

// Check does, against keys of its own under Config.KeyPrefix, everything
// the store does with Redis, and returns the first refusal: the handshake
// (AUTH) and PING on every node; each command the scripts call, run on its
// own, so that a refusal names it (a script's refusal does not); EVAL and
// EVALSHA of settle.lua with requests that write both ways (a key set with
// expiry, then overwritten in place); and an undo (undo.lua), as a request
// spread over slots takes one back. Its keys expire within a second (and
// Config.Linger after).
//
// A refusal for the configuration is a *guard.ConfigError naming what was
// refused. Any other error is an outage (Redis unreachable or slow), which
// says nothing of the configuration. When ctx ends first, Check returns
// ctx's error. Check takes a dozen round trips, on ctx's deadline alone.
func (s *Store) Check(ctx context.Context) error {
	err := s.check(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return configError(s.explain(err))
}

func (s *Store) check(ctx context.Context) error {
	if err := s.eachNode(ctx, 0, func(ctx context.Context, c goredis.Cmdable) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		return fmt.Errorf("connecting (AUTH) and PING: %w", err)
	}
	key := s.prefix + "{ratelimitd-check}"
	for _, name := range scriptCommands() {
		run, ok := commands[name]
		if !ok {
			continue // TestScriptCommands fails
		}
		if err := run(ctx, s.client, key+":"+name); err != nil && !errors.Is(err, goredis.Nil) {
			return fmt.Errorf("%s (which the scripts call): %w", name, err)
		}
	}

	// settle.lua, loaded (EVAL) and by its digest (EVALSHA): a fixed window
	// of 1s charged twice, the first charge setting the key with expiry,
	// the second overwriting its count in place.
	l, err := algorithms.NewLimit(algorithms.FixedWindow, 2, time.Second, 0)
	if err != nil {
		return err
	}
	charges := []store.Charge{{Limit: &l, Cost: 1}}
	keys := []string{key + ":settle"}
	args := appendRequest(s.settleHead(redisTime, false, 1), &s.specs, charges, []int{0}, nil)
	if err := settleScript.Eval(ctx, s.client, keys, args...).Err(); err != nil {
		return fmt.Errorf("EVAL of the settle script: %w", err)
	}
	if err := settleScript.EvalSha(ctx, s.client, keys, args...).Err(); err != nil {
		return fmt.Errorf("EVALSHA of the settle script: %w", err)
	}

	// undo.lua takes back a charge made in try mode (as a request spread
	// over slots does), deleting the key it set.
	keys = []string{key + ":undo"}
	v, err := settleScript.Run(ctx, s.client, keys, appendRequest(s.settleHead(redisTime, true, 1), &s.specs, charges, []int{0}, nil)...).Result()
	if err != nil {
		return fmt.Errorf("the settle script in try mode: %w", err)
	}
	r, err := parseSettleReply(v, 1)
	if err != nil {
		return err
	}
	if len(r.writes) == 1 {
		w := r.writes[0]
		if err := undoScript.Eval(ctx, s.client, keys, redisTime[0], redisTime[1], s.linger, w.new, w.old).Err(); err != nil {
			return fmt.Errorf("EVAL of the undo script: %w", err)
		}
	}
	return nil
}
