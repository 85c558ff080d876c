package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
)

func TestRedisFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	secretFile, crlfFile, emptyFile := write("secret", "s3cret\n"), write("crlf", "with crlf\r\n"), write("empty", "\n")
	tests := []struct {
		name    string
		args    []string
		env     string
		want    redisstore.Config
		guard   guard.Config
		wantErr bool
	}{{
		name: "standalone with every option",
		args: []string{"--store", "redis", "--redis-addr", "10.1.2.3:6380", "--redis-timeout", "50ms", "--redis-failure-mode", "closed",
			"--redis-key-prefix", "rl:", "--redis-deny-cache", "1000", "--redis-username", "rl", "--redis-password-file", secretFile,
			"--redis-breaker-failures", "5", "--redis-breaker-cooloff", "250ms"},
		want: redisstore.Config{Addr: "10.1.2.3:6380", Timeout: 50 * time.Millisecond,
			KeyPrefix: "rl:", Username: "rl", Password: "s3cret"},
		guard: guard.Config{FailureMode: guard.FailClosed, DenyCache: 1000, BreakerFailures: 5, BreakerCooloff: 250 * time.Millisecond},
	}, {
		name: "cluster seeds replace the address; the password from the environment",
		args: []string{"--store", "redis", "--redis-cluster", "a:7000, b:7001,", "--redis-spread-keys"},
		env:  "fromenv",
		want: redisstore.Config{ClusterAddrs: []string{"a:7000", "b:7001"}, SpreadKeys: true, Password: "fromenv",
			Timeout: redisstore.DefaultTimeout, KeyPrefix: redisstore.DefaultKeyPrefix},
		guard: guard.Config{BreakerFailures: guard.DefaultBreakerFailures, BreakerCooloff: guard.DefaultBreakerCooloff},
	}, {
		name: "sentinel: the address lists the sentinels; their password from a file",
		args: []string{"--store", "redis", "--redis-sentinel", "mymaster", "--redis-addr", "s1:26379, s2:26379", "--redis-sentinel-username", "watch",
			"--redis-sentinel-password-file", secretFile},
		want: redisstore.Config{SentinelMaster: "mymaster", SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelUsername: "watch", SentinelPassword: "s3cret",
			Timeout: redisstore.DefaultTimeout, KeyPrefix: redisstore.DefaultKeyPrefix},
		guard: guard.Config{BreakerFailures: guard.DefaultBreakerFailures, BreakerCooloff: guard.DefaultBreakerCooloff},
	}, {
		name:    "sentinel and cluster both",
		args:    []string{"--store", "redis", "--redis-sentinel", "mymaster", "--redis-cluster", "a:7000"},
		wantErr: true,
	}, {
		name:    "sentinel without sentinels",
		args:    []string{"--store", "redis", "--redis-sentinel", "mymaster", "--redis-addr", " , "},
		wantErr: true,
	}, {
		name:    "a breaker that never opens",
		args:    []string{"--store", "redis", "--redis-breaker-failures", "0"},
		wantErr: true,
	}, {
		name:    "a breaker without cool-off",
		args:    []string{"--store", "redis", "--redis-breaker-cooloff", "0s"},
		wantErr: true,
	}, {
		name:  "the password from a file, its line break dropped",
		args:  []string{"--store", "redis", "--redis-password-file", crlfFile},
		want:  redisstore.Config{Addr: "127.0.0.1:6379", Password: "with crlf", Timeout: redisstore.DefaultTimeout, KeyPrefix: redisstore.DefaultKeyPrefix},
		guard: guard.Config{BreakerFailures: guard.DefaultBreakerFailures, BreakerCooloff: guard.DefaultBreakerCooloff},
	}, {
		name:    "a password file and the environment both",
		args:    []string{"--store", "redis", "--redis-password-file", secretFile},
		env:     "fromenv",
		wantErr: true,
	}, {
		name:    "an empty password file",
		args:    []string{"--store", "redis", "--redis-password-file", emptyFile},
		wantErr: true,
	}, {
		name:    "a missing password file",
		args:    []string{"--store", "redis", "--redis-password-file", filepath.Join(dir, "absent")},
		wantErr: true,
	}, {
		name:    "an unknown failure mode",
		args:    []string{"--store", "redis", "--redis-failure-mode", "maybe"},
		wantErr: true,
	}, {
		name:  "upstream's key layout: counters, and no prefix unless given, as upstream's CACHE_KEY_PREFIX",
		args:  []string{"--store", "redis", "--redis-key-layout", "upstream"},
		want:  redisstore.Config{Addr: "127.0.0.1:6379", Timeout: redisstore.DefaultTimeout, Counters: true},
		guard: guard.Config{BreakerFailures: guard.DefaultBreakerFailures, BreakerCooloff: guard.DefaultBreakerCooloff},
	}, {
		name:  "upstream's key layout under a prefix",
		args:  []string{"--redis-key-prefix", "rl_", "--store", "redis", "--redis-key-layout", "upstream"},
		want:  redisstore.Config{Addr: "127.0.0.1:6379", Timeout: redisstore.DefaultTimeout, Counters: true, KeyPrefix: "rl_"},
		guard: guard.Config{BreakerFailures: guard.DefaultBreakerFailures, BreakerCooloff: guard.DefaultBreakerCooloff},
	}, {
		name:  "ratelimitd's key layout, said",
		args:  []string{"--store", "redis", "--redis-key-layout", "ratelimitd"},
		want:  redisstore.Config{Addr: "127.0.0.1:6379", Timeout: redisstore.DefaultTimeout, KeyPrefix: redisstore.DefaultKeyPrefix},
		guard: guard.Config{BreakerFailures: guard.DefaultBreakerFailures, BreakerCooloff: guard.DefaultBreakerCooloff},
	}, {
		name:    "upstream's key layout without Redis",
		args:    []string{"--redis-key-layout", "upstream"},
		wantErr: true,
	}, {
		name:    "an unknown key layout",
		args:    []string{"--store", "redis", "--redis-key-layout", "envoy"},
		wantErr: true,
	}, {
		name:    "a client certificate without its key",
		args:    []string{"--store", "redis", "--redis-tls-cert", "c.pem"},
		wantErr: true,
	}, {
		name:    "a client key without its certificate",
		args:    []string{"--store", "redis", "--redis-tls-key", "k.pem"},
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("RATELIMITD_REDIS_PASSWORD", tt.env)
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var cfg daemon.Config
			f := addRedisFlags(fs, &cfg)
			err := fs.Parse(tt.args)
			if err == nil {
				err = f.apply(&cfg)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want an error: %v", err, tt.wantErr)
			}
			if err == nil && !reflect.DeepEqual(cfg.Redis, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", cfg.Redis, tt.want)
			}
			if err == nil && !reflect.DeepEqual(cfg.RedisGuard, tt.guard) {
				t.Fatalf("guard: got  %+v\nwant %+v", cfg.RedisGuard, tt.guard)
			}
		})
	}
}

// TestSecretOnCommandLineRefused: a password on the command line is
// refused before anything starts, saying how to pass it instead and
// without repeating it.
func TestSecretOnCommandLineRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--store", "redis", "--redis-password", "hunter2"},
		{"-redis-password=hunter2"},
		{"--redis-password=hunter2", "--store", "redis"},
		{"--store", "redis", "--redis-sentinel-password", "hunter2"},
	} {
		var stderr strings.Builder
		if code := run(args, io.Discard, &stderr); code != 2 {
			t.Errorf("%q: exit status %d, want 2", args, code)
		}
		msg := stderr.String()
		file, env := "--redis-password-file", "$RATELIMITD_REDIS_PASSWORD"
		if strings.Contains(strings.Join(args, " "), "sentinel") {
			file, env = "--redis-sentinel-password-file", "$RATELIMITD_REDIS_SENTINEL_PASSWORD"
		}
		if !strings.Contains(msg, file) || !strings.Contains(msg, env) || strings.Contains(msg, "hunter2") {
			t.Errorf("%q: stderr %q: want how to pass the password instead, without the password", args, msg)
		}
	}
}
