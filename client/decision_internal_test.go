package client

import (
	"testing"
	"time"
)

func TestFormatWaitRoundsUp(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0 ms"},
		{0, "0 ms"},
		{1, "1 ms"},
		{time.Millisecond, "1 ms"},
		{time.Millisecond + 1, "2 ms"},
		{120 * time.Millisecond, "120 ms"},
		{999*time.Millisecond + 1, "1000 ms"},
		{time.Second, "1 s"},
		{time.Second + 1, "2 s"},
		{1200 * time.Millisecond, "2 s"},
		{2 * time.Minute, "120 s"},
	}
	for _, tt := range tests {
		if got := formatWait(tt.d); got != tt.want {
			t.Errorf("formatWait(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
