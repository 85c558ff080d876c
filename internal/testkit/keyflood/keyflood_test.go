package keyflood

import (
	"testing"

	"google.golang.org/protobuf/proto"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// TestEveryValueDistinct: consecutive requests, numbered as Send numbers
// them, carry PerRequest × Entries values each, every one new, of
// ValueLen bytes, under the keys Request says.
func TestEveryValueDistinct(t *testing.T) {
	for _, r := range []Request{
		{Method: "m", Entries: 1, Hits: 4000, ValueLen: MaxValueLen},
		{Method: "m", Entries: 16, ValueLen: 22},
	} {
		seen := map[string]bool{}
		var b, scratch []byte
		for i := range int64(3) {
			b = r.Encode(b[:0], scratch, i*int64(PerRequest*r.Entries))
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if m.Domain != "default" || m.Hits != r.Hits || len(m.Descriptors) != PerRequest {
				t.Fatalf("%+v: request %d is domain %q, hits %d, %d descriptors", r, i, m.Domain, m.Hits, len(m.Descriptors))
			}
			for _, d := range m.Descriptors {
				for e, en := range d.Entries {
					if want := map[bool]string{true: "path", false: Keys[e]}[r.Entries == 1]; en.Key != want || len(en.Value) != r.ValueLen {
						t.Fatalf("%+v: entry %q=%d bytes, want key %.10q… and %d bytes", r, en.Key, len(en.Value), want, r.ValueLen)
					}
					if seen[en.Value] {
						t.Fatalf("%+v: request %d repeats the value %.20q…", r, i, en.Value)
					}
					seen[en.Value] = true
				}
			}
		}
		if want := 3 * PerRequest * r.Entries; len(seen) != want {
			t.Errorf("%+v: %d distinct values in 3 requests, want %d", r, len(seen), want)
		}
	}
}

// TestOverallCode: varintField reads a response's overall_code, and 0
// when proto3 left it out.
func TestOverallCode(t *testing.T) {
	for _, code := range []rl.Code{rl.Code_CODE_OK, rl.Code_CODE_OVER_LIMIT, rl.Code_CODE_UNSPECIFIED} {
		b, err := proto.Marshal(&rl.ShouldRateLimitResponse{OverallCode: code, Statuses: []*rl.DescriptorStatus{{Code: rl.Code_CODE_OVER_LIMIT, Remaining: 7}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := varintField(b, 1); err != nil || got != uint64(code) {
			t.Errorf("overall_code of a %v response: %d, %v", code, got, err)
		}
	}
}
