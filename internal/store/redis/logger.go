package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// clientLogger sends go-redis's own log lines (connection pool and cluster
// topology messages, printf-style) to a structured logger, as warnings
// with component=go-redis, instead of go-redis's default: unstructured
// lines on stderr.
type clientLogger struct{ log *slog.Logger }

// Failures to connect, which go-redis logs on every attempt (a ping or a
// probe a second while Redis is down), are logged at debug level: the
// store's own warnings say that Redis is down, and why.
func (l clientLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "connection pool: failed to dial") {
		level = slog.LevelDebug
	}
	l.log.Log(ctx, level, msg, "component", "go-redis")
}

// SetClientLogger sends the log lines of go-redis, the Redis client, to
// log. go-redis has one logger for the whole process: the last call wins.
// New calls it with Config.Logger.
func SetClientLogger(log *slog.Logger) { goredis.SetLogger(clientLogger{log}) }

// dialHook remembers the outcome of the client's last attempt to connect
// to a node, so that a request that times out while the client cannot
// connect is reported as what happened (say, connection refused) rather
// than as a deadline passed.
type dialHook struct{ last *atomic.Pointer[error] }

func (h dialHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && !isTimeout(err) {
			h.last.Store(&err)
		} else if err == nil {
			h.last.Store(nil)
		}
		return c, err
	}
}

func (h dialHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h dialHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// explain returns err, or when err is a timeout while the client's last
// attempt to connect failed otherwise (refused, unreachable, no such
// host...), that failure.
func (s *Store) explain(err error) error {
	if err == nil || !isTimeout(err) {
		return err
	}
	if d := s.lastDial.Load(); d != nil {
		return fmt.Errorf("cannot connect to redis: %w", *d)
	}
	return err
}
