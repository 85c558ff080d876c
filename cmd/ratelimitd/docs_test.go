package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/testkit/docsnippets"
)

// The documentation test runs every command of README.md, docs/ and
// examples/ as a new user would type it on a fresh clone, and compares what
// it prints with the sample output the page shows after it
// (internal/testkit/docsnippets has the rules). Each page runs in one bash session,
// in a temporary directory that links every top-level entry of the
// repository (so relative paths work and files the commands write stay out
// of the checkout), with the built daemon as `ratelimitd` and the pinned
// grpcurl (scripts/tools) on PATH. A line that starts the daemon
// (`ratelimitd --flags`, `go run ./cmd/ratelimitd`) is run by the test with
// the same flags on free ports, and the page's 127.0.0.1:8081 and :8080 are
// rewritten to them; a page whose commands call the daemon before any such
// line gets the default one. A command line that cannot run here is listed
// in excusedLines with the reason, so a new snippet is either run or
// deliberately excused. Python blocks run with /usr/bin/python3 (Debian's
// grpc), JavaScript blocks with node and client/polyglot's node_modules; a
// missing tool fails the test. A field a sample says varies is checked
// against the bounds the page states (varying). examples/ has no page
// today: its programs are run by their own tests (examples/httpservice,
// internal/api/envoyapi's example_test.go, kubernetes_test.go).

// excusedPages are pages whose commands another test runs.
var excusedPages = map[string]string{
	"docs/operations.md": "its snippets are run by a test of their own (issue 24: deploy/ and docs/operations.md)",
}

// excusedLines are the command lines (by page and start) that cannot run
// here, and why.
var excusedLines = []struct{ page, prefix, reason string }{
	{"README.md", "scripts/test", "runs the whole suite, this test included"},
	{"README.md", "go build -o ratelimitd ./cmd/ratelimitd", "the test builds the daemon with this very command (binary, main_test.go) and puts it on PATH"},
	{"README.md", "sha256sum -c --ignore-missing SHA256SUMS", "needs the files of a downloaded release"},
	{"README.md", "podman run", "podman: scripts/image-test runs the image this way"},
	{"README.md", "podman stop", "podman: scripts/image-test runs the image this way"},
	{"README.md", "ratelimitd --store redis --redis-addr 10.0.0.5:6379", "a Redis at another host's address; redis_test.go and internal/store/redis run real ones"},
	{"README.md", "ratelimitd --store redis --redis-cluster", "a Redis cluster of three hosts"},
	{"docs/redis.md", "ratelimitd --store redis --redis-addr 10.0.0.5:6379", "a Redis at another host's address; redis_test.go and internal/store/redis run real ones"},
	{"docs/redis.md", "ratelimitd --store redis --redis-cluster", "a Redis cluster of three hosts"},
	{"docs/envoy.md", "envoy -c examples/envoy/envoy.yaml", "Envoy is not installed here; internal/api/envoyapi/example_test.go validates the bootstrap with go-control-plane"},
	{"docs/envoy.md", "curl -i -H 'x-user-id: alice' 'http://127.0.0.1:10000/", "goes through Envoy (above)"},
}

// restartEach are pages whose every command block is shown on a fresh
// daemon (the page says so): the test restarts it before each block.
var restartEach = map[string]bool{"docs/clients.md": true}

// pageFiles writes the files a page describes in prose and YAML blocks
// before its commands run.
var pageFiles = map[string]func(t *testing.T, blocks []*docsnippets.Block, dir string){
	"docs/authz.md": func(t *testing.T, blocks []*docsnippets.Block, dir string) {
		domain := yamlBlock(t, blocks, "domain: shop            # and billing.yaml: domain: billing")
		authz := yamlBlock(t, blocks, "clients:\n  - name: shop\n    match: [{uri:")
		writeFile(t, filepath.Join(dir, "domains", "shop.yaml"), domain)
		writeFile(t, filepath.Join(dir, "domains", "billing.yaml"), strings.Replace(domain, "domain: shop", "domain: billing", 1))
		writeFile(t, filepath.Join(dir, "authz.yaml"), authz)
	},
}

// varying are the fields of sample outputs that the page says vary, for the
// sample of the page that contains sample, with what the page says of them.
var varying = []struct {
	page, sample string
	rules        map[string]docsnippets.Rule
}{
	// "retryAfter is the 5 s that 50 tokens take ... less the milliseconds
	// between the two calls": (0, 5s]; "and so do resetAfter's: the 80 s
	// the emptied bucket takes to fill, less the same".
	{"README.md", `"retryAfter": "4.993424707s",`, map[string]docsnippets.Rule{
		"retryAfter":            docsnippets.DurationWithin(1, 5*time.Second),
		"statuses.1.retryAfter": docsnippets.DurationWithin(1, 5*time.Second),
		"statuses.1.resetAfter": docsnippets.DurationWithin(75*time.Second, 80*time.Second),
	}},
	// "login_attempts counts per clock hour (a fixed window), so its
	// durationUntilReset and the headers' seconds are the time left in the
	// current hour".
	{"docs/envoy.md", `"durationUntilReset": "2734.759301481s"`, map[string]docsnippets.Rule{
		"statuses.1.durationUntilReset": docsnippets.DurationWithin(1, time.Hour),
		"responseHeadersToAdd.2.value":  docsnippets.IntegerWithin(1, 3600),
		"responseHeadersToAdd.3.value":  docsnippets.IntegerWithin(1, 3600),
	}},
}

func TestDocsReproduce(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range []struct{ path, install string }{
		{filepath.Join(root, ".bin", "grpcurl"), "scripts/tools"},
		{filepath.Join(root, ".bin", "buf"), "scripts/tools"},
		{filepath.Join(root, "client", "polyglot", "node_modules", "@grpc", "grpc-js"), "client/polyglot/install.sh"},
		{"/usr/lib/python3/dist-packages/grpc", "client/polyglot/install.sh"},
	} {
		if _, err := os.Stat(need.path); err != nil {
			t.Fatalf("%s is missing: run %s (scripts/test does)", need.path, need.install)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	more, _ := filepath.Glob(filepath.Join(root, "examples", "*", "*.md"))
	pages = append(append([]string{filepath.Join(root, "README.md")}, pages...), more...)
	used := &docsUsage{excuses: map[int]bool{}, varying: map[int]bool{}}
	for _, path := range pages {
		page, _ := filepath.Rel(root, path)
		if excusedPages[page] != "" {
			continue
		}
		t.Run(page, func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s := newDocSession(t, root, page, filepath.Dir(bin))
			blocks := docsnippets.Parse(string(text))
			if write := pageFiles[page]; write != nil {
				write(t, blocks, s.dir)
			}
			for _, b := range blocks {
				s.runBlock(t, b, used)
			}
		})
	}
	t.Cleanup(func() {
		for i, e := range excusedLines {
			if !used.excuses[i] && !t.Failed() {
				t.Errorf("%s: no command line starts with %q: drop it from excusedLines", e.page, e.prefix)
			}
		}
		for i, v := range varying {
			if !used.varying[i] && !t.Failed() {
				t.Errorf("%s: no sample output contains %s: mend its varying rules", v.page, v.sample)
			}
		}
	})
}

// docsUsage records which excuses and varying rules the pages used.
type docsUsage struct {
	sync.Mutex
	excuses map[int]bool
	varying map[int]bool
}

// docSession is one page's bash session and daemon.
type docSession struct {
	root, page, dir string
	stdin           io.Writer
	out             *bufio.Reader
	daemon          *process
	daemonArgs      []string // the page's daemon command's flags
	blocks          int
}

func newDocSession(t *testing.T, root, page, binDir string) *docSession {
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "--norc", "--noprofile")
	cmd.Dir = dir
	// curl shows a progress meter when its output is not a terminal; the
	// pages show what a terminal shows.
	curlHome := t.TempDir()
	writeFile(t, filepath.Join(curlHome, ".curlrc"), "silent\nshow-error\n")
	cmd.Env = append(os.Environ(), "PATH="+binDir+":"+filepath.Join(root, ".bin")+":"+os.Getenv("PATH"), "CURL_HOME="+curlHome)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // bash and whatever it still runs
		cmd.Wait()
	})
	return &docSession{root: root, page: page, dir: dir, stdin: stdin, out: bufio.NewReader(stdout)}
}

const doneMarker = "__docs_test_done__"

// sh runs script in the session (sourced, stdin from /dev/null) and returns
// its output, stdout and stderr together, and exit status.
func (s *docSession) sh(t *testing.T, script string) (string, int) {
	t.Helper()
	s.blocks++
	file := filepath.Join(s.dir, fmt.Sprintf(".block%d.sh", s.blocks))
	writeFile(t, file, script)
	fmt.Fprintf(s.stdin, "source %s </dev/null 2>&1; printf '\\n%s %%d\\n' $?\n", file, doneMarker)
	type result struct {
		out  string
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var out strings.Builder
		for {
			line, err := s.out.ReadString('\n')
			if err != nil {
				done <- result{out.String(), -1, err}
				return
			}
			if rest, ok := strings.CutPrefix(line, doneMarker+" "); ok {
				code, _ := strconv.Atoi(strings.TrimSpace(rest))
				done <- result{strings.TrimSuffix(out.String(), "\n"), code, nil}
				return
			}
			out.WriteString(line)
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("bash: %v\n%s", r.err, r.out)
		}
		return r.out, r.code
	case <-time.After(time.Minute):
		t.Fatalf("%s did not finish", script)
		return "", 0
	}
}

var daemonLine = regexp.MustCompile(`^(?:ratelimitd|go run \./cmd/ratelimitd)((?:\s+--\S+(?:\s+[^-\s#]\S*)?)*)\s*(?:#.*)?$`)

// logicalLines splits a shell block into its lines, a line ending in a
// backslash joined with the next.
func logicalLines(text string) []string {
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		cur.WriteString(l)
		if strings.HasSuffix(l, `\`) {
			cur.WriteString("\n")
			continue
		}
		lines = append(lines, cur.String())
		cur.Reset()
	}
	return lines
}

func (s *docSession) runBlock(t *testing.T, b *docsnippets.Block, used *docsUsage) {
	where := fmt.Sprintf("%s:%d", s.page, b.Line)
	switch b.Lang {
	case "sh", "python", "js":
	default:
		return
	}
	if restartEach[s.page] && s.daemon != nil {
		s.startDaemon(t, s.daemonArgs)
	}
	var script []string
	switch b.Lang {
	case "sh":
		lines := logicalLines(b.Text)
	lines:
		for _, line := range lines {
			for i, e := range excusedLines {
				if e.page == s.page && strings.HasPrefix(line, e.prefix) {
					used.Lock()
					used.excuses[i] = true
					used.Unlock()
					continue lines
				}
			}
			joined := strings.ReplaceAll(line, "\\\n", " ")
			if m := daemonLine.FindStringSubmatch(joined); m != nil && !strings.Contains(line, "--version") && !strings.Contains(line, "--help") {
				args := strings.Fields(m[1])
				for i, a := range args {
					if a == "127.0.0.1:9090" { // --admin-addr: a free port
						args[i] = "127.0.0.1:0"
					}
				}
				s.startDaemon(t, args)
				continue
			}
			script = append(script, line)
		}
	case "python":
		writeFile(t, filepath.Join(s.dir, fmt.Sprintf("block%d.py", b.Line)), s.rewrite(t, b.Text))
		script = []string{fmt.Sprintf("/usr/bin/python3 block%d.py", b.Line)}
	case "js":
		writeFile(t, filepath.Join(s.dir, fmt.Sprintf("block%d.js", b.Line)), s.rewrite(t, b.Text))
		script = []string{fmt.Sprintf("NODE_PATH=%s node block%d.js", filepath.Join(s.root, "client", "polyglot", "node_modules"), b.Line)}
	}
	if len(script) == 0 {
		if b.Output != nil {
			t.Errorf("%s: a sample output after commands that do not run here", where)
		}
		return
	}
	var vary map[string]docsnippets.Rule
	if b.Output != nil {
		for i, v := range varying {
			if v.page == s.page && strings.Contains(b.Output.Text, v.sample) {
				vary = v.rules
				used.Lock()
				used.varying[i] = true
				used.Unlock()
			}
		}
	}
	// A block whose lines state their outcomes runs line by line; the
	// sample output, if any, is that of its one line without.
	var perLine bool
	for _, line := range script {
		if _, _, ok := docsnippets.ParseExpectation(line); ok {
			perLine = true
		}
	}
	if !perLine {
		out, code := s.sh(t, s.rewrite(t, strings.Join(script, "\n")))
		s.check(t, where, b.Output, vary, out, code)
		return
	}
	sampled := false
	for _, line := range script {
		command, e, ok := docsnippets.ParseExpectation(line)
		out, code := s.sh(t, s.rewrite(t, command))
		if ok {
			if err := e.Check(out, code); err != nil {
				t.Errorf("%s: %s\n%v", where, line, err)
			}
			continue
		}
		if b.Output != nil && sampled {
			t.Errorf("%s: a sample output after more than one command without an outcome comment", where)
		}
		sampled = true
		s.check(t, where+": "+line, b.Output, vary, out, code)
	}
}

// check compares a command's output with the sample (nil: none shown).
func (s *docSession) check(t *testing.T, where string, sample *docsnippets.Block, vary map[string]docsnippets.Rule, out string, code int) {
	t.Helper()
	if sample == nil {
		if code != 0 {
			t.Errorf("%s: exit status %d:\n%s", where, code, out)
		}
		return
	}
	isError := strings.HasPrefix(sample.Text, "ERROR:")
	if code != 0 && !isError {
		t.Errorf("%s: exit status %d:\n%s", where, code, out)
		return
	}
	var err error
	if sample.Lang == "json" {
		err = docsnippets.MatchJSON(sample.Text, out, withChargedAt(vary, sample.Text))
	} else {
		err = docsnippets.MatchText(sample.Text, out)
	}
	if err != nil {
		t.Errorf("%s: %v", where, err)
	}
}

// startDaemon (re)starts the page's daemon with the flags of its command.
func (s *docSession) startDaemon(t *testing.T, args []string) {
	if s.daemon != nil {
		s.daemon.cmd.Process.Kill()
		<-s.daemon.exited
	}
	s.daemonArgs = args
	s.daemon = startProcessIn(t, s.dir, args...)
}

// rewrite points the page's addresses at the test's daemon, starting the
// default one if the page has not started one.
func (s *docSession) rewrite(t *testing.T, text string) string {
	if !strings.Contains(text, "127.0.0.1:8081") && !strings.Contains(text, "127.0.0.1:8080") {
		return text
	}
	if s.daemon == nil {
		s.startDaemon(t, nil)
	}
	return strings.NewReplacer("127.0.0.1:8081", s.daemon.grpc, "127.0.0.1:8080", s.daemon.http).Replace(text)
}

// yamlBlock is the text of the page's YAML block that starts with prefix.
func yamlBlock(t *testing.T, blocks []*docsnippets.Block, prefix string) string {
	for _, b := range blocks {
		if b.Lang == "yaml" && strings.HasPrefix(b.Text, prefix) {
			return b.Text
		}
	}
	t.Fatalf("no YAML block starts with %q", prefix)
	return ""
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// withChargedAt adds to rules, for a sample that shows a status's
// chargedAt (the instant the daemon decided it at, which a sample cannot
// know), that every status's holds a time near now.
func withChargedAt(rules map[string]docsnippets.Rule, sample string) map[string]docsnippets.Rule {
	if !strings.Contains(sample, `"chargedAt"`) {
		return rules
	}
	all := map[string]docsnippets.Rule{"statuses.*.chargedAt": docsnippets.TimeNear(10 * time.Minute)}
	for path, r := range rules {
		all[path] = r
	}
	return all
}
