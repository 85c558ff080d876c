package algorithms

import "testing"

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		Admit: "admit", Check: "check", Overdraft: "overdraft", Refund: "refund", 9: "Kind(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}
