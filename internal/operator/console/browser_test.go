package console_test

import (
	"context"
	"fmt"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/observe/topdenied"
)

// chromiumPath is Debian's chromium, which scripts/test installs.
const chromiumPath = "/usr/bin/chromium"

// artifactDir is where the browser test saves its screenshots:
// $RATELIMITD_ARTIFACTS/console, or .artifacts/console at the repository's
// root (git-ignored). docs/console/ holds copies of current ones.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("RATELIMITD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", ".artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts headless Chromium for the test, collecting every console
// error or warning and uncaught exception of its page.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		t.Fatalf("%s is missing (scripts/test installs Debian's chromium): %v", chromiumPath, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	var mu sync.Mutex
	var problems []string
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, fmt.Sprintf("exception: %s (line %d)", ev.ExceptionDetails.Text, ev.ExceptionDetails.LineNumber))
		case *cdplog.EventEntryAdded: // failed loads, CSP violations
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log.%s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}))
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// do runs steps in the browser, at most 20 seconds.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one action that returns a value, at most 20 seconds.
func value[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := value(t, ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err := os.WriteFile(filepath.Join(artifactDir(t), name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleInABrowser drives the console in headless Chromium against a
// real daemon serving the embedded default policy: the page loads with no
// console errors, shows the policy tree, the live chart moves after calls,
// a denied user appears among the most denied, an inspection peeks, and the
// simulator draws the window-boundary comparison.
func TestConsoleInABrowser(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) { c.ConsoleValues = topdenied.Plain })
	c := rl.NewRateLimitServiceClient(d.Dial(t))
	ctx, problems := browser(t)
	base := "http://" + d.HTTPAddr()

	// Policies: the default policy's three tiers. The first action starts
	// the browser, which lives as long as ctx: no timeout on it.
	enableLog := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{})
		return err
	})
	if err := chromedp.Do(ctx, enableLog, chromedp.Navigate(base+"/console")); err != nil {
		t.Fatalf("opening the console: %v", err)
	}
	do(t, ctx, "policies", chromedp.WaitVisible(`#policy-tree details.domain`))
	tree := value(t, ctx, chromedp.Text(`#policy-tree`))
	for _, want := range []string{"domain default", "generic_key=global", "per-endpoint", "per-user-per-endpoint", "token_bucket · 600 per 1m0s · burst 800"} {
		if !strings.Contains(tree, want) {
			t.Errorf("policy tree lacks %q:\n%s", want, tree)
		}
	}
	screenshot(t, ctx, "policies")

	// Live: open it (the first sample is the baseline), then call.
	do(t, ctx, "live", chromedp.Click(`#tabs button[data-tab=live]`), chromedp.WaitVisible(`#live-total svg`))
	alice := func(hits uint32) rl.Code {
		r, err := c.ShouldRateLimit(context.Background(), &rl.ShouldRateLimitRequest{Domain: "default", Hits: hits,
			Descriptors: []*rl.Descriptor{desc("path", "/orders"), desc("path", "/orders", "user", "alice")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.OverallCode
	}
	if code := alice(800); code != rl.Code_CODE_OK {
		t.Fatalf("draining alice's 800: %v", code)
	}
	var note string
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(note, "denied/s") || strings.Contains(note, " 0.0 denied/s") {
		if time.Now().After(deadline) {
			t.Fatalf("the live view did not show denials; it says %q", note)
		}
		for range 20 {
			if code := alice(1); code != rl.Code_CODE_OVER_LIMIT {
				t.Fatalf("alice after her 800: %v; want over limit", code)
			}
		}
		time.Sleep(300 * time.Millisecond)
		note = value(t, ctx, chromedp.Text(`#live-note`))
	}
	// The chart moves: keep calling until it has drawn a few samples.
	for {
		if n, _ := strconv.Atoi(value(t, ctx, chromedp.AttributeValue(`#live-total svg`, "data-points")).Value); n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the live chart did not draw three samples")
		}
		alice(1)
		time.Sleep(100 * time.Millisecond)
	}
	// A rule is named as the Policies tab names it (rate_limit.name), its
	// descriptor path on hover.
	if rows := value(t, ctx, chromedp.Text(`#live-rules tbody`)); !strings.Contains(rows, "per-user-per-endpoint") || strings.Contains(rows, "path.user") {
		t.Errorf("busiest rules do not name the per-user rule per-user-per-endpoint:\n%s", rows)
	}
	if hover := value(t, ctx, chromedp.AttributeValue(`#live-rules tbody span[title="path.user"]`, "title")); hover.Value != "path.user" {
		t.Errorf("the per-user rule's descriptor path on hover: %q", hover.Value)
	}
	screenshot(t, ctx, "live")

	// Who is limited: alice, on /orders.
	do(t, ctx, "top", chromedp.Click(`#tabs button[data-tab=top]`), chromedp.WaitVisible(`#top-table tbody tr td code`))
	if top := value(t, ctx, chromedp.Text(`#top-table tbody`)); !strings.Contains(top, "default: path=/orders, user=alice") {
		t.Errorf("most denied lacks alice:\n%s", top)
	}
	screenshot(t, ctx, "top-denied")

	// Quota: a client of the global tier, its demand and share.
	qs, err := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(t)).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "default", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"generic_key": "global"}}, NumRequestsAllowed: 7},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := qs.Recv(); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "quota", chromedp.Click(`#tabs button[data-tab=quota]`), chromedp.WaitVisible(`#quota-table tbody tr.quota-bucket`))
	q := value(t, ctx, chromedp.Text(`#quota-table tbody`))
	if !strings.Contains(q, "default: generic_key=global global · 6000 per 1 min") {
		t.Errorf("the quota view lacks the global tier's bucket, named global, 6000 per 1 min:\n%s", q)
	}
	if long := regexp.MustCompile(`\d\.\d{3,}`).FindString(q); long != "" || strings.Contains(q, "generic_key_global") {
		t.Errorf("the quota view shows %q: durations not rounded for people, or a stat key for a name:\n%s", long, q)
	}
	screenshot(t, ctx, "quota")

	// Inspect: alice's bucket is empty; the endpoint's holds what is left.
	do(t, ctx, "inspect", chromedp.Click(`#tabs button[data-tab=inspect]`), chromedp.Click(`#inspect-form button`), chromedp.WaitVisible(`#inspect-table tbody tr`))
	if inspected := value(t, ctx, chromedp.Text(`#inspect-table tbody`)); !strings.Contains(inspected, "per-user-per-endpoint") || !strings.Contains(inspected, "per-endpoint") ||
		regexp.MustCompile(`\d\.\d{3,}`).MatchString(inspected) {
		t.Errorf("inspection (names, durations rounded for people):\n%s", inspected)
	}
	screenshot(t, ctx, "inspect")

	// Simulate: the defaults are the window-boundary comparison.
	do(t, ctx, "simulate", chromedp.Click(`#tabs button[data-tab=simulate]`), chromedp.WaitVisible(`#sim-chart svg g.lane`))
	fixed := value(t, ctx, chromedp.AttributeValue(`#sim-chart svg g[data-lane=fixed_window]`, "data-max-admitted-in"))
	sliding := value(t, ctx, chromedp.AttributeValue(`#sim-chart svg g[data-lane=sliding_window]`, "data-max-admitted-in"))
	if fixed.Value != "20" || sliding.Value != "10" {
		t.Errorf("boundary comparison drawn: fixed window admits %q within a minute, sliding window %q; want 20 and 10", fixed.Value, sliding.Value)
	}
	screenshot(t, ctx, "simulate")

	// A concurrency alone, its requests holding a second, one in four never
	// released: the totals say how many released.
	do(t, ctx, "simulate a concurrency",
		chromedp.Evaluate[chromedp.Void](`(() => {
			const f = document.querySelector("#sim-form");
			for (const c of f.querySelectorAll("input[name=alg]")) c.checked = c.value === "concurrency";
			const set = {requests: "3", period: "1m", pattern: "steady", rate: "2", duration: "3m", hold: "1s", unreleased: "0.25"};
			for (const [k, v] of Object.entries(set)) f.elements[k].value = v;
		})()`),
		chromedp.Click(`#sim-form button[type=submit]`),
		chromedp.WaitVisible(`#sim-totals tr[data-lane=concurrency] td.released`))
	if row := value(t, ctx, chromedp.Text(`#sim-totals tr[data-lane=concurrency]`)); strings.Join(strings.Fields(row), " ") != "concurrency 36 324 12 27" {
		t.Errorf("the concurrency's totals: %q, want admitted 36, denied 324, 12 within the lease, 27 released", row)
	}
	if n := value(t, ctx, chromedp.Evaluate[float64](`document.querySelectorAll("#sim-chart svg g.lane").length`)); n != 1 {
		t.Errorf("%v lanes drawn, want the concurrency's alone", n)
	}
	screenshot(t, ctx, "simulate-concurrency")

	if p := problems(); len(p) > 0 {
		t.Errorf("the page logged problems:\n%s", strings.Join(p, "\n"))
	}
}
