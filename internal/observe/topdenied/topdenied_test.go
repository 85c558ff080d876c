package topdenied_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/topdenied"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// perUser is the policy rule the test descriptors match.
var perUser = &config.Rule{StatKey: "default.path.user"}

// decided returns a request of one descriptor per entry list and a
// response whose statuses have the given codes, all matched by perUser.
func decided(domain string, codes []algorithms.Code, entries ...[]config.Entry) (*engine.Request, *engine.Response) {
	req := &engine.Request{Domain: domain}
	resp := &engine.Response{Code: algorithms.Allowed}
	for i, e := range entries {
		req.Descriptors = append(req.Descriptors, engine.Descriptor{Entries: e})
		resp.Statuses = append(resp.Statuses, engine.Status{Code: codes[i], Matched: true, Rule: perUser})
		if codes[i] != algorithms.Allowed {
			resp.Code = algorithms.Denied
		}
	}
	return req, resp
}

func user(name string) []config.Entry {
	return []config.Entry{{Key: "path", Value: "/orders"}, {Key: "user", Value: name}}
}

func deny(t *topdenied.Tracker, name string, times int) {
	req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user(name))
	for range times {
		t.Observe(req, resp)
	}
}

func TestCountsExactlyBelowCapacity(t *testing.T) {
	tr := topdenied.New(10, topdenied.Plain)
	deny(tr, "alice", 5)
	deny(tr, "bob", 3)
	// Admitted descriptors and unmatched ones are not counted; a denied
	// request's admitted descriptors neither.
	req, resp := decided("default", []algorithms.Code{algorithms.Allowed, algorithms.OverCapacity}, user("carol"), user("dave"))
	tr.Observe(req, resp)
	req, resp = decided("default", []algorithms.Code{algorithms.Denied}, user("erin"))
	resp.Statuses[0].Matched = false
	tr.Observe(req, resp)
	// Inline limits match no rule: named by domain, keys and values, so
	// bob's inline denial is not counted as his rule's.
	req, resp = decided("default", []algorithms.Code{algorithms.Denied}, user("bob"))
	resp.Statuses[0].Rule = nil
	tr.Observe(req, resp)

	got := tr.Top(0)
	want := []topdenied.Entry{
		{Descriptor: "default: path=/orders, user=alice", Denials: 5},
		{Descriptor: "default: path=/orders, user=bob", Denials: 3},
		{Descriptor: "default: path=/orders, user=bob", Denials: 1},
		{Descriptor: "default: path=/orders, user=dave", Denials: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Top = %v\nwant  %v", got, want)
	}
	if got := tr.Top(2); len(got) != 2 || got[1].Descriptor != want[1].Descriptor {
		t.Errorf("Top(2) = %v; want the first two of %v", got, want)
	}
}

// TestSpaceSavingGuarantees floods a small tracker with many distinct
// descriptors under a few heavy ones and checks the sketch's promises
// against the true counts: every descriptor denied more than total/capacity
// times is listed, and every listed count is within [true, true+Error].
func TestSpaceSavingGuarantees(t *testing.T) {
	const capacity, total = 16, 200_000
	tr := topdenied.New(capacity, topdenied.Plain)
	rng := rand.New(rand.NewPCG(1, 2))
	truth := map[string]uint64{}
	for range total {
		var name string
		switch r := rng.IntN(100); {
		case r < 30:
			name = "heavy-1"
		case r < 45:
			name = "heavy-2"
		case r < 52:
			name = "heavy-3"
		default:
			name = fmt.Sprintf("u%d", rng.IntN(50_000))
		}
		truth["default: path=/orders, user="+name]++
		deny(tr, name, 1)
	}
	top := tr.Top(0)
	listed := map[string]topdenied.Entry{}
	for _, e := range top {
		listed[e.Descriptor] = e
		tc := truth[e.Descriptor]
		if e.Denials < tc || e.Denials-e.Error > tc {
			t.Errorf("%s: Denials %d, Error %d; true count %d is not in [Denials-Error, Denials]", e.Descriptor, e.Denials, e.Error, tc)
		}
	}
	for d, n := range truth {
		if n > total/capacity {
			if _, ok := listed[d]; !ok {
				t.Errorf("%s was denied %d > %d times but is not listed", d, n, total/capacity)
			}
		}
	}
	if top[0].Descriptor != "default: path=/orders, user=heavy-1" {
		t.Errorf("most denied = %s; want heavy-1", top[0].Descriptor)
	}
}

func TestGenerations(t *testing.T) {
	tr := topdenied.New(10, topdenied.Plain)
	deny(tr, "old", 4)
	tr.Rotate()
	deny(tr, "old", 1)
	deny(tr, "new", 2)
	if got := tr.Top(0); len(got) != 2 || got[0].Denials != 5 || got[1].Denials != 2 {
		t.Fatalf("after one rotation: %v; want old 5 (both generations), new 2", got)
	}
	tr.Rotate()
	if got := tr.Top(0); len(got) != 2 || got[0].Denials != 2 || got[1].Denials != 1 {
		t.Fatalf("after two rotations: %v; want only the last generation: new 2, old 1", got)
	}
	tr.Rotate()
	tr.Rotate()
	if got := tr.Top(0); len(got) != 0 {
		t.Fatalf("after two idle generations: %v; want nothing", got)
	}
}

func TestValues(t *testing.T) {
	secret := "alice@example.com"
	for _, tc := range []struct {
		mode     topdenied.Values
		distinct int // entries after denying two users
	}{
		{topdenied.Plain, 2},
		{topdenied.Hashed, 2},
		{topdenied.Hidden, 1},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			tr := topdenied.New(10, tc.mode)
			deny(tr, secret, 2)
			deny(tr, "bob", 1)
			deny(tr, secret, 1)
			got := tr.Top(0)
			if len(got) != tc.distinct {
				t.Fatalf("Top = %v; want %d entries", got, tc.distinct)
			}
			text := topdenied.Text(got)
			if tc.mode != topdenied.Plain && strings.Contains(text, secret) {
				t.Errorf("%s mode shows the value: %s", tc.mode, text)
			}
			if tc.mode == topdenied.Plain && !strings.Contains(got[0].Descriptor, secret) {
				t.Errorf("plain mode lost the value: %v", got)
			}
			if tc.mode == topdenied.Hashed && got[0].Denials != 3 {
				t.Errorf("hashed: equal values counted apart: %v", got)
			}
		})
	}
	var v topdenied.Values
	if err := v.Set("hash"); err != nil || v != topdenied.Hashed {
		t.Errorf("Set(hash) = %v, %v", v, err)
	}
	if err := v.Set("md5"); err == nil || !strings.Contains(err.Error(), "plain, hash or hide") {
		t.Errorf("Set(md5) error = %v; want one naming the choices", err)
	}
}

func TestShadowAndLongValues(t *testing.T) {
	tr := topdenied.New(4, topdenied.Plain)
	req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user(strings.Repeat("x", 5000)))
	resp.Statuses[0].Shadow = true
	tr.Observe(req, resp)
	got := tr.Top(0)
	if len(got) != 1 || !got[0].Shadow {
		t.Fatalf("Top = %v; want one shadow entry", got)
	}
	if d := got[0].Descriptor; len(d) > topdenied.MaxTextBytes+len("…") || !strings.HasPrefix(d, "default: path=/orders, user=xxx") || !strings.HasSuffix(d, "…"+strings.Repeat("x", 60)) {
		t.Errorf("a 5000-byte value kept as %d bytes (%q…); want at most %d, its beginning, … and its last 60 bytes", len(d), d[:20], topdenied.MaxTextBytes)
	}
	// Two long values that differ only at the end read apart.
	tr = topdenied.New(4, topdenied.Plain)
	for _, last := range []string{"1", "2"} {
		req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user(strings.Repeat("x", 5000)+last))
		tr.Observe(req, resp)
	}
	if got := tr.Top(0); len(got) != 2 || got[0].Descriptor == got[1].Descriptor {
		t.Errorf("values differing at their end: %+v; want two texts that differ", got)
	}
}

// TestConcurrentObservers counts from many goroutines at once (run with
// -race): no denial is lost while the descriptors fit.
func TestConcurrentObservers(t *testing.T) {
	tr := topdenied.New(64, topdenied.Plain)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				deny(tr, fmt.Sprintf("u%d", (g+i)%20), 1)
				if i%250 == 0 {
					tr.Top(5)
				}
			}
		}()
	}
	wg.Wait()
	var sum uint64
	for _, e := range tr.Top(0) {
		sum += e.Denials
	}
	if sum != 8000 {
		t.Errorf("denials counted = %d; want 8000", sum)
	}
}

// TestDescriptorsNamedExactly: descriptors are told apart by their domain,
// keys and values, not by their rules' StatKeys, which can coincide (key
// "a" with value "b" and key "a_b" both read "a_b"; a dot in a domain or
// key reads like a level).
func TestDescriptorsNamedExactly(t *testing.T) {
	tr := topdenied.New(10, topdenied.Plain)
	for _, tc := range []struct {
		domain  string
		rule    *config.Rule
		entries []config.Entry
	}{
		{"d", &config.Rule{StatKey: "d.a_b"}, []config.Entry{{Key: "a", Value: "b"}}},
		{"d", &config.Rule{StatKey: "d.a_b"}, []config.Entry{{Key: "a_b", Value: "b"}}},
		{"d.x", &config.Rule{StatKey: "d.x.y"}, []config.Entry{{Key: "y", Value: "v"}}},
		{"d", &config.Rule{StatKey: "d.x.y"}, []config.Entry{{Key: "x.y", Value: "v"}}},
	} {
		req := &engine.Request{Domain: tc.domain, Descriptors: []engine.Descriptor{{Entries: tc.entries}}}
		resp := &engine.Response{Code: algorithms.Denied, Statuses: []engine.Status{{Code: algorithms.Denied, Matched: true, Rule: tc.rule}}}
		tr.Observe(req, resp)
	}
	got := tr.Top(0)
	if len(got) != 4 {
		t.Errorf("Top = %v; want the four descriptors apart", got)
	}
}

// TestReloadKeepsCounting: after a policy reload the same descriptor
// matches a new *config.Rule; it is counted on, not anew.
func TestReloadKeepsCounting(t *testing.T) {
	tr := topdenied.New(10, topdenied.Plain)
	deny(tr, "alice", 3)
	reloaded := *perUser
	req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user("alice"))
	resp.Statuses[0].Rule = &reloaded
	tr.Observe(req, resp)
	tr.Observe(req, resp)
	if got := tr.Top(0); len(got) != 1 || got[0].Denials != 5 {
		t.Errorf("Top = %v; want alice denied 5 times", got)
	}
}
