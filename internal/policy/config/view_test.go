package config

import (
	"encoding/json"
	"testing"
)

func TestView(t *testing.T) {
	p, err := Parse("shop.yaml", []byte(`
domain: shop
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 30, name: any-path}
    descriptors:
      - key: user
        detailed_metric: true
        rate_limits:
          - {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20, name: burst, retry_jitter: 250ms, overdraft: true}
          - {unit: minute, unit_multiplier: 10, requests_per_unit: 6000, name: sustained, overdraft: false}
  - key: path
    value: /b*
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /orders
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5, replaces: [{name: any-path}]}
  - key: path
    value: /a*
    rate_limit: {unlimited: true}
  - key: agent
    value: curl
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(p.View(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// agent before path; for path: the exact value, the wildcards in file
	// order, then the key alone — the order Match tries them.
	const want = `{
  "domains": [
    {
      "domain": "shop",
      "source": "shop.yaml",
      "descriptors": [
        {
          "key": "agent",
          "value": "curl"
        },
        {
          "key": "path",
          "value": "/orders",
          "stat_key": "shop.path_/orders",
          "rate_limits": [
            {
              "algorithm": "fixed_window",
              "unit": "hour",
              "unit_multiplier": 1,
              "requests_per_unit": 5,
              "period": "1h0m0s",
              "replaces": [
                "any-path"
              ],
              "key": "fixed_window/5/1h0m0s/5"
            }
          ],
          "shadow_mode": true
        },
        {
          "key": "path",
          "value": "/b*",
          "stat_key": "shop.path_/b*",
          "rate_limits": [
            {
              "deny_all": true,
              "unit": "second",
              "unit_multiplier": 1,
              "requests_per_unit": 0,
              "key": "deny-all"
            }
          ]
        },
        {
          "key": "path",
          "value": "/a*",
          "stat_key": "shop.path_/a*",
          "rate_limits": [
            {
              "unlimited": true,
              "requests_per_unit": 0,
              "key": "unlimited"
            }
          ]
        },
        {
          "key": "path",
          "stat_key": "shop.path",
          "rate_limits": [
            {
              "name": "any-path",
              "algorithm": "fixed_window",
              "unit": "minute",
              "unit_multiplier": 1,
              "requests_per_unit": 30,
              "period": "1m0s",
              "key": "fixed_window/30/1m0s/30"
            }
          ],
          "descriptors": [
            {
              "key": "user",
              "stat_key": "shop.path.user",
              "rate_limits": [
                {
                  "name": "burst",
                  "algorithm": "token_bucket",
                  "unit": "second",
                  "unit_multiplier": 1,
                  "requests_per_unit": 10,
                  "burst": 20,
                  "period": "1s",
                  "retry_jitter": "250ms",
                  "overdraft": true,
                  "key": "token_bucket/10/1s/20"
                },
                {
                  "name": "sustained",
                  "algorithm": "fixed_window",
                  "unit": "minute",
                  "unit_multiplier": 10,
                  "requests_per_unit": 6000,
                  "period": "10m0s",
                  "overdraft": false,
                  "key": "fixed_window/6000/10m0s/6000"
                }
              ],
              "detailed_metric": true
            }
          ]
        }
      ]
    }
  ]
}`
	if string(got) != want {
		t.Errorf("View as JSON:\n%s\nwant:\n%s", got, want)
	}
}

func TestViewOfDefaultNamesItsSource(t *testing.T) {
	v := Default().View()
	if len(v.Domains) != 1 || v.Domains[0].Domain != "default" || v.Domains[0].Source != "embedded:default.yaml" || len(v.Domains[0].Descriptors) != 2 {
		t.Fatalf("%+v", v)
	}
}
