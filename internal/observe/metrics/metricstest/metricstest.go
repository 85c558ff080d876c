// Package metricstest reads what a /metrics endpoint serves, for tests
// that assert exact counter values.
package metricstest

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"testing"
)

// Samples returns every sample of a Prometheus text exposition, keyed by
// its series as written: `name{label="value",...}`. Comments and blank
// lines are skipped; a sample whose value does not parse fails t.
func Samples(t testing.TB, exposition io.Reader) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	sc := bufio.NewScanner(exposition)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the exposition: %v", err)
	}
	return samples
}
