package topdenied

import (
	"fmt"
	"strings"
	"testing"
)

// TestHashTellsInputsApart hashes inputs that a careless hash confuses —
// short strings read in overlapping words, strings differing in one byte
// at any position, strings of zero bytes differing only in length, parts
// split at different places — and checks that no two collide and that
// the bits that pick a stripe and a table place are spread evenly.
func TestHashTellsInputsApart(t *testing.T) {
	k := newHashKey()
	seen := map[uint64][]string{}
	add := func(h uint64, what ...string) {
		if prev, ok := seen[h]; ok {
			t.Fatalf("%q and %q hash alike", prev, what)
		}
		seen[h] = what
	}
	const alphabet = "ab\x00z9"
	var short func(prefix string, n int)
	short = func(prefix string, n int) {
		add(k.part(0, prefix), prefix)
		if n == 0 {
			return
		}
		for _, c := range []byte(alphabet) {
			short(prefix+string(c), n-1)
		}
	}
	short("", 6)
	base := strings.Repeat("0123456789", 4)
	for i := range len(base) {
		for c := range 256 {
			if byte(c) != base[i] {
				s := base[:i] + string(rune(c))[:1] + base[i+1:]
				if c >= 0x80 {
					s = base[:i] + string([]byte{byte(c)}) + base[i+1:]
				}
				add(k.part(0, s), s)
			}
		}
	}
	for n := 1; n <= 64; n++ {
		z := strings.Repeat("\x00", n)
		add(k.part(0, z)^1, "zeros", z) // ^1: apart from the alphabet's
	}
	for i := range 100_000 {
		add(k.part(k.part(7, "path"), fmt.Sprintf("user-%d", i)), "user", fmt.Sprint(i))
	}
	for _, split := range [][2]string{{"ab", "c"}, {"a", "bc"}, {"abc", ""}, {"", "abc"}} {
		add(k.part(k.part(9, split[0]), split[1]), split[0], split[1])
	}

	var stripes [8]int
	var homes [512]int
	for h := range seen {
		stripes[h>>61]++
		homes[(h>>slotBits)&511]++
	}
	n := len(seen)
	for i, c := range stripes {
		if c < n/8*9/10 || c > n/8*11/10 {
			t.Errorf("stripe %d: %d of %d hashes; want about %d", i, c, n, n/8)
		}
	}
	for i, c := range homes {
		if c < n/512*6/10 || c > n/512*14/10 {
			t.Errorf("home %d: %d of %d hashes; want about %d", i, c, n, n/512)
		}
	}
}
