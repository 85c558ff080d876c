package main

import (
	"bufio"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// toolchainView is what `go version -m` says of a binary: its module
// version and the commit it was stamped with ("unknown" when none; a git
// worktree, for one, is not stamped by the Go toolchain).
func toolchainView(t *testing.T, bin string) (version, commit string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	commit = "unknown"
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			version = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			commit = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	return version, commit
}

// TestVersion: --version prints the build as the Go toolchain recorded it
// in the binary, and so do the start log line and ratelimitd_build_info.
func TestVersion(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	version, commit := toolchainView(t, bin)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	line := regexp.MustCompile(`^ratelimitd (\S+) \(commit (\S+), (\S+), (modified, )?go\S+ linux/\w+\)\n$`)
	m := line.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("--version printed %q, want one line matching %s", out, line)
	}
	if m[1] != version || m[2] != commit {
		t.Errorf("--version says version %s, commit %s; go version -m says %s, %s", m[1], m[2], version, commit)
	}

	p := startProcess(t)
	start := `msg="ratelimitd starting" version=` + version + ` commit=` + commit + ` commit_time=` + m[3]
	if !strings.Contains(p.logs.String(), start) {
		t.Errorf("no start line %q in the logs:\n%s", start, p.logs)
	}
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metric := `ratelimitd_build_info{build_date="` + m[3] + `",goversion="`
	if !strings.Contains(string(body), metric) || !strings.Contains(string(body), `revision="`+commit+`",version="`+version+`"} 1`) {
		t.Errorf("/metrics has no ratelimitd_build_info for version %s, commit %s:\n%s", version, commit, grep(string(body), "build_info"))
	}
}

func grep(text, word string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestListenAddressesFromEnvironment: $RATELIMITD_GRPC_ADDR and
// $RATELIMITD_HTTP_ADDR set the listen addresses when the flags are not
// given (the container image sets them to all interfaces); a flag wins
// over them.
func TestListenAddressesFromEnvironment(t *testing.T) {
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(cmd.Environ(), "RATELIMITD_GRPC_ADDR=127.0.0.1:0", "RATELIMITD_HTTP_ADDR=127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1:]
			}
		}
	}()
	select {
	case a := <-found:
		for _, addr := range a {
			if !strings.HasPrefix(addr, "127.0.0.1:") || addr == "127.0.0.1:0" {
				t.Errorf("serving on %s, want the environment's 127.0.0.1 with a port", addr)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ratelimitd did not report serving with its addresses from the environment")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}

	// The flags win: an address in the environment that cannot be bound
	// does not matter when the flag is given.
	t.Setenv("RATELIMITD_GRPC_ADDR", "256.0.0.1:1")
	t.Setenv("RATELIMITD_HTTP_ADDR", "256.0.0.1:1")
	p := startProcess(t)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}
