package engine

import (
	"strings"
	"testing"
)

// TestCheckEntries: the one check of a descriptor's entries, as the
// per-request APIs and the quota service's BucketIds share it: the first
// problem in order — none, too many, then each entry's key (empty, long)
// and value (long) — with what was found and the bound.
func TestCheckEntries(t *testing.T) {
	b := Bounds{MaxDescriptors: 1, MaxEntries: 2, MaxKeyBytes: 3, MaxValueBytes: 4}
	for _, tc := range []struct {
		name    string
		entries []string
		want    EntriesFault
	}{
		{"fine", []string{"k", "v", "key", "valu"}, EntriesFault{}},
		{"empty value", []string{"k", ""}, EntriesFault{}},
		{"none", nil, EntriesFault{Problem: NoEntries}},
		{"too many, before a bad key", []string{"", "v", "k", "v", "k", "v"}, EntriesFault{Problem: TooManyEntries, Got: 3, Limit: 2}},
		{"empty key", []string{"k", "v", "", "v"}, EntriesFault{Problem: EmptyKey, Entry: 1}},
		{"long key", []string{"keys", "v"}, EntriesFault{Problem: LongKey, Got: 4, Limit: 3}},
		{"long value", []string{"k", "v", "k", "value"}, EntriesFault{Problem: LongValue, Entry: 1, Got: 5, Limit: 4}},
		{"the first entry's first", []string{"k", "value", "", "v"}, EntriesFault{Problem: LongValue, Got: 5, Limit: 4}},
		{"a key before its value", []string{"keys", "value"}, EntriesFault{Problem: LongKey, Got: 4, Limit: 3}},
	} {
		if got := b.CheckEntries(entries(tc.entries...)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestValidateNamesTheField: the engine's messages for each problem
// CheckEntries finds, naming the field in the per-request APIs' words.
func TestValidateNamesTheField(t *testing.T) {
	b := Bounds{MaxDescriptors: 2, MaxEntries: 2, MaxKeyBytes: 3, MaxValueBytes: 4}
	one := func(d Descriptor) *Request {
		return &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k", "v")}, d}}
	}
	for _, tc := range []struct {
		req  *Request
		want string
	}{
		{one(Descriptor{}), "descriptors[1].entries: at least one entry is required"},
		{one(Descriptor{Entries: entries("a", "", "b", "", "c", "")}), "descriptors[1].entries: 3 entries; the limit is 2"},
		{one(Descriptor{Entries: entries("k", "v"), Limit: &InlineLimit{Name: "long"}}), "descriptors[1].limit.name: is 4 bytes; the limit is 3"},
		{one(Descriptor{Entries: entries("", "v"), Limit: &InlineLimit{Name: "long"}}), "descriptors[1].limit.name: is 4 bytes; the limit is 3"},
		{one(Descriptor{Entries: entries("k", "v", "", "v")}), "descriptors[1].entries[1].key: must not be empty"},
		{one(Descriptor{Entries: entries("keys", "v")}), "descriptors[1].entries[0].key: is 4 bytes; the limit is 3"},
		{one(Descriptor{Entries: entries("k", strings.Repeat("v", 5))}), "descriptors[1].entries[0].value: is 5 bytes; the limit is 4"},
	} {
		if err := b.validate(tc.req); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %s", tc.req.Descriptors[1], err, tc.want)
		}
	}
}
