package loadgen

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestParseValue(t *testing.T) {
	tests := []struct {
		in      string
		want    string // canonical form; "" with wantErr
		size    uint64
		wantErr string
	}{
		{in: "/orders", want: "/orders", size: 1},
		{in: "", want: "", size: 1},
		{in: "{1..100000}", want: "{1..100000}", size: 100000},
		{in: "user-{0..9}-x", want: "user-{0..9}-x", size: 10},
		{in: "{5..5}", want: "{5..5}", size: 1},
		{in: "{1..10:uniform}", want: "{1..10}", size: 10},
		{in: "{1..10:zipf}", want: "{1..10:zipf=1.1}", size: 10},
		{in: "u{1..10:zipf=1.5}", want: "u{1..10:zipf=1.5}", size: 10},
		{in: "{0..18446744073709551615}", want: "{0..18446744073709551615}", size: math.MaxUint64},
		{in: "{1..10", wantErr: "'{' without '}'"},
		{in: "1..10}", wantErr: "'}' without '{'"},
		{in: "{1..2}{3..4}", wantErr: "at most one key space"},
		{in: "{1-10}", wantErr: "want {LO..HI}"},
		{in: "{a..10}", wantErr: "low end"},
		{in: "{-1..10}", wantErr: "low end"},
		{in: "{1..}", wantErr: "high end"},
		{in: "{10..1}", wantErr: "is empty"},
		{in: "{1..10:zipf=1}", wantErr: "greater than 1"},
		{in: "{1..10:zipf=0.5}", wantErr: "greater than 1"},
		{in: "{1..10:zipf=x}", wantErr: "greater than 1"},
		{in: "{1..10:normal}", wantErr: "want uniform, zipf or zipf=S"},
	}
	for _, tt := range tests {
		v, err := ParseValue(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseValue(%q) error %v, want one saying %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseValue(%q): %v", tt.in, err)
			continue
		}
		if got := v.String(); got != tt.want {
			t.Errorf("ParseValue(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if got := v.Size(); got != tt.size {
			t.Errorf("ParseValue(%q).Size() = %d, want %d", tt.in, got, tt.size)
		}
	}
}

// draw draws n values of template from a PCG seeded (seed, 0) and counts
// them.
func draw(t *testing.T, template string, seed uint64, n int) map[string]int {
	t.Helper()
	v, err := ParseValue(template)
	if err != nil {
		t.Fatal(err)
	}
	d := v.drawer(rand.New(rand.NewPCG(seed, 0)))
	counts := map[string]int{}
	for range n {
		counts[d.next()]++
	}
	return counts
}

// TestKeySpaces draws from key spaces with a seeded source and checks the
// distribution of what comes out.
func TestKeySpaces(t *testing.T) {
	const n = 200_000
	tests := []struct {
		template string
		lo, hi   int
		prefix   string
		suffix   string
		// share(k) is the expected share of the k-th value (k=0 for lo).
		share func(k int) float64
	}{
		{template: "/orders", prefix: "/orders", share: func(int) float64 { return 1 }},
		{template: "u{1..10}", lo: 1, hi: 10, prefix: "u", share: func(int) float64 { return 0.1 }},
		{template: "{0..3}-x", lo: 0, hi: 3, suffix: "-x", share: func(int) float64 { return 0.25 }},
		{template: "{7..7}", lo: 7, hi: 7, share: func(int) float64 { return 1 }},
		{template: "u{1..100:zipf=1.1}", lo: 1, hi: 100, prefix: "u", share: zipfShare(100, 1.1)},
		{template: "{10..19:zipf=2}", lo: 10, hi: 19, share: zipfShare(10, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.template, func(t *testing.T) {
			counts := draw(t, tt.template, 42, n)
			fixed := tt.hi == 0 && tt.lo == 0
			for s, c := range counts {
				if fixed {
					if s != tt.prefix {
						t.Fatalf("drew %q, want only %q", s, tt.prefix)
					}
					continue
				}
				num, ok := strings.CutPrefix(s, tt.prefix)
				if !ok {
					t.Fatalf("drew %q: no prefix %q", s, tt.prefix)
				}
				num, ok = strings.CutSuffix(num, tt.suffix)
				if !ok {
					t.Fatalf("drew %q: no suffix %q", s, tt.suffix)
				}
				k, err := strconv.Atoi(num)
				if err != nil || k < tt.lo || k > tt.hi {
					t.Fatalf("drew %q: outside {%d..%d}", s, tt.lo, tt.hi)
				}
				// Each value within 5 standard deviations of its expected count.
				p := tt.share(k - tt.lo)
				want := p * n
				if sd := math.Sqrt(n * p * (1 - p)); math.Abs(float64(c)-want) > 5*sd+1 {
					t.Errorf("%q drawn %d times of %d, want %.0f ± %.0f", s, c, n, want, 5*sd)
				}
			}
			if !fixed && len(counts) != tt.hi-tt.lo+1 {
				t.Errorf("drew %d distinct values, want all %d", len(counts), tt.hi-tt.lo+1)
			}
		})
	}
}

// zipfShare returns the Zipf distribution's share of the k-th of n values
// with exponent s: (k+1)^-s over the sum of all.
func zipfShare(n int, s float64) func(int) float64 {
	var h float64
	for k := 1; k <= n; k++ {
		h += math.Pow(float64(k), -s)
	}
	return func(k int) float64 { return math.Pow(float64(k+1), -s) / h }
}

// TestSamplerStreams: the same seed and stream draw the same requests;
// another stream draws others.
func TestSamplerStreams(t *testing.T) {
	d, err := ParseDescriptor("path=/orders,user={1..1000000}")
	if err != nil {
		t.Fatal(err)
	}
	w := &Workload{Domain: "d", Descriptors: []Descriptor{d, d}}
	seq := func(seed, stream uint64) string {
		s := w.newSampler(seed, stream)
		var b strings.Builder
		for range 20 {
			r := s.next()
			for _, d := range r.descriptors {
				for _, e := range d.entries {
					b.WriteString(e.key + "=" + e.value + ";")
				}
			}
		}
		return b.String()
	}
	if a, b := seq(1, 0), seq(1, 0); a != b {
		t.Errorf("same seed and stream drew different requests:\n%s\n%s", a, b)
	}
	if a, b := seq(1, 0), seq(1, 1); a == b {
		t.Error("streams 0 and 1 drew the same requests")
	}
	if a, b := seq(1, 0), seq(2, 0); a == b {
		t.Error("seeds 1 and 2 drew the same requests")
	}
	if !strings.Contains(seq(1, 0), "path=/orders;user=") {
		t.Errorf("entries out of order: %s", seq(1, 0)[:80])
	}
}
