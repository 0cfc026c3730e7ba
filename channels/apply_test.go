package channels

import (
	"errors"
	"fmt"
	"testing"
)

func TestApplyErrorMessage(t *testing.T) {
	t.Parallel()
	err := &ApplyError{Failed: []AddonError{
		{Addon: "a", Err: errors.New("applying ConfigMap ns/x: boom")},
		{Addon: "b", Err: errors.Join(errors.New("one"), errors.New("two"))},
	}}
	got := err.Error()
	want := `2 addons failed: addon "a": applying ConfigMap ns/x: boom; addon "b": one; two`
	if got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	inner := fmt.Errorf("wrapped: %w", err)
	var ae *ApplyError
	if !errors.As(inner, &ae) || len(ae.Failed) != 2 {
		t.Errorf("errors.As(%v) did not find the ApplyError", inner)
	}
}
