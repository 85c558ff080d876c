package main

import (
	"flag"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
)

func TestRedisFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     string
		want    redisstore.Config
		wantErr bool
	}{{
		name: "standalone with every option",
		args: []string{"--store", "redis", "--redis-addr", "10.1.2.3:6380", "--redis-timeout", "50ms", "--redis-failure-mode", "closed",
			"--redis-key-prefix", "rl:", "--redis-deny-cache", "1000", "--redis-username", "rl", "--redis-password", "s3cret"},
		want: redisstore.Config{Addr: "10.1.2.3:6380", Timeout: 50 * time.Millisecond, FailureMode: redisstore.FailClosed,
			KeyPrefix: "rl:", DenyCache: 1000, Username: "rl", Password: "s3cret"},
	}, {
		name: "cluster seeds replace the address; the password from the environment",
		args: []string{"--store", "redis", "--redis-cluster", "a:7000, b:7001,", "--redis-spread-keys"},
		env:  "fromenv",
		want: redisstore.Config{ClusterAddrs: []string{"a:7000", "b:7001"}, SpreadKeys: true, Password: "fromenv",
			Timeout: redisstore.DefaultTimeout, KeyPrefix: redisstore.DefaultKeyPrefix},
	}, {
		name:    "an unknown failure mode",
		args:    []string{"--store", "redis", "--redis-failure-mode", "maybe"},
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
		})
	}
}
