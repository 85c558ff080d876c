package upstreamenv_test

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/daemon/upstreamenv"
)

// TestResponseDynamicMetadata: RESPONSE_DYNAMIC_METADATA=true is
// --response-dynamic-metadata; unset or false, the flag is not given.
func TestResponseDynamicMetadata(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string
		set   bool
	}{{"true", "true", true}, {"false", "", false}, {"", "", false}} {
		vars := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "USE_STATSD": "false"}
		if tc.value != "" {
			vars["RESPONSE_DYNAMIC_METADATA"] = tc.value
		}
		tr, err := upstreamenv.Translate(env(vars))
		if err != nil {
			t.Fatalf("%q: %v", tc.value, err)
		}
		got, set := flags(tr)["response-dynamic-metadata"]
		if got != tc.want || set != tc.set {
			t.Errorf("RESPONSE_DYNAMIC_METADATA=%q: --response-dynamic-metadata %q (given %v), want %q (given %v)", tc.value, got, set, tc.want, tc.set)
		}
		for _, w := range tr.Warnings {
			t.Errorf("RESPONSE_DYNAMIC_METADATA=%q: warning %q", tc.value, w)
		}
	}
}
