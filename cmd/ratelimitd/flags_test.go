package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A mistake on the command line is told in two lines — the mistake, naming
// the flag (and a near one for a typo), then where the help is — never
// followed by every flag's description; --help still prints them all.
func TestFlagMistakesAreShort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args      []string
		code      int
		firstLine string
	}{
		{[]string{"--max-memroy", "1GiB"}, 2, "ratelimitd: unknown flag --max-memroy (did you mean --max-memory?)"},
		{[]string{"--max-memory", "256M"}, 2, `ratelimitd: --max-memory "256M": want a positive whole number of bytes`},
		{[]string{"--shadow-mode=maybe"}, 2, `ratelimitd: --shadow-mode "maybe": want true or false`},
		{[]string{"--no-such-thing"}, 2, "ratelimitd: unknown flag --no-such-thing\n"},
		{[]string{"simulate", "--pattrn", "steady"}, 2, "ratelimitd simulate: unknown flag --pattrn (did you mean --pattern?)"},
		{[]string{"bench", "--targt", "x:1"}, 2, "ratelimitd bench: unknown flag --targt (did you mean --target?)"},
		{[]string{"check-config", "--max-policy-byte", "1", "p"}, 2, "ratelimitd check-config: unknown flag --max-policy-byte (did you mean --max-policy-bytes?)"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		out := stderr.String()
		if code != tt.code || !strings.HasPrefix(out, tt.firstLine) {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit %d, starting %q", tt.args, code, out, tt.code, tt.firstLine)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "run 'ratelimitd") || !strings.HasSuffix(lines[1], "--help' for every flag") {
			t.Errorf("%q: stderr has %d lines, want the mistake and a pointer to --help:\n%s", tt.args, len(lines), out)
		}
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "-max-memory") || !strings.Contains(stderr.String(), "-state-file") {
		t.Errorf("--help: exit %d, want 0 and every flag described; got:\n%s", code, stderr.String())
	}
}

// A policy path that is not there names --config; one that holds
// envoyproxy/ratelimit's runtime root names the directory to give instead.
func TestConfigPathMistakes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	policies := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "shop.yaml"), []byte("domain: shop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(root, "missing")
	tests := []struct {
		config string
		want   string
	}{
		{missing, "ratelimitd: --config " + missing + ": no such file or directory\n"},
		{root, "ratelimitd: " + root + ": no policy files (*.yaml, *.yml), but " + policies + " has some: envoyproxy/ratelimit keeps them one level down, in RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config; give that directory\n"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run([]string{"--config", tt.config, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, &stdout, &stderr)
		if code != 1 || !strings.HasSuffix(stderr.String(), tt.want) {
			t.Errorf("--config %s: exit %d, stderr:\n%s\nwant exit 1, ending %q", tt.config, code, stderr.String(), tt.want)
		}
	}
}

// TestHelpGroupsEveryFlag: --help lists every flag of the daemon once,
// under a topic, the common ones first; a new flag must be given a topic
// in flagGroups, not fall into "Other".
func TestHelpGroupsEveryFlag(t *testing.T) {
	var help strings.Builder
	if code := run([]string{"--store", "redis", "--help"}, io.Discard, &help); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	out := help.String()
	grouped := map[string]string{}
	for _, g := range flagGroups {
		for _, name := range g.flags {
			if other, dup := grouped[name]; dup {
				t.Errorf("-%s in both %q and %q", name, other, g.title)
			}
			grouped[name] = g.title
		}
	}
	listed := map[string]int{}
	section, first := "", ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			section = strings.TrimSuffix(line, ":")
			continue
		}
		if m := regexp.MustCompile(`^  -([a-z0-9-]+)`).FindStringSubmatch(line); m != nil {
			listed[m[1]]++
			if first == "" {
				first = section
			}
			if want := grouped[m[1]]; want != section {
				t.Errorf("-%s under %q, want %q (flagGroups)", m[1], section, want)
			}
		}
	}
	if first != "Common" {
		t.Errorf("--help's first section is %q, want Common", first)
	}
	for name, n := range listed {
		if n != 1 {
			t.Errorf("-%s listed %d times", name, n)
		}
	}
	for name := range grouped {
		if listed[name] == 0 {
			t.Errorf("flagGroups names -%s, which --help does not list (no such flag?)", name)
		}
	}
	if !strings.Contains(out, `-store string`+"\n"+`    	where buckets live: memory (this daemon's own) or redis (shared by every daemon on the same Redis; see docs/redis.md) (default "memory")`) {
		t.Errorf("-store's default is not the default (a flag parsed before --help shown as the default?):\n%s", out)
	}
}

// TestContradictoryFlags: flags that cannot go together, or a state file
// in a directory that does not exist, are a usage error (exit 2) told in
// one line naming them, before any log line.
func TestContradictoryFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--xds-server", "127.0.0.1:1", "--config", "p.yaml"}, "ratelimitd: --config and --xds-server: "},
		{[]string{"--quota-daemons", "2", "--store", "redis", "--redis-addr", "127.0.0.1:1"}, "ratelimitd: --quota-daemons 2 with --store redis: "},
		{[]string{"--state-file", "s", "--store", "redis", "--redis-addr", "127.0.0.1:1"}, "ratelimitd: --state-file with --store redis: "},
		{[]string{"--xds-server", "127.0.0.1:1", "--state-file", "s"}, "ratelimitd: --state-file and --xds-server: "},
		{[]string{"--authz-policy", "a.yaml"}, "ratelimitd: --authz-policy without --admin-addr: "},
		{[]string{"--state-file", "/no/such/dir/buckets.snap"}, "ratelimitd: --state-file /no/such/dir/buckets.snap: the directory /no/such/dir does not exist"},
	} {
		var stdout, stderr strings.Builder
		code := run(tc.args, &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line starting %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
