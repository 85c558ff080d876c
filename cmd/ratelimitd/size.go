package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag of a number of bytes: a whole number with an optional
// unit, as in 256MiB. KiB, MiB and GiB (and Kubernetes' Ki, Mi, Gi) are
// powers of 1024; KB, MB and GB are powers of 1000, as their SI names say.
type byteSize int64

// byteUnits lists the units, longest suffix of each family first, so that
// "MiB" is not read as "Mi" followed by a stray "B"; String uses the first
// three, the binary ones.
var byteUnits = []struct {
	suffix string
	scale  int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
}

func (b *byteSize) Set(s string) error {
	num, scale := s, int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, scale = strings.TrimSpace(n), u.scale
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/scale {
		return fmt.Errorf("want a positive whole number of bytes, optionally with a unit: KiB, MiB, GiB (or Ki, Mi, Gi: powers of 1024) or KB, MB, GB (powers of 1000), as in 256MiB")
	}
	*b = byteSize(n * scale)
	return nil
}

func (b byteSize) String() string {
	for i := 2; i >= 0; i-- { // GiB, MiB, KiB
		if u := byteUnits[i]; b != 0 && int64(b)%u.scale == 0 {
			return strconv.FormatInt(int64(b)/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
