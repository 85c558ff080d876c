package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// FuzzParse parses arbitrary policy files. Parse must return a policy or
// problems — never panic — and problems must each name the file and say
// what is wrong; a policy must be usable: viewed, and matched against
// entries made of its own text. Run longer with
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 60s ./internal/policy/config/
//
// The seed corpus is the embedded default policy, the envoyproxy/ratelimit
// files of testdata/envoy, and small files with each kind of problem.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/envoy/*.yaml")
	seeds = append(seeds, "default.yaml")
	for _, path := range seeds {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"domain: d\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 20}\n      - {unit: hour, requests_per_unit: 100, name: h, replaces: [{name: x}]}\n",
		"domain: d\ndescriptors:\n  - &a {key: k, descriptors: [{key: j}]}\n  - *a\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: -1, retry_jitter: 1x}\n",
		"domain: [\n",
		"domain: d\n---\ndomain: e\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, unit_multiplier: 9999999999, requests_per_unit: 1, algorithm: leaky_bucket_queue}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := config.Parse("f.yaml", data)
		if err != nil {
			var errs config.Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %v (%T), want config.Errors", err, err)
			}
			for _, e := range errs {
				if e.File != "f.yaml" || e.Problem == "" || !strings.HasPrefix(e.Error(), "f.yaml") {
					t.Fatalf("problem %#v does not name the file and what is wrong", e)
				}
			}
			if p != nil {
				t.Fatal("a policy and an error")
			}
			return
		}
		domains := p.Domains()
		if len(domains) != 1 || domains[0].Name == "" || domains[0].Source != "f.yaml" {
			t.Fatalf("policy of %d domains: %+v", len(domains), domains)
		}
		p.View()
		d := domains[0]
		d.HasLimits()
		// Match entries taken from the file's own words.
		words := strings.Fields(string(data))
		for i := 0; i+1 < len(words) && i < 64; i += 2 {
			entries := []config.Entry{{Key: words[i], Value: words[i+1]}, {Key: words[i+1], Value: words[i]}}
			for n := 1; n <= len(entries); n++ {
				if r := d.Match(entries[:n]); r != nil && len(r.Limits) == 0 {
					t.Fatalf("rule %q without limits", r.StatKey)
				}
			}
		}
	})
}
