package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/testkit/docsnippets"
)

func TestSimulate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	csvPath, svgPath := filepath.Join(dir, "sim.csv"), filepath.Join(dir, "sim.svg")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"simulate", "--algorithms", "fixed_window,token_bucket", "--bin", "10s", "--csv", csvPath, "--svg", svgPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The default traffic is the window-boundary comparison.
	for _, want := range []string{
		"fixed_window         admitted     20  denied      0  most admitted within 1m0s: 20",
		"token_bucket         admitted     10  denied     10  most admitted within 1m0s: 10",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("totals lack %q:\n%s", want, stderr.String())
		}
	}
	csv, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(csv)), "\n"); len(lines) != 1+2*12 || !strings.Contains(string(csv), "\n50,fixed_window,10,0,") {
		t.Errorf("CSV: %d lines:\n%s", len(lines), csv)
	}
	if svg, err := os.ReadFile(svgPath); err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("SVG: %v %.40q", err, svg)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--algorithms", "gcra"}, `unknown algorithm "gcra"`},
		{[]string{"simulate", "--pattern", "steady", "--rate", "0"}, "rate: must be a positive"},
		{[]string{"simulate", "--pattern", "recorded", "--times", "1s,soon"}, `--times: "soon" is not a duration`},
		{[]string{"simulate", "--requests", "0"}, "requests must be positive"},
	} {
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestSimulateTokenBudget: --overdraft and --cost simulate a token budget
// charged after the fact, and the CSV says when it is in debt.
func TestSimulateTokenBudget(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := []string{"simulate", "--algorithms", "fixed_window", "--requests", "1000", "--period", "1m", "--overdraft", "--cost", "300",
		"--pattern", "steady", "--rate", "1", "--duration", "1m", "--bin", "10s"}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "fixed_window         admitted      4  denied     56"; !strings.Contains(stderr.String(), want) {
		t.Errorf("summary %q, want %q", stderr.String(), want)
	}
	if want := "0,fixed_window,4,6,0,0,1\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("CSV %q lacks the first interval in debt %q", stdout.String(), want)
	}
}

// TestSimulateConcurrencyHold: --hold and --unreleased give a concurrency
// lane requests that release their units, but for a fraction that never
// does; the totals count the releases. A rate beside it ignores them.
func TestSimulateConcurrencyHold(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := []string{"simulate", "--algorithms", "concurrency,token_bucket", "--requests", "3", "--period", "1m",
		"--pattern", "steady", "--rate", "2", "--hold", "1s", "--unreleased", "0.25", "--duration", "3m", "--csv", "-"}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{
		"concurrency          admitted     36  denied    324  most admitted within 1m0s: 12  released 27\n",
		"token_bucket         admitted     11  denied    349  most admitted within 1m0s: 5\n", // 3 at once, then one every 20s
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("totals lack %q:\n%s", want, stderr.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--algorithms", "concurrency", "--hold", "-1s"}, "hold: must not be negative"},
		{[]string{"simulate", "--algorithms", "concurrency", "--hold", "1s", "--unreleased", "1.5"}, "unreleased: must be a fraction"},
	} {
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestOperationsSimulateConcurrency runs docs/operations.md's simulation
// of a concurrency (its Console section's one command) and compares the
// totals it prints with the page's sample.
func TestOperationsSimulateConcurrency(t *testing.T) {
	t.Parallel()
	cmds := operationsSnippets(t, "## Console")
	if len(cmds) != 1 || len(cmds[0][1]) < 2 || cmds[0][1][0] != "ratelimitd" || cmds[0][1][1] != "simulate" {
		t.Fatalf("the Console section's commands: %q; want one ratelimitd simulate", cmds)
	}
	var stdout, stderr bytes.Buffer
	if code := run(cmds[0][1][1:], &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range docsnippets.Parse(string(doc)) {
		if b.Lang == "sh" && strings.HasPrefix(b.FirstLine(), "ratelimitd simulate --algorithms concurrency") {
			if b.Output == nil {
				t.Fatal("the simulation shows no sample output")
			}
			if err := docsnippets.MatchText(b.Output.Text, stderr.String()); err != nil {
				t.Error(err)
			}
			return
		}
	}
	t.Fatal("docs/operations.md has no ratelimitd simulate --algorithms concurrency block")
}
