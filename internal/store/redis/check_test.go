package redis

import (
	"slices"
	"testing"
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
