package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/store/guard"
)

// TestScriptCommands: Check runs on its own every command that the
// scripts call, so that a refusal names it: each has an entry in
// commands, and the commands are those the scripts call.
func TestScriptCommands(t *testing.T) {
	cmds := scriptCommands()
	for _, want := range []string{"GET", "SET", "SETRANGE", "TIME"} {
		if !slices.Contains(cmds, want) {
			t.Errorf("the scripts call %v, not %s: is the parsing of redis.call broken?", cmds, want)
		}
	}
	for _, c := range cmds {
		if commands[c] == nil {
			t.Errorf("the scripts call %s, which Check does not run on its own: add it to commands (and to the ACL in docs/redis.md)", c)
		}
	}
	for c := range commands {
		if !slices.Contains(cmds, c) {
			t.Errorf("Check runs %s, which no script calls", c)
		}
	}
}

// redisError is an error as Redis replies it (go-redis's Error).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestConfigError: Redis's refusals for the configuration are
// *guard.ConfigError, wrapped or not; outages and Redis's other errors
// are not.
func TestConfigError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{redisError("NOPERM this user has no permissions to run the 'setrange' command"), true},
		{redisError("NOPERM No permissions to access a key"), true},
		{redisError("WRONGPASS invalid username-password pair or user is disabled."), true},
		{redisError("NOAUTH Authentication required."), true},
		{redisError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"), true},
		{redisError("ERR unknown command 'evalsha', with args beginning with: "), true},
		{redisError("ERR The user executing the script can't run this command or subcommand script: 4cf7, on @user_script:1."), true},
		{redisError("ERR Unknown Redis command called from script script: 4bb5, on @user_script:1."), true},
		{redisError("NOSCRIPT No matching script. Please use EVAL."), true},
		{fmt.Errorf("SETRANGE (which the scripts call): %w", redisError("NOPERM this user has no permissions to run the 'setrange' command")), true},
		{&guard.SharedFailure{Err: redisError("NOPERM this user has no permissions to run the 'evalsha' command"), Exchange: 3}, true},
		{redisError("LOADING Redis is loading the dataset in memory"), false},
		{redisError("BUSY Redis is busy running a script."), false},
		{redisError("MOVED 3999 127.0.0.1:6381"), false},
		{redisError("ERR Error running script (call to f_1): @user_script:12: bad argument"), false},
		{context.DeadlineExceeded, false},
		{errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), false},
		{nil, false},
	}
	for _, tt := range tests {
		err := configError(tt.err)
		if got := guard.IsConfigError(err); got != tt.want {
			t.Errorf("configError(%v): a configuration error %v, want %v", tt.err, got, tt.want)
		}
		if tt.err != nil && !errors.Is(err, tt.err) {
			t.Errorf("configError(%v) = %v: lost the error", tt.err, err)
		}
		var sf *guard.SharedFailure
		if errors.As(tt.err, &sf) && !errors.As(err, &sf) {
			t.Errorf("configError(%v) hides the shared failure", tt.err)
		}
	}
}
