// Command smoke checks a freshly started ratelimitd from outside, as a user
// would: scripts/image-test runs it against the container image. The
// daemon serves Policy (smoke -print-policy writes it out, for --config):
// a token bucket of 3 that refills once a day, so that no answer depends on
// how long the checks take. Smoke waits for /readyz, then asks for real
// decisions and checks the answers:
//
//   - ratelimit.v1 over gRPC: admitted by the rule "smoke", 2 left;
//   - ratelimit.v1 as JSON over HTTP: 200, admitted, 1 left;
//   - Envoy's v3 API over gRPC: admitted, 0 left (one bucket for all);
//   - ratelimit.v1 over gRPC again: denied, retry_after at most a day;
//   - upstream's /json over HTTP: 429, OVER_LIMIT;
//   - gRPC health: SERVING;
//   - over HTTP: /healthz, and /metrics counting exactly those decisions
//     (3 ok, 2 over_limit; the rule's 5 hits, 2 over the limit) and, with
//     -revision, ratelimitd_build_info naming that commit.
//
// The daemon must be fresh (no decision made before). With -restarted, it
// checks instead that a daemon restarted from the state file of one that
// passed still denies that bucket. Exit status 0 when every check holds, 1
// with the failed check otherwise.
//
// Usage:
//
//	smoke -grpc 127.0.0.1:8081 -http 127.0.0.1:8080 [-revision COMMIT] [-started-at UNIXNANO] [-timeout 30s]
//	smoke -grpc ... -http ... -restarted
//	smoke -print-policy
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// Policy is the policy file the checked daemon serves.
const Policy = `domain: smoke
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: token_bucket, burst: 3, name: smoke}
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("smoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc", "127.0.0.1:8081", "the daemon's gRPC `address`")
	httpAddr := fs.String("http", "127.0.0.1:8080", "the daemon's HTTP `address`")
	revision := fs.String("revision", "", "the `commit` ratelimitd_build_info must name (empty: not checked)")
	startedAt := fs.Int64("started-at", 0, "when the daemon was started, in Unix `nanoseconds`: report the time to ready from then")
	timeout := fs.Duration("timeout", 30*time.Second, "the most to wait for /readyz, and for all the checks")
	printPolicy := fs.Bool("print-policy", false, "print the policy the daemon must serve, and exit")
	restarted := fs.Bool("restarted", false, "check instead that the bucket a first run spent is still spent: a daemon restarted from its --state-file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *printPolicy {
		fmt.Fprint(stdout, Policy)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	if *startedAt != 0 {
		start = time.Unix(0, *startedAt)
	}
	s := smoke{grpc: *grpcAddr, http: "http://" + *httpAddr, revision: *revision}
	if err := s.waitReady(ctx); err != nil {
		fmt.Fprintf(stderr, "smoke: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ready %d ms after start\n", time.Since(start).Milliseconds())
	if *restarted {
		if err := s.checkSpent(ctx); err != nil {
			fmt.Fprintf(stderr, "smoke: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "smoke: ok: the bucket spent before the restart is still spent")
		return 0
	}
	if err := s.check(ctx); err != nil {
		fmt.Fprintf(stderr, "smoke: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "smoke: ok: decisions on one bucket over gRPC (ratelimit.v1, Envoy v3) and HTTP (JSON, /json), health, /healthz, /metrics")
	return 0
}

type smoke struct {
	grpc, http, revision string
}

// get returns the status and body of GET path on the HTTP port.
func (s smoke) get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.http+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// post returns the status and body of a JSON POST to path on the HTTP port.
func (s smoke) post(ctx context.Context, path, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.http+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReady polls /readyz every 20ms until it answers 200.
func (s smoke) waitReady(ctx context.Context) error {
	var last string
	for {
		code, body, err := s.get(ctx, "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %q", code, body)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("/readyz not 200 in time; last answer: %s", last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// request is the one ratelimit.v1 request the checks make.
var request = &rl.ShouldRateLimitRequest{Domain: "smoke", Descriptors: []*rl.Descriptor{{Entries: []*rl.Entry{{Key: "client", Value: "smoke"}}}}}

// checkSpent checks that the bucket a full run of check spent is still
// spent: one ratelimit.v1 call, denied.
func (s smoke) checkSpent(ctx context.Context) error {
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := rl.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request)
	if err != nil {
		return fmt.Errorf("ratelimit.v1 after the restart: %w", err)
	}
	if ra := resp.GetRetryAfter().AsDuration(); resp.GetOverallCode() != rl.Code_CODE_OVER_LIMIT || ra <= 0 || ra > 24*time.Hour {
		return fmt.Errorf("ratelimit.v1 after the restart: got %v, want CODE_OVER_LIMIT: the bucket was spent before it", resp)
	}
	return nil
}

func (s smoke) check(ctx context.Context) error {
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	v1 := rl.NewRateLimitServiceClient(conn)
	envoy := rlsv3.NewRateLimitServiceClient(conn)

	// Three tokens and no refill in the test's time: admitted over gRPC,
	// over HTTP (JSON) and over Envoy's API, all on the one bucket; then
	// denied over gRPC and over upstream's /json.
	req := request
	resp, err := v1.ShouldRateLimit(ctx, req)
	if err != nil {
		return fmt.Errorf("ratelimit.v1 call 1: %w", err)
	}
	if st := resp.GetStatuses(); resp.GetOverallCode() != rl.Code_CODE_OK || len(st) != 1 || !st[0].GetMatched() ||
		st[0].GetRule().GetName() != "smoke" || st[0].GetRemaining() != 2 {
		return fmt.Errorf("ratelimit.v1 call 1: got %v, want CODE_OK by rule smoke with 2 left", resp)
	}
	code, body, err := s.post(ctx, "/ratelimit.v1.RateLimitService/ShouldRateLimit", `{"domain":"smoke","descriptors":[{"entries":[{"key":"client","value":"smoke"}]}]}`)
	if err != nil {
		return fmt.Errorf("ratelimit.v1 over HTTP: %w", err)
	}
	var hr struct {
		OverallCode string `json:"overallCode"`
		Statuses    []struct {
			Remaining string `json:"remaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(body), &hr); err != nil || code != http.StatusOK || hr.OverallCode != "CODE_OK" ||
		len(hr.Statuses) != 1 || hr.Statuses[0].Remaining != "1" {
		return fmt.Errorf("ratelimit.v1 over HTTP: got %d %s, want 200 with CODE_OK and 1 left", code, body)
	}
	er, err := envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "smoke",
		Descriptors: []*rlsv3common.RateLimitDescriptor{{Entries: []*rlsv3common.RateLimitDescriptor_Entry{{Key: "client", Value: "smoke"}}}},
	})
	if err != nil {
		return fmt.Errorf("Envoy v3 call: %w", err)
	}
	if st := er.GetStatuses(); er.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(st) != 1 || st[0].GetLimitRemaining() != 0 {
		return fmt.Errorf("Envoy v3 call: got %v, want OK with 0 left (the bucket ratelimit.v1 charged)", er)
	}
	resp, err = v1.ShouldRateLimit(ctx, req)
	if err != nil {
		return fmt.Errorf("ratelimit.v1 call 3: %w", err)
	}
	if ra := resp.GetRetryAfter().AsDuration(); resp.GetOverallCode() != rl.Code_CODE_OVER_LIMIT || ra <= 0 || ra > 24*time.Hour {
		return fmt.Errorf("ratelimit.v1 call 3: got %v, want CODE_OVER_LIMIT with a retry_after in (0, 24h]", resp)
	}
	code, body, err = s.post(ctx, "/json", `{"domain":"smoke","descriptors":[{"entries":[{"key":"client","value":"smoke"}]}]}`)
	if err != nil {
		return fmt.Errorf("/json: %w", err)
	}
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"OVER_LIMIT"`) {
		return fmt.Errorf("/json: got %d %s, want 429 with OVER_LIMIT", code, body)
	}

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("gRPC health: %v %v, want SERVING", h, err)
	}

	if code, body, err := s.get(ctx, "/healthz"); err != nil || code != http.StatusOK {
		return fmt.Errorf("/healthz: %d %q %v, want 200", code, body, err)
	}
	code, body, err = s.get(ctx, "/metrics")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("/metrics: %d %v, want 200", code, err)
	}
	samples, err := parse(body)
	if err != nil {
		return fmt.Errorf("/metrics: %w", err)
	}
	for series, want := range map[string]float64{
		`ratelimitd_decisions_total{code="ok"}`:                                             3,
		`ratelimitd_decisions_total{code="over_limit"}`:                                     2,
		`ratelimitd_rule_hits_total{descriptor="",domain="smoke",rule="client"}`:            5,
		`ratelimitd_rule_over_limit_hits_total{descriptor="",domain="smoke",rule="client"}`: 2,
	} {
		if got, ok := samples[series]; !ok || got != want {
			return fmt.Errorf("/metrics: %s = %v (present: %v), want %v", series, got, ok, want)
		}
	}
	if s.revision != "" && !strings.Contains(body, `revision="`+s.revision+`"`) {
		return fmt.Errorf("/metrics: ratelimitd_build_info does not name revision %s:\n%s", s.revision, lines(body, "ratelimitd_build_info"))
	}
	return nil
}

// parse reads the samples of a Prometheus text exposition, keyed by their
// series as written: `name{label="value",...}`.
func parse(body string) (map[string]float64, error) {
	samples := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples, nil
}

func lines(text, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
