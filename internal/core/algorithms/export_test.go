package algorithms

// CheckedDecide is checkedDecide for the external tests (package
// algorithms_test), which decide algotest's cases: algotest imports this
// package, so only an external test package can import it.
var CheckedDecide = checkedDecide

// CheckedOp is checkedOp for the external tests, with kind a store.Kind
// (Admit, Check, Overdraft, Refund: the values of op).
func CheckedOp(l Limit, s State, now int64, kind uint8, cost int64) (State, Decision, error) {
	return checkedOp(l, s, now, op(kind), cost)
}
