package metrics_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
)

// TestBuildInfo: ratelimitd_build_info is 1, labelled with the running
// build, and is the only series of its name. (cmd/ratelimitd's tests check
// the labels of a binary built from the checkout against git.)
func TestBuildInfo(t *testing.T) {
	i := buildinfo.Read()
	want := fmt.Sprintf(`ratelimitd_build_info{build_date=%q,goversion=%q,revision=%q,version=%q}`, i.Date(), i.GoVersion, i.Commit, i.Version)
	got := scrape(t, metrics.New())
	if v, ok := got[want]; !ok || v != 1 {
		t.Errorf("%s = %v (present: %v), want 1", want, v, ok)
	}
	n := 0
	for series := range got {
		if strings.HasPrefix(series, "ratelimitd_build_info{") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d ratelimitd_build_info series, want 1", n)
	}
}
