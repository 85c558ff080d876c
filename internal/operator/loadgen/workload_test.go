package loadgen

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestParseDescriptor(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "generic_key=global", want: "generic_key=global"},
		{in: "path=/orders,user=user-{1..100000:zipf}", want: "path=/orders,user=user-{1..100000:zipf=1.1}"},
		{in: "k=a=b", want: "k=a=b"},
		{in: "k=", want: "k="},
		{in: "", wantErr: "empty"},
		{in: "path", wantErr: `entry "path": want KEY=VALUE`},
		{in: "=v", wantErr: `entry "=v": want KEY=VALUE`},
		{in: "a=1,", wantErr: `entry "": want KEY=VALUE`},
		{in: "user={9..1}", wantErr: "is empty"},
	}
	for _, tt := range tests {
		d, err := ParseDescriptor(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseDescriptor(%q) error %v, want one saying %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseDescriptor(%q): %v", tt.in, err)
		} else if got := d.String(); got != tt.want {
			t.Errorf("ParseDescriptor(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseWorkload(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // domain line, then descriptors
		wantErr    string
	}{
		{name: "full", yaml: `
domain: shop
hits: 2
descriptors:
  - entries:
      - {key: path, value: /orders}
      - {key: user, value: "u-{1..100:zipf}"}
  - entries: [{key: generic_key, value: global}]
    hits: 0
`, want: []string{"shop 2", "path=/orders,user=u-{1..100:zipf=1.1}", "generic_key=global hits=0"}},
		{name: "unknown field", yaml: "domain: d\nrate: 5\ndescriptors: [{entries: [{key: k, value: v}]}]\n", wantErr: "field rate not found"},
		{name: "no domain", yaml: "descriptors: [{entries: [{key: k, value: v}]}]\n", wantErr: "domain: must not be empty"},
		{name: "no descriptors", yaml: "domain: d\n", wantErr: "at least one descriptor"},
		{name: "no entries", yaml: "domain: d\ndescriptors: [{hits: 1}]\n", wantErr: "descriptors[0]: no entries"},
		{name: "empty key", yaml: "domain: d\ndescriptors: [{entries: [{value: v}]}]\n", wantErr: "descriptors[0].entries[0]: key must not be empty"},
		{name: "bad value", yaml: "domain: d\ndescriptors: [{entries: [{key: k, value: 'x{1..}'}]}]\n", wantErr: "descriptors[0].entries[0]: value"},
		{name: "negative hits", yaml: "domain: d\nhits: -1\ndescriptors: [{entries: [{key: k, value: v}]}]\n", wantErr: "w.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ParseWorkload("w.yaml", []byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "w.yaml: ") {
					t.Errorf("error %q does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []string{fmt.Sprintf("%s %d", w.Domain, w.Hits)}
			for _, d := range w.Descriptors {
				got = append(got, d.String())
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		target  string
		wantErr string
	}{
		{target: "127.0.0.1:8081"},
		{target: "127.1.2.3:8081"},
		{target: "[::1]:8081"},
		{target: "[::ffff:127.0.0.1]:8081"},
		{target: "localhost:8081"},
		{target: "10.0.0.1:8081", wantErr: "not a loopback address"},
		{target: "0.0.0.0:8081", wantErr: "not a loopback address"},
		{target: "[2001:db8::1]:8081", wantErr: "not a loopback address"},
		{target: "127.0.0.1", wantErr: "want HOST:PORT"},
		{target: "no-such-host.invalid:8081", wantErr: "no-such-host.invalid"},
	}
	for _, tt := range tests {
		err := CheckLoopback(context.Background(), tt.target, nil)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("CheckLoopback(%q): %v", tt.target, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("CheckLoopback(%q) = %v, want an error saying %q", tt.target, err, tt.wantErr)
		}
	}
}
