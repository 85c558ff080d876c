package quota

import (
	"cmp"
	"slices"
)

// MaxMinFair divides capacity among demands, max-min fairly, in whole
// units: no one gets more than its demand, the sum never exceeds capacity,
// and a demand that gets less than it asks for gets at least as much as
// every other demand does, less one unit (the remainder of an uneven
// division goes to the unsatisfied demands earliest in the slice). A
// demand or capacity below zero counts as zero.
//
// It is water-filling: the smallest demands are met in full while they fit
// under an equal division of what is left; the rest share what is left
// equally. The result has one element per demand, in the same order.
func MaxMinFair(capacity int64, demands []int64) []int64 {
	shares := make([]int64, len(demands))
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(demands[a], demands[b]) })
	left := max(capacity, 0)
	for k, i := range order {
		d := max(demands[i], 0)
		level := left / int64(len(order)-k)
		if d <= level {
			shares[i] = d
			left -= d
			continue
		}
		// Every demand from here on is at least d > level: all get level,
		// and the remainder (fewer units than there are of them) goes one
		// each to the earliest in the slice.
		rest := order[k:]
		for _, j := range rest {
			shares[j] = level
		}
		left -= level * int64(len(rest))
		slices.Sort(rest)
		for _, j := range rest[:left] {
			shares[j]++
		}
		break
	}
	return shares
}
