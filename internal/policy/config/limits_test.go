package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// descriptorsYAML returns a policy file of domain with n key-only
// descriptors.
func descriptorsYAML(domain string, n int) string {
	var b strings.Builder
	b.WriteString("domain: " + domain + "\ndescriptors:\n")
	for i := range n {
		b.WriteString("  - key: k" + strings.Repeat("x", i) + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	}
	return b.String()
}

// problems returns the problems of a load error, failing t when err is not
// config.Errors.
func problems(t *testing.T, err error) config.Errors {
	t.Helper()
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v (%T), want config.Errors", err, err)
	}
	return errs
}

// TestOversizeFileNotRead: a 50 MB policy file is rejected from its size,
// with a message that names the file and the limit, and without being read
// (far less than its size is allocated).
func TestOversizeFileNotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("domain: huge\ndescriptors:\n")
	if err := f.Truncate(50 << 20); err != nil { // sparse: cheap on disk
		t.Fatal(err)
	}
	f.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = config.Load(path)
	runtime.ReadMemStats(&after)
	errs := problems(t, err)
	want := path + ": 52428800 bytes, more than the limit of 2097152 (--max-policy-bytes); not parsed"
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("rejecting the file allocated %d bytes: it was read", alloc)
	}
}

func TestLoadLimits(t *testing.T) {
	dir := t.TempDir()
	small := descriptorsYAML("a", 3) // 3 descriptors
	size := int64(len(small))

	one := filepath.Join(dir, "one")
	os.Mkdir(one, 0o755)
	writeFile(t, filepath.Join(one, "a.yaml"), small)

	two := filepath.Join(dir, "two")
	os.Mkdir(two, 0o755)
	writeFile(t, filepath.Join(two, "a.yaml"), small)
	writeFile(t, filepath.Join(two, "b.yaml"), descriptorsYAML("b", 3))

	tests := []struct {
		name   string
		path   string
		limits config.PolicyBounds
		want   string // the one problem; "" for a policy
	}{
		{"a file at the byte limit", filepath.Join(one, "a.yaml"), config.PolicyBounds{MaxBytes: size, MaxDescriptors: 3}, ""},
		{"a file one byte over", filepath.Join(one, "a.yaml"), config.PolicyBounds{MaxBytes: size - 1, MaxDescriptors: 3},
			filepath.Join(one, "a.yaml") + ": " + itoa(size) + " bytes, more than the limit of " + itoa(size-1) + " (--max-policy-bytes); not parsed"},
		{"two files each within, together over", two, config.PolicyBounds{MaxBytes: size + 10, MaxDescriptors: 100},
			two + ": the policy files are " + itoa(2*size) + " bytes together, more than the limit of " + itoa(size+10) + " (--max-policy-bytes)"},
		{"descriptors at the limit", filepath.Join(one, "a.yaml"), config.PolicyBounds{MaxBytes: 1 << 20, MaxDescriptors: 3}, ""},
		{"one descriptor over", filepath.Join(one, "a.yaml"), config.PolicyBounds{MaxBytes: 1 << 20, MaxDescriptors: 2},
			filepath.Join(one, "a.yaml") + ":7: descriptors[2]: more than 2 descriptors (--max-policy-descriptors; aliases expanded, the files of a directory together); stopped here"},
		{"descriptors of a directory counted together", two, config.PolicyBounds{MaxBytes: 1 << 20, MaxDescriptors: 5},
			filepath.Join(two, "b.yaml") + ":7: descriptors[2]: more than 5 descriptors (--max-policy-descriptors; aliases expanded, the files of a directory together); stopped here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := config.LoadWithin(tt.path, tt.limits)
			if tt.want == "" {
				if err != nil || p == nil {
					t.Fatalf("error %v, want a policy", err)
				}
				return
			}
			if errs := problems(t, err); len(errs) != 1 || errs[0].Error() != tt.want {
				t.Errorf("got  %q\nwant %q", err, tt.want)
			}
		})
	}
	if _, err := config.LoadWithin(one, config.PolicyBounds{MaxBytes: 0, MaxDescriptors: 1}); err == nil {
		t.Error("a zero byte limit was accepted")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestHasLimits(t *testing.T) {
	tests := []struct {
		yaml string
		want bool
	}{
		{"domain: d\n", false},
		{"domain: d\ndescriptors: []\n", false},
		{"domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n", false},
		{"domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: second, requests_per_unit: 1}\n", true},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unlimited: true}\n", false},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n    descriptors:\n      - key: j\n        rate_limit: {unit: hour, requests_per_unit: 0}\n", true},
	}
	for _, tt := range tests {
		p, err := config.Parse("d.yaml", []byte(tt.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		if got := p.Domain("d").HasLimits(); got != tt.want {
			t.Errorf("%q: HasLimits %v, want %v", tt.yaml, got, tt.want)
		}
	}
}
