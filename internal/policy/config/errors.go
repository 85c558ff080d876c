package config

import (
	"strconv"
	"strings"
)

// A FieldError is one problem in a policy file: where it is and what is
// wrong with it.
type FieldError struct {
	// File is the file's path as Load found it, or the source given to
	// Parse.
	File string
	// Line is the 1-based line of the problem in File, or 0 when it has no
	// single line (a file that cannot be read, an empty file).
	Line int
	// Field is the path of the field in the file, in the form
	// descriptors[0].descriptors[1].rate_limit.unit; empty when the
	// problem concerns the file as a whole.
	Field string
	// Problem says what is wrong, and when it helps, what is wanted.
	Problem string
}

// Error returns "file:line: field: problem", leaving out ":line" when Line
// is 0 and "field: " when Field is empty.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Errors is every problem that Load or Parse found: files in the order they
// were read (a directory's in name order), and within a file in line order.
// Load and Parse return a non-empty Errors or a nil error, never an empty
// Errors.
type Errors []*FieldError

// Error returns the problems one per line.
func (e Errors) Error() string {
	var b strings.Builder
	for i, fe := range e {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so that errors.As finds a *FieldError.
func (e Errors) Unwrap() []error {
	errs := make([]error, len(e))
	for i, fe := range e {
		errs[i] = fe
	}
	return errs
}
