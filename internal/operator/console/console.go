// Package console serves ratelimitd's web console: a read-only page for
// operators who would rather look than read, and the JSON (and text)
// endpoints it draws from.
//
//	GET /console                      the page (every asset embedded; no network fetches)
//	GET /console/api/policy           the policy in force and the reload status
//	GET /console/api/live             hits per second per rule, the last minute, from the daemon's own counters
//	GET /console/api/top?n=&format=   the most denied descriptors lately (format=text for terminals)
//	GET /console/api/inspect?domain=&entry=k=v&entry=…
//	                                  what each bucket along a descriptor holds now, charging nothing
//	POST /console/api/simulate        a simulation of traffic against limits, as SVG and totals
//	                                  (a JSON object of the parameters; Content-Type application/json)
//
// Every endpoint but simulate only reads; simulate costs CPU, so it takes
// a POST with a JSON body, which a web page of another origin cannot send
// without a CORS preflight that is never answered (a form, an image or a
// text/plain fetch cannot run it), runs one at a time (a second one
// meanwhile is answered 429), and stops when its request is cancelled
// or after SimulateTimeout.
//
// The console decides nothing: it reads the policy, the metrics' per-rule
// counters and the top-denied tracker, peeks through the engine (hits 0, which
// charges no bucket), and runs internal/operator/simulate. No endpoint walks the
// buckets, so its cost does not grow with the store.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/observe/topdenied"
	"github.com/ratelimitd/ratelimitd/internal/operator/admin"
	"github.com/ratelimitd/ratelimitd/internal/operator/simulate"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

//go:embed assets
var assets embed.FS

// ReloadStatus is the outcome of the policy reloads since start.
type ReloadStatus struct {
	// LastError is the last failed reload's error (with file:line), or ""
	// when no reload has failed since the last success.
	LastError string `json:"last_error,omitempty"`
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// Options is what the console reads.
type Options struct {
	// Policy returns the policy in force (called per request).
	Policy func() admin.Loaded
	// Reload returns the reload status (called per request).
	Reload func() ReloadStatus
	// Engine answers the inspect peeks.
	Engine *engine.Engine
	// RuleTotals reads the per-rule hit counters for the live view
	// (metrics.Metrics.RuleTotals).
	RuleTotals func(func(metrics.RuleTotal))
	// Top is the top-denied tracker.
	Top *topdenied.Tracker
	// Quota returns the buckets served by quota (RLQS), their clients,
	// demands and shares (nil: the view is empty).
	Quota func() []quotaservice.BucketView
}

// Console serves the page and its endpoints.
type Console struct {
	o         Options
	live      *live
	simulator chan struct{} // holds a token while a simulation runs
}

// SimulateTimeout is the longest a simulation runs: longer, it is stopped
// and answered 503.
const SimulateTimeout = 5 * time.Second

// maxSimulateBody bounds the body of a simulation request (recorded times
// included).
const maxSimulateBody = 1 << 20

// New returns a console reading what o names.
func New(o Options) *Console {
	return &Console{o: o, live: newLive(o.RuleTotals), simulator: make(chan struct{}, 1)}
}

// Register adds the console's endpoints to mux.
func (c *Console) Register(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", files))
	mux.HandleFunc("GET /console/api/policy", c.policy)
	mux.HandleFunc("GET /console/api/live", c.liveView)
	mux.HandleFunc("GET /console/api/top", c.top)
	mux.HandleFunc("GET /console/api/quota", c.quota)
	mux.HandleFunc("GET /console/api/inspect", c.inspect)
	mux.HandleFunc("POST /console/api/simulate", c.simulate)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// badRequest answers 400 with a JSON body {"error": msg}.
func badRequest(w http.ResponseWriter, msg string) { writeError(w, http.StatusBadRequest, msg) }

// writeError answers code with a JSON body {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// policyBody is the JSON of /console/api/policy.
type policyBody struct {
	admin.Policies
	Reload ReloadStatus `json:"reload"`
}

// policy serves the policy in force and the reload status. With
// since=<loaded_at of the policy the caller has>, and that policy still in
// force, it serves only {"unchanged": true, "reload": …}: a page that polls
// for reload failures does not fetch a large policy again and again.
func (c *Console) policy(w http.ResponseWriter, r *http.Request) {
	l := c.o.Policy()
	var reload ReloadStatus
	if c.o.Reload != nil {
		reload = c.o.Reload()
	}
	if since := r.URL.Query().Get("since"); since != "" && since == l.At.UTC().Format(time.RFC3339Nano) {
		writeJSON(w, map[string]any{"unchanged": true, "reload": reload})
		return
	}
	body := policyBody{Policies: admin.Policies{Config: l.Path, Version: l.Version, LoadedAt: l.At.UTC(), PolicyView: l.Policy.View()}}
	if body.Config == "" {
		body.Config = "embedded default"
	}
	body.Reload = reload
	writeJSON(w, body)
}

func (c *Console) liveView(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, c.live.view(time.Now()))
}

// quota answers the quota view: every bucket served by quota, its limit
// and its clients (stream id, peer address, demand and share in requests
// per period, what it may still apply, burst, report interval in ns).
func (c *Console) quota(w http.ResponseWriter, _ *http.Request) {
	buckets := []quotaservice.BucketView{}
	if c.o.Quota != nil {
		buckets = append(buckets, c.o.Quota()...)
	}
	writeJSON(w, map[string]any{"buckets": buckets})
}

func (c *Console) top(w http.ResponseWriter, r *http.Request) {
	n := 0
	if s := r.URL.Query().Get("n"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			badRequest(w, "n: want a positive number of descriptors")
			return
		}
	}
	entries := c.o.Top.Top(n)
	if entries == nil {
		entries = []topdenied.Entry{}
	}
	if r.URL.Query().Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, topdenied.Text(entries))
		return
	}
	writeJSON(w, map[string]any{"top": entries})
}

// Bucket is one row of an inspection: the bucket of one level of the
// descriptor's hierarchy.
type Bucket struct {
	// Descriptor is the level inspected: its entries as key=value.
	Descriptor string `json:"descriptor"`
	Matched    bool   `json:"matched"`
	// Rule names the limit as the console does everywhere: its name
	// (rate_limit.name), else its rule's descriptor path (the stat key
	// without the domain, as the metrics' rule label).
	Rule      string `json:"rule,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
	Limit     string `json:"limit,omitempty"`
	Unlimited bool   `json:"unlimited,omitempty"`
	Shadow    bool   `json:"shadow,omitempty"`
	Remaining int64  `json:"remaining"`
	// ResetAfter is how long until the bucket is back at rest, its debt
	// included.
	ResetAfter string `json:"reset_after"`
	// ResetAfterNs is ResetAfter in nanoseconds.
	ResetAfterNs int64 `json:"reset_after_ns"`
	// Debt is how many units the bucket owes beyond empty, after overdraft
	// charges took more than was left (engine.Status.Debt, exactly): checks
	// and charges are denied until its refill, its window's end (or, for
	// sliding_window, the weighing out of the previous window), or for a
	// concurrency the release or expiry of its units, has paid them back.
	Debt int64 `json:"debt,omitempty"`
}

// inspect peeks at the buckets of a descriptor and of each of its
// prefixes (path=/orders, then path=/orders + user=alice, …): one request
// of hits 0 per level, which charges nothing and is never denied.
func (c *Console) inspect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var entries []config.Entry
	for i, kv := range q["entry"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			badRequest(w, fmt.Sprintf("entry[%d]: want key=value, got %q", i, kv))
			return
		}
		entries = append(entries, config.Entry{Key: k, Value: v})
	}
	if len(entries) == 0 {
		badRequest(w, "entry: give at least one key=value")
		return
	}
	zero := uint64(0)
	req := &engine.Request{Domain: q.Get("domain")}
	for i := range entries {
		req.Descriptors = append(req.Descriptors, engine.Descriptor{Entries: entries[:i+1], Hits: &zero})
	}
	var resp engine.Response
	if err := c.o.Engine.ShouldRateLimit(r.Context(), req, &resp); err != nil {
		var inv *engine.InvalidError
		if errors.As(err, &inv) {
			badRequest(w, inv.Error())
			return
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	rows := make([]Bucket, len(resp.Statuses))
	for i, st := range resp.Statuses {
		row := Bucket{Descriptor: entriesText(entries[:i+1]), Matched: st.Matched, Shadow: st.Shadow,
			Remaining: st.Remaining, ResetAfter: st.ResetAfter.String(), ResetAfterNs: int64(st.ResetAfter)}
		if st.Rule != nil {
			row.Rule = strings.TrimPrefix(st.Rule.StatKey, req.Domain+".")
		}
		if l := st.Limit; l != nil && !l.Unlimited && !l.DenyAll {
			row.Debt = st.Debt
		}
		if l := st.Limit; l != nil {
			row.Unlimited = l.Unlimited
			if l.Name != "" {
				row.Rule = l.Name
			}
			switch {
			case l.DenyAll:
				row.Limit = "deny all"
			case !l.Unlimited:
				row.Algorithm = l.Rate.Algorithm().String()
				row.Limit = describeRate(l.Rate)
			}
		}
		rows[i] = row
	}
	writeJSON(w, map[string]any{"domain": req.Domain, "buckets": rows})
}

func entriesText(entries []config.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ", ")
}

// simulate runs a simulation from the parameters of the JSON body (an
// object of strings): the lanes are either a rule of the policy (domain
// and stat_key) or the algorithms named by alg with requests, period,
// burst and overdraft ("true": a token budget charged after the fact; a
// rule's limits say it themselves, or the daemon's --overdraft-by-default
// for those that do not); the traffic is pattern with its parameters
// (rate, size, every, seed, times as durations separated by commas, cost;
// for a concurrency, hold and unreleased: simulate.Traffic's Hold and
// Unreleased) over duration.
func (c *Console) simulate(w http.ResponseWriter, r *http.Request) {
	if t, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); t != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type: want application/json")
		return
	}
	var params map[string]string
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSimulateBody)).Decode(&params); err != nil {
		badRequest(w, "body: want a JSON object of parameters (strings): "+err.Error())
		return
	}
	get := func(k string) string { return params[k] }
	lanes, period, err := c.lanes(get)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	tr, err := trafficFrom(get, period)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	select {
	case c.simulator <- struct{}{}:
		defer func() { <-c.simulator }()
	default:
		writeError(w, http.StatusTooManyRequests, "another simulation is running; try again when it is done")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), SimulateTimeout)
	defer cancel()
	res, err := simulate.Run(ctx, tr, lanes, 0, period)
	if err != nil && ctx.Err() != nil { // its request was cancelled (nobody reads this), or the timeout
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the simulation stopped (%v): it may run for %v; shorten the duration or lower the rate", ctx.Err(), SimulateTimeout))
		return
	}
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	type total struct {
		Lane          string `json:"lane"`
		Admitted      int    `json:"admitted"`
		Denied        int    `json:"denied"`
		MaxAdmittedIn int    `json:"max_admitted_in_period"`
		// Released, for a concurrency lane only: its requests that
		// released their units (hold).
		Released *int `json:"released,omitempty"`
	}
	totals := make([]total, len(res.Lanes))
	for i, l := range res.Lanes {
		totals[i] = total{Lane: l.Name, Admitted: l.Admitted, Denied: l.Denied, MaxAdmittedIn: l.MaxAdmittedIn}
		if lanes[i].Limit.Algorithm() == algorithms.Concurrency {
			totals[i].Released = &res.Lanes[i].Released
		}
	}
	writeJSON(w, map[string]any{"requests": res.Arrivals, "period": period.String(), "lanes": totals, "svg": res.SVG()})
}

// lanes returns the lanes a simulation query names, and the period the
// boundary pattern and the burst measure use (the first lane's).
func (c *Console) lanes(get func(string) string) ([]simulate.Lane, time.Duration, error) {
	if key := get("stat_key"); key != "" {
		return c.ruleLanes(get("domain"), key)
	}
	requests, err := strconv.ParseInt(get("requests"), 10, 64)
	if err != nil || requests < 1 {
		return nil, 0, errors.New("requests: want a positive whole number")
	}
	period, err := time.ParseDuration(get("period"))
	if err != nil || period <= 0 {
		return nil, 0, errors.New("period: want a positive duration such as 1m or 500ms")
	}
	var burst int64
	if s := get("burst"); s != "" {
		if burst, err = strconv.ParseInt(s, 10, 64); err != nil || burst < 0 {
			return nil, 0, errors.New("burst: want a whole number ≥ 0 (0: the requests)")
		}
	}
	if n := strings.Count(get("alg"), ",") + 1; n > simulate.MaxLanes {
		return nil, 0, fmt.Errorf("alg: %d algorithms; at most %d", n, simulate.MaxLanes)
	}
	algs, err := simulate.ParseAlgorithms(get("alg"))
	if err != nil {
		return nil, 0, fmt.Errorf("alg: %v", err)
	}
	lanes, err := simulate.CompareLanes(algs, requests, period, burst, get("overdraft") == "true")
	if err != nil {
		return nil, 0, err
	}
	return lanes, period, nil
}

// ruleLanes returns a lane for each limit of the policy's rule statKey in
// domain.
func (c *Console) ruleLanes(domain, statKey string) ([]simulate.Lane, time.Duration, error) {
	var found *config.DescriptorView
	var walk func([]config.DescriptorView)
	walk = func(ds []config.DescriptorView) {
		for i := range ds {
			if ds[i].StatKey == statKey {
				found = &ds[i]
			}
			walk(ds[i].Descriptors)
		}
	}
	for _, d := range c.o.Policy().Policy.View().Domains {
		if d.Domain == domain {
			walk(d.Descriptors)
		}
	}
	if found == nil {
		return nil, 0, fmt.Errorf("stat_key: no rule %q in domain %q", statKey, domain)
	}
	var lanes []simulate.Lane
	var period time.Duration
	for _, lv := range found.RateLimits {
		if lv.Unlimited || lv.DenyAll {
			continue
		}
		alg, err := algorithms.ParseAlgorithm(lv.Algorithm)
		if err != nil {
			return nil, 0, err
		}
		p, err := time.ParseDuration(lv.Period)
		if err != nil {
			return nil, 0, fmt.Errorf("rule %s: period %q: %v", statKey, lv.Period, err)
		}
		lane, err := simulate.NewLane(alg, lv.RequestsPerUnit, p, lv.Burst)
		if err != nil {
			return nil, 0, err
		}
		if lv.Name != "" {
			lane.Name = lv.Name + " (" + lane.Name + ")"
		}
		if lv.Overdraft != nil {
			lane.Overdraft = *lv.Overdraft
		} else {
			lane.Overdraft = c.o.Engine != nil && c.o.Engine.OverdraftByDefault()
		}
		if period == 0 {
			period = p
		}
		lanes = append(lanes, lane)
	}
	if len(lanes) == 0 {
		return nil, 0, fmt.Errorf("stat_key: rule %q has no limit to simulate (unlimited or deny-all)", statKey)
	}
	return lanes, period, nil
}

// trafficFrom reads a simulate.Traffic from the query.
func trafficFrom(get func(string) string, period time.Duration) (simulate.Traffic, error) {
	t := simulate.Traffic{Pattern: simulate.Pattern(get("pattern")), Period: period}
	var err error
	durationOf := func(field string, def time.Duration) (time.Duration, error) {
		s := get(field)
		if s == "" {
			return def, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%s: want a duration such as 2m or 500ms", field)
		}
		return d, nil
	}
	if t.Duration, err = durationOf("duration", 2*period); err != nil {
		return t, err
	}
	if t.Every, err = durationOf("every", period); err != nil {
		return t, err
	}
	if s := get("rate"); s != "" {
		if t.Rate, err = strconv.ParseFloat(s, 64); err != nil {
			return t, errors.New("rate: want requests a second, such as 2.5")
		}
	}
	if s := get("size"); s != "" {
		if t.Burst, err = strconv.Atoi(s); err != nil {
			return t, errors.New("size: want a whole number of requests per burst")
		}
	}
	if s := get("seed"); s != "" {
		if t.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return t, errors.New("seed: want a whole number")
		}
	}
	if s := get("cost"); s != "" {
		if t.Cost, err = strconv.ParseInt(s, 10, 64); err != nil {
			return t, errors.New("cost: want a whole number of units each request uses")
		}
	}
	if t.Hold, err = durationOf("hold", 0); err != nil {
		return t, err
	}
	if s := get("unreleased"); s != "" {
		if t.Unreleased, err = strconv.ParseFloat(s, 64); err != nil {
			return t, errors.New("unreleased: want a fraction from 0 to 1, such as 0.25")
		}
	}
	if s := get("times"); s != "" {
		for _, f := range strings.Split(s, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil {
				return t, fmt.Errorf("times: %q is not a duration", f)
			}
			t.Times = append(t.Times, d)
		}
	}
	return t, nil
}

// describeRate is a limit as the inspector shows it: "100 per 1m0s",
// "20 per 1s, burst 40", or for a concurrency "20 in flight, lease 10m0s".
func describeRate(r algorithms.Limit) string {
	if r.Algorithm() == algorithms.Concurrency {
		return fmt.Sprintf("%d in flight, lease %s", r.Requests(), r.Period())
	}
	text := fmt.Sprintf("%d per %s", r.Requests(), r.Period())
	if b := r.Burst(); b != r.Requests() && b > 0 {
		text += fmt.Sprintf(", burst %d", b)
	}
	return text
}
