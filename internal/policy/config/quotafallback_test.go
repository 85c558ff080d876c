package config_test

import (
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// TestQuotaFallback: a domain's quota_fallback, allow by default (as
// Envoy's filter); anything but allow, deny or ask is refused, naming the
// field.
func TestQuotaFallback(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want config.QuotaFallback
		err  string
	}{
		{"domain: d\n", config.QuotaAllow, ""},
		{"domain: d\nquota_fallback: allow\n", config.QuotaAllow, ""},
		{"domain: d\nquota_fallback: deny\n", config.QuotaDeny, ""},
		{"domain: d\nquota_fallback: ask\n", config.QuotaAsk, ""},
		{"domain: d\nquota_fallback: maybe\n", 0, `test.yaml:2: quota_fallback: "maybe": want allow, deny or ask`},
	} {
		p, err := config.Parse("test.yaml", []byte(tc.yaml))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %s", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := p.Domain("d").QuotaFallback; got != tc.want {
			t.Errorf("%q: %v, want %v", tc.yaml, got, tc.want)
		}
	}
}
