package algorithms

// CheckedDecide is checkedDecide for the external tests (package
// algorithms_test), which decide algotest's cases: algotest imports this
// package, so only an external test package can import it.
var CheckedDecide = checkedDecide

// CheckedOp is checkedOp for the external tests.
var CheckedOp = checkedOp
