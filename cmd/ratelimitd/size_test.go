package main

import "testing"

func TestByteSizeFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64 // 0: rejected
	}{
		{"256MiB", 256 << 20},
		{"1GiB", 1 << 30},
		{"64KiB", 64 << 10},
		{"1000", 1000},
		{"0", 0},
		{"-1MiB", 0},
		{"1.5GiB", 0},
		{"256MB", 256_000_000},
		{"2GB", 2_000_000_000},
		{"64KB", 64_000},
		{"256Mi", 256 << 20},
		{"1Gi", 1 << 30},
		{"256M", 0},
		{"256mb", 0},
		{"MiB", 0},
		{"9000000000GiB", 0},
	}
	for _, tt := range tests {
		var b byteSize
		err := b.Set(tt.in)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("Set(%q) = %d, want an error", tt.in, b)
			}
			continue
		}
		if err != nil || int64(b) != tt.want {
			t.Errorf("Set(%q) = %d, %v; want %d", tt.in, b, err, tt.want)
		}
		var again byteSize
		if err := again.Set(b.String()); err != nil || again != b {
			t.Errorf("Set(%q).String() = %q, which reads back as %d, %v", tt.in, b.String(), again, err)
		}
	}
}
