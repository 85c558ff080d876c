package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// problem is one expected FieldError of t.yaml.
type problem struct {
	line  int
	field string
	text  string // a part of Problem
}

// checkErrors fails unless err is an Errors holding exactly the wanted
// problems of file, in order.
func checkErrors(t *testing.T, file string, err error, want []problem) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v (%T), want Errors", err, err)
	}
	ok := len(errs) == len(want)
	for i := 0; ok && i < len(want); i++ {
		e, w := errs[i], want[i]
		ok = e.File == file && e.Line == w.line && e.Field == w.field && strings.Contains(e.Problem, w.text)
	}
	if !ok {
		var b strings.Builder
		for _, w := range want {
			b.WriteString("\n\t" + (&FieldError{File: file, Line: w.line, Field: w.field, Problem: "…" + w.text + "…"}).Error())
		}
		t.Errorf("got:\n%v\nwant:%s", err, b.String())
	}
}

// A valid descriptor to surround a broken field with.
const head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n" // lines 1-4

func TestValidation(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []problem
	}{
		// The file.
		{"empty file", "", []problem{{0, "domain", "missing"}}},
		{"comments only", "# nothing\n", []problem{{0, "domain", "missing"}}},
		{"not a mapping", "- domain: d\n", []problem{{1, "", "want a mapping"}}},
		{"missing domain", "descriptors: []\n", []problem{{1, "domain", "missing"}}},
		{"empty domain", "domain: ''\n", []problem{{1, "domain", "empty"}}},
		{"domain not a string", "domain: [a]\n", []problem{{1, "domain", "want a string"}}},
		{"unknown top-level field", "domain: d\ndomian: e\n", []problem{{2, "domian", "unknown field"}}},
		{"field given twice", "domain: d\ndomain: e\n", []problem{{2, "domain", "given twice (first at line 1)"}}},
		{"invalid YAML", "domain: d\ndescriptors: [\n", []problem{{2, "", "invalid YAML"}}},
		{"second document", "domain: d\n---\ndomain: e\n", []problem{{3, "", "second YAML document"}}},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", []problem{{2, "descriptors", "want a list; got a mapping"}}},
		{"descriptor not a mapping", "domain: d\ndescriptors: [k]\n", []problem{{2, "descriptors[0]", `want a mapping with key`}}},

		// Descriptors.
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n", []problem{{3, "descriptors[0].key", "missing"}}},
		{"empty key", "domain: d\ndescriptors:\n  - key: ''\n", []problem{{3, "descriptors[0].key", "empty"}}},
		{"key not a string", "domain: d\ndescriptors:\n  - key: {a: b}\n", []problem{{3, "descriptors[0].key", "want a string; got a mapping"}}},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: k\n    vaule: v\n", []problem{{4, "descriptors[0].vaule", "unknown field (want one of key, value,"}}},
		{"misplaced known field", "domain: d\ndescriptors:\n  - key: k\n    unit: second\n", []problem{{4, "descriptors[0].unit", "unknown field"}}},
		{"duplicate key and value", "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n",
			[]problem{{4, "descriptors[1]", `a second descriptor with key "k" and value "v" at this level (the first is descriptors[0])`}}},
		{"duplicate key-only", "domain: d\ndescriptors:\n  - {key: k}\n  - {key: k}\n",
			[]problem{{4, "descriptors[1]", `key "k" without a value`}}},
		{"duplicate wildcard", "domain: d\ndescriptors:\n  - {key: k, descriptors: [{key: a, value: 'x*'}, {key: a, value: 'x*'}]}\n",
			[]problem{{3, "descriptors[0].descriptors[1]", `key "a" and value "x*"`}}},
		{"shadow_mode not a boolean", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", []problem{{4, "descriptors[0].shadow_mode", `want true or false; got "maybe"`}}},
		{"quoted yes is a string", "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: 'yes'\n", []problem{{4, "descriptors[0].detailed_metric", "want true or false"}}},

		// rate_limit: the unit.
		{"unknown unit", head + "      unit: secnd\n      requests_per_unit: 1\n",
			[]problem{{5, "descriptors[0].rate_limit.unit", `unknown unit "secnd" (want second, minute, hour, day, week, month, year)`}}},
		{"missing unit", head + "      requests_per_unit: 1\n", []problem{{5, "descriptors[0].rate_limit.unit", "missing (want second,"}}},
		{"unit unknown in envoy's enum", head + "      unit: unknown\n      requests_per_unit: 1\n", []problem{{5, "descriptors[0].rate_limit.unit", "unknown unit"}}},

		// requests_per_unit.
		{"requests 0 with a burst", head + "      unit: second\n      requests_per_unit: 0\n      algorithm: token_bucket\n      burst: 5\n", []problem{{5, "descriptors[0].rate_limit.requests_per_unit", "0 denies every request; burst and overdraft do not apply"}}},
		{"requests 0 with overdraft", head + "      unit: second\n      requests_per_unit: 0\n      overdraft: true\n", []problem{{5, "descriptors[0].rate_limit.requests_per_unit", "0 denies every request; burst and overdraft do not apply"}}},
		{"requests negative", head + "      unit: second\n      requests_per_unit: -5\n", []problem{{6, "descriptors[0].rate_limit.requests_per_unit", "negative: -5"}}},
		{"requests fractional", head + "      unit: second\n      requests_per_unit: 1.5\n", []problem{{6, "descriptors[0].rate_limit.requests_per_unit", "want a whole number; got 1.5"}}},
		{"requests quoted", head + "      unit: second\n      requests_per_unit: '10'\n", []problem{{6, "descriptors[0].rate_limit.requests_per_unit", `want a whole number; got "10"`}}},
		{"requests above uint32", head + "      unit: second\n      requests_per_unit: 4294967296\n", []problem{{6, "descriptors[0].rate_limit.requests_per_unit", "too large (at most 4294967295)"}}},
		{"requests missing", head + "      unit: second\n", []problem{{5, "descriptors[0].rate_limit.requests_per_unit", "missing"}}},

		// algorithm and burst.
		{"unknown algorithm", head + "      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n",
			[]problem{{7, "descriptors[0].rate_limit.algorithm", `unknown algorithm "gcra"`}}},
		{"burst with fixed_window (default)", head + "      unit: second\n      requests_per_unit: 1\n      burst: 2\n",
			[]problem{{7, "descriptors[0].rate_limit.burst", "not allowed with algorithm fixed_window"}}},
		{"burst with sliding_window", head + "      unit: second\n      requests_per_unit: 1\n      algorithm: sliding_window\n      burst: 2\n",
			[]problem{{8, "descriptors[0].rate_limit.burst", "not allowed with algorithm sliding_window"}}},
		{"burst 0", head + "      unit: second\n      requests_per_unit: 1\n      algorithm: token_bucket\n      burst: 0\n",
			[]problem{{8, "descriptors[0].rate_limit.burst", "0 is too small (want at least 1)"}}},
		{"burst negative", head + "      unit: second\n      requests_per_unit: 1\n      algorithm: leaky_bucket\n      burst: -1\n",
			[]problem{{8, "descriptors[0].rate_limit.burst", "negative"}}},
		{"burst fractional", head + "      unit: second\n      requests_per_unit: 1\n      algorithm: token_bucket\n      burst: 2.5\n",
			[]problem{{8, "descriptors[0].rate_limit.burst", "want a whole number"}}},

		// concurrency.
		{"concurrency with a rate", head + "      algorithm: concurrency\n      unit: second\n      requests_per_unit: 1\n      max_in_flight: 5\n      lease: 1m\n",
			[]problem{{6, "descriptors[0].rate_limit.unit", "not allowed with algorithm: concurrency"}, {7, "descriptors[0].rate_limit.requests_per_unit", "not allowed with algorithm: concurrency"}}},
		{"concurrency with burst", head + "      algorithm: concurrency\n      max_in_flight: 5\n      lease: 1m\n      burst: 6\n",
			[]problem{{8, "descriptors[0].rate_limit.burst", "not allowed with algorithm: concurrency"}}},
		{"concurrency without max_in_flight", head + "      algorithm: concurrency\n      lease: 1m\n",
			[]problem{{5, "descriptors[0].rate_limit.max_in_flight", "missing"}}},
		{"concurrency without lease", head + "      algorithm: concurrency\n      max_in_flight: 5\n",
			[]problem{{5, "descriptors[0].rate_limit.lease", "missing"}}},
		{"max_in_flight too large", head + "      algorithm: concurrency\n      max_in_flight: 65536\n      lease: 1m\n",
			[]problem{{6, "descriptors[0].rate_limit.max_in_flight", "too large (at most 65535)"}}},
		{"max_in_flight 0", head + "      algorithm: concurrency\n      max_in_flight: 0\n      lease: 1m\n",
			[]problem{{6, "descriptors[0].rate_limit.max_in_flight", "0 is too small"}}},
		{"lease not a duration", head + "      algorithm: concurrency\n      max_in_flight: 5\n      lease: 60\n",
			[]problem{{7, "descriptors[0].rate_limit.lease", "not a duration"}}},
		{"lease 0", head + "      algorithm: concurrency\n      max_in_flight: 5\n      lease: 0s\n",
			[]problem{{7, "descriptors[0].rate_limit.lease", "must be positive"}}},
		{"lease too long", head + "      algorithm: concurrency\n      max_in_flight: 5\n      lease: 145h\n",
			[]problem{{7, "descriptors[0].rate_limit.lease", "longer than the longest lease"}}},
		{"max_in_flight on a window", head + "      unit: second\n      requests_per_unit: 1\n      max_in_flight: 5\n",
			[]problem{{7, "descriptors[0].rate_limit.max_in_flight", "only with algorithm: concurrency"}}},
		{"lease on a bucket", head + "      unit: second\n      requests_per_unit: 1\n      algorithm: token_bucket\n      lease: 1m\n",
			[]problem{{8, "descriptors[0].rate_limit.lease", "only with algorithm: concurrency"}}},

		// unit_multiplier and the period.
		{"unit_multiplier 0", head + "      unit: second\n      requests_per_unit: 1\n      unit_multiplier: 0\n",
			[]problem{{7, "descriptors[0].rate_limit.unit_multiplier", "0 is too small"}}},
		{"unit_multiplier negative", head + "      unit: second\n      requests_per_unit: 1\n      unit_multiplier: -2\n",
			[]problem{{7, "descriptors[0].rate_limit.unit_multiplier", "negative"}}},
		{"period beyond MaxSpan", head + "      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 200\n",
			[]problem{{7, "descriptors[0].rate_limit.unit_multiplier", "longer than the longest period"}}},
		{"bucket drains beyond MaxSpan", head + "      unit: year\n      unit_multiplier: 100\n      requests_per_unit: 1\n      algorithm: token_bucket\n      burst: 2\n",
			[]problem{{5, "descriptors[0].rate_limit", "drains in over"}}},

		// retry_jitter.
		{"retry_jitter beyond the longest period", head + "      unit: second\n      requests_per_unit: 1\n      retry_jitter: 2562047h\n",
			[]problem{{7, "descriptors[0].rate_limit.retry_jitter", `"2562047h" is longer than the longest period`}}},
		{"retry_jitter not a duration", head + "      unit: second\n      requests_per_unit: 1\n      retry_jitter: soon\n",
			[]problem{{7, "descriptors[0].rate_limit.retry_jitter", `not a duration: "soon"`}}},
		{"retry_jitter without a unit", head + "      unit: second\n      requests_per_unit: 1\n      retry_jitter: 5\n",
			[]problem{{7, "descriptors[0].rate_limit.retry_jitter", `not a duration: "5"`}}},
		{"retry_jitter negative", head + "      unit: second\n      requests_per_unit: 1\n      retry_jitter: -1s\n",
			[]problem{{7, "descriptors[0].rate_limit.retry_jitter", "negative"}}},

		// unlimited.
		{"unlimited with requests_per_unit", head + "      unlimited: true\n      requests_per_unit: 5\n",
			[]problem{{6, "descriptors[0].rate_limit.requests_per_unit", "not allowed with unlimited: true"}}},
		{"unlimited with unit", head + "      unlimited: true\n      unit: second\n",
			[]problem{{6, "descriptors[0].rate_limit.unit", "not allowed with unlimited: true"}}},
		{"unlimited with algorithm and burst", head + "      unlimited: true\n      algorithm: token_bucket\n      burst: 5\n",
			[]problem{{6, "descriptors[0].rate_limit.algorithm", "not allowed"}, {7, "descriptors[0].rate_limit.burst", "not allowed"}}},

		// replaces.
		{"replaces itself", head + "      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: a}]\n",
			[]problem{{8, "descriptors[0].rate_limit.replaces[0].name", "cannot replace itself"}}},
		{"replaces no limit of the domain", head + "      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: b}]\n",
			[]problem{{8, "descriptors[0].rate_limit.replaces[0].name", `no limit of this domain is named "b"`}}},
		{"replaces without a name", head + "      unit: second\n      requests_per_unit: 1\n      replaces:\n        - {}\n",
			[]problem{{8, "descriptors[0].rate_limit.replaces[0].name", "missing"}}},
		{"replaces not a list", head + "      unit: second\n      requests_per_unit: 1\n      replaces: a\n",
			[]problem{{7, "descriptors[0].rate_limit.replaces", "want a list"}}},
		{"replaces entry with unknown field", head + "      unit: second\n      requests_per_unit: 1\n      replaces: [{nmae: a}]\n",
			[]problem{{7, "descriptors[0].rate_limit.replaces[0].nmae", "unknown field (want one of name)"}, {7, "descriptors[0].rate_limit.replaces[0].name", "missing"}}},

		// rate_limit and rate_limits.
		{"empty rate_limit", head, []problem{{4, "descriptors[0].rate_limit", "empty"}}},
		{"rate_limit not a mapping", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5\n", []problem{{4, "descriptors[0].rate_limit", "want a mapping"}}},
		{"rate_limit and rate_limits", head + "      unit: second\n      requests_per_unit: 1\n    rate_limits:\n      - {unit: second, requests_per_unit: 2}\n",
			[]problem{{8, "descriptors[0].rate_limits", "rate_limit or rate_limits, not both"}}},
		{"rate_limits not a list", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second, requests_per_unit: 1}\n", []problem{{4, "descriptors[0].rate_limits", "want a list; got a mapping"}}},
		{"empty rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n", []problem{{4, "descriptors[0].rate_limits", "empty"}}},
		{"null rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n", []problem{{4, "descriptors[0].rate_limits", "empty"}}},
		{"identical limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 60}\n      - {unit: MINUTE, requests_per_unit: 60, name: again}\n",
			[]problem{{6, "descriptors[0].rate_limits[1]", "the same limit as rate_limits[0] (fixed_window/60/1m0s/60)"}}},
		{"identical once burst defaults", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n" +
			"      - {algorithm: token_bucket, unit: second, requests_per_unit: 5}\n" +
			"      - {algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 5}\n",
			[]problem{{6, "descriptors[0].rate_limits[1]", "the same limit as rate_limits[0]"}}},
		{"unlimited among several", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 60}\n      - {unlimited: true}\n",
			[]problem{{6, "descriptors[0].rate_limits[1].unlimited", "only limit of its descriptor"}}},
		{"problem deep in rate_limits", "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limits:\n          - {unit: second, requests_per_unit: 1}\n          - {unit: fortnight, requests_per_unit: 1}\n",
			[]problem{{8, "descriptors[0].descriptors[0].rate_limits[1].unit", `unknown unit "fortnight"`}}},

		// overdraft.
		{"overdraft not a boolean", head + "      unit: second\n      requests_per_unit: 1\n      overdraft: sometimes\n", []problem{{7, "descriptors[0].rate_limit.overdraft", `want true or false; got "sometimes"`}}},
		{"overdraft with unlimited", head + "      unlimited: true\n      overdraft: false\n", []problem{{6, "descriptors[0].rate_limit.overdraft", "not allowed with unlimited: true"}}},
		{"overdraft under the descriptor", "domain: d\ndescriptors:\n  - key: k\n    overdraft: true\n", []problem{{4, "descriptors[0].overdraft", "unknown field"}}},

		// The example of the brief, and every problem of a file at once.
		{"nested path", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: c\n        rate_limit:\n          unit: secnd\n          requests_per_unit: 1\n",
			[]problem{{8, "descriptors[0].descriptors[1].rate_limit.unit", `unknown unit "secnd" (want second, minute, hour, day, week, month, year)`}}},
		{"every problem reported", `domain: d
descriptors:
  - key: a
    rate_limit: {unit: secnd, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: -1}
  - value: orphan
  - key: a
    descriptors:
      - key: c
        rate_limit: {unlimited: true, burst: 3, replaces: [{name: ghost}]}
`, []problem{
			{4, "descriptors[0].rate_limit.unit", "unknown unit"},
			{6, "descriptors[1].rate_limit.requests_per_unit", "negative: -1"},
			{7, "descriptors[2].key", "missing"},
			{8, "descriptors[3]", `a second descriptor with key "a"`},
			{11, "descriptors[3].descriptors[0].rate_limit.burst", "not allowed with unlimited"},
			{11, "descriptors[3].descriptors[0].rate_limit.replaces[0].name", `named "ghost"`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("t.yaml", []byte(tt.src))
			if p != nil {
				t.Errorf("Parse returned a policy with the error")
			}
			checkErrors(t, "t.yaml", err, tt.want)
		})
	}
}

// TestValid lists files that must load: the edges of each rule above.
func TestValid(t *testing.T) {
	tests := []struct{ name, src string }{
		{"domain without descriptors", "domain: d\n"},
		{"descriptor without limit or children", "domain: d\ndescriptors: [{key: k}]\n"},
		{"same key and value at different levels", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    descriptors: [{key: k, value: v, rate_limit: {unit: second, requests_per_unit: 1}}]\n"},
		{"same key with and without value", "domain: d\ndescriptors: [{key: k}, {key: k, value: v}, {key: k, value: 'v*'}]\n"},
		{"null fields are absent", "domain: d\ndescriptors:\n  - key: k\n    value:\n    shadow_mode: ~\n    descriptors:\n"},
		{"requests at uint32 max", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 4294967295}}]\n"},
		{"unlimited with name and replaces", "domain: d\ndescriptors:\n  - {key: a, rate_limit: {name: a, unit: second, requests_per_unit: 1}}\n  - {key: b, rate_limit: {unlimited: true, name: b, replaces: [{name: a}]}}\n"},
		{"unlimited: false with a limit", "domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: false, unit: second, requests_per_unit: 1}}]\n"},
		{"replaces a limit defined later", "domain: d\ndescriptors:\n  - {key: b, rate_limit: {replaces: [{name: a}], unit: second, requests_per_unit: 1}}\n  - {key: a, rate_limit: {name: a, unit: second, requests_per_unit: 2}}\n"},
		{"period of 100 years", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: year, unit_multiplier: 100, requests_per_unit: 1}}]\n"},
		{"two limits differing only in burst", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {algorithm: token_bucket, unit: second, requests_per_unit: 5}\n      - {algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 10}\n"},
		{"anchors and aliases", "domain: d\ndescriptors:\n  - {key: a, rate_limit: &l {unit: second, requests_per_unit: 1}}\n  - {key: b, rate_limit: *l}\n"},
		{"trailing document marker", "domain: d\n---\n"},
		{"retry_jitter 0s", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, retry_jitter: 0s}}]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(tt.src)); err != nil {
				t.Errorf("Parse:\n%v", err)
			}
		})
	}
}

// TestExtensions checks each extension field's effect on the Limit.
func TestExtensions(t *testing.T) {
	p := mustParse(t, `
domain: ext
descriptors:
  - key: user
    rate_limits:
      - name: burst
        algorithm: token_bucket
        unit: second
        requests_per_unit: 10
        burst: 20
        retry_jitter: 250ms
      - name: sustained
        algorithm: sliding_window
        unit: minute
        unit_multiplier: 10
        requests_per_unit: 6000
  - key: queue
    rate_limit: {algorithm: leaky_bucket_queue, unit: second, unit_multiplier: 30, requests_per_unit: 3}
  - key: meter
    shadow_mode: true
    detailed_metric: true
    rate_limit: {algorithm: leaky_bucket, unit: hour, requests_per_unit: 100, burst: 1}
  - key: plain
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: free
    rate_limit: {unlimited: true, name: free}
`)
	d := p.Domain("ext")
	rule := func(key string) *Rule {
		r := d.Match([]Entry{{key, "x"}})
		if r == nil {
			t.Fatalf("%s: no match", key)
		}
		return r
	}
	type want struct {
		name, key  string
		unit       Unit
		multiplier int64
		jitter     string
	}
	check := func(l *Limit, w want) {
		t.Helper()
		if l.Name != w.name || l.Key != w.key || l.Unit != w.unit || l.UnitMultiplier != w.multiplier || l.RetryJitter.String() != w.jitter {
			t.Errorf("limit %+v, want %+v", l, w)
		}
	}
	u := rule("user")
	if len(u.Limits) != 2 {
		t.Fatalf("user has %d limits, want 2", len(u.Limits))
	}
	check(u.Limits[0], want{"burst", "token_bucket/10/1s/20", UnitSecond, 1, "250ms"})
	check(u.Limits[1], want{"sustained", "sliding_window/6000/10m0s/6000", UnitMinute, 10, "0s"})
	check(rule("queue").Limits[0], want{"", "leaky_bucket_queue/3/30s/3", UnitSecond, 30, "0s"})
	m := rule("meter")
	check(m.Limits[0], want{"", "leaky_bucket/100/1h0m0s/1", UnitHour, 1, "0s"})
	if !m.ShadowMode || !m.DetailedMetric {
		t.Errorf("meter: ShadowMode %v, DetailedMetric %v, want both", m.ShadowMode, m.DetailedMetric)
	}
	pl := rule("plain").Limits[0]
	check(pl, want{"", "fixed_window/7/24h0m0s/7", UnitDay, 1, "0s"})
	if pl.Rate.Requests() != 7 || pl.Rate.Period().Hours() != 24 || pl.Rate.Burst() != 0 {
		t.Errorf("plain: Rate %d per %v burst %d", pl.Rate.Requests(), pl.Rate.Period(), pl.Rate.Burst())
	}
	f := rule("free").Limits[0]
	if !f.Unlimited || f.Key != "unlimited" || f.Unit != UnitNone || f.Rate.Requests() != 0 {
		t.Errorf("free: %+v, want unlimited with Key \"unlimited\" and no Rate", f)
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range slices.Sorted(maps.Keys(files)) { // a directory before its files
		src := files[name]
		path := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDirectory(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"b.yaml":           "domain: beta\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		"a.yml":            "domain: alpha\n",
		"c.yaml":           "domain: gamma\n",
		".hidden.yaml":     "not: valid\n",
		"notes.txt":        "not: valid\n",
		"dir.yaml/":        "",
		"dir.yaml/x.yaml":  "not: valid\n",
		"sub/":             "",
		"sub/nested.yaml":  "not: valid\n",
		"ignored.yaml.bak": "not: valid\n",
	})
	p, err := Load(dir)
	if err != nil {
		t.Fatalf("Load:\n%v", err)
	}
	var names []string
	for _, d := range p.Domains() {
		names = append(names, d.Name+"@"+filepath.Base(d.Source))
		if p.Domain(d.Name) != d {
			t.Errorf("Domain(%q) is not Domains()'s", d.Name)
		}
	}
	if got, want := strings.Join(names, " "), "alpha@a.yml beta@b.yaml gamma@c.yaml"; got != want {
		t.Errorf("Domains() = %s, want %s", got, want)
	}
	if p.Domain("beta").Source != filepath.Join(dir, "b.yaml") {
		t.Errorf("Source = %q", p.Domain("beta").Source)
	}
}

func TestLoadDirectoryErrors(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"1-good.yaml":  "domain: api\n",
		"2-bad.yaml":   "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: secnd, requests_per_unit: 1}\n  - {value: v}\n",
		"3-dup.yaml":   "# the same domain again\ndomain: api\n",
		"4-good.yml":   "domain: other\n",
		"5-broken.yml": "domain: [\n",
	})
	p, err := Load(dir)
	if p != nil {
		t.Error("Load returned a policy with the errors")
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Load: %v (%T), want Errors", err, err)
	}
	want := []string{
		filepath.Join(dir, "2-bad.yaml") + `:4: descriptors[0].rate_limit.unit: unknown unit "secnd"`,
		filepath.Join(dir, "2-bad.yaml") + ":5: descriptors[1].key: missing",
		filepath.Join(dir, "3-dup.yaml") + `:2: domain: domain "api" is already defined in ` + filepath.Join(dir, "1-good.yaml"),
		filepath.Join(dir, "5-broken.yml") + ":1: invalid YAML",
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe != errs[0] {
		t.Errorf("errors.As does not find the first FieldError")
	}
}

func TestLoadFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{"policy.conf": "domain: d\n"})
	p, err := Load(filepath.Join(dir, "policy.conf"))
	if err != nil || p.Domain("d") == nil {
		t.Fatalf("Load(file) = %v, %v", p, err)
	}
}

func TestLoadErrors(t *testing.T) {
	empty := writeFiles(t, map[string]string{"readme.txt": ""})
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "no policy files") {
		t.Errorf("Load(directory without policy files) = %v", err)
	}
	// envoyproxy/ratelimit's runtime root: the files are two levels down.
	upstream := writeFiles(t, map[string]string{"ratelimit/": "", "ratelimit/config/": "", "ratelimit/config/shop.yaml": "domain: shop\n"})
	want := filepath.Join(upstream, "ratelimit", "config") + " has some"
	if _, err := Load(upstream); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Load(upstream runtime root) = %v, want it to point at %s", err, want)
	}
	missing := filepath.Join(empty, "missing")
	if _, err := Load(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want os.ErrNotExist", err)
	}
}

// TestBounds: a file whose aliases expand exponentially, or that has very
// many problems, is reported briefly.
func TestBounds(t *testing.T) {
	// Each level holds eight different descriptors that all nest the level
	// below: 8^20 descriptors once the aliases are expanded, and no
	// duplicates.
	var b strings.Builder
	b.WriteString("domain: d\nx:\n  - &l0 {key: k}\n")
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, "  - &l%d {key: k, descriptors: [", i)
		for _, k := range "abcdefgh" {
			fmt.Fprintf(&b, "{key: %c, descriptors: [*l%d]}, ", k, i-1)
		}
		b.WriteString("]}\n")
	}
	b.WriteString("descriptors: [*l20]\n")
	_, err := Parse("t.yaml", []byte(b.String()))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 || errs[0].Field != "x" ||
		!strings.HasPrefix(errs[1].Problem, fmt.Sprintf("more than %d descriptors (", DefaultPolicyBounds.MaxDescriptors)) {
		t.Errorf("alias expansion: got\n%v", err)
	}

	// Problems beyond the first 1000 are counted, and still make their limit
	// invalid (a limit with an unknown unit must not reach the arithmetic).
	b.Reset()
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range 1001 {
		fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: secnd, requests_per_unit: 1}}\n", i)
	}
	_, err = Parse("t.yaml", []byte(b.String()))
	if !errors.As(err, &errs) || len(errs) != 1001 || errs[1000].Error() != "t.yaml: 1 more problem not listed" {
		t.Errorf("problems beyond the listed: got %d, last %v", len(errs), errs[len(errs)-1])
	}

	// 1200 descriptors without a key: 1000 problems, then a count.
	b.Reset()
	b.WriteString("domain: d\ndescriptors:\n")
	for range 1200 {
		b.WriteString("  - {value: v}\n")
	}
	_, err = Parse("t.yaml", []byte(b.String()))
	if !errors.As(err, &errs) || len(errs) != 1001 || errs[999].Line != 1002 ||
		errs[1000].Error() != "t.yaml: 200 more problems not listed" {
		t.Errorf("many problems: got %d, last %v", len(errs), errs[len(errs)-1])
	}
}
