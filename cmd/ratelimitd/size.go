package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag of a number of bytes: a whole number with an optional
// unit, KiB, MiB or GiB (powers of 1024), as in 256MiB.
type byteSize int64

var byteUnits = []struct {
	suffix string
	scale  int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}}

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
		return fmt.Errorf("want a positive number of bytes, with KiB, MiB or GiB, as in 256MiB")
	}
	*b = byteSize(n * scale)
	return nil
}

func (b byteSize) String() string {
	for i := len(byteUnits) - 1; i >= 0; i-- {
		if u := byteUnits[i]; b != 0 && int64(b)%u.scale == 0 {
			return strconv.FormatInt(int64(b)/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
