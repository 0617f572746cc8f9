package poll

import (
	"strings"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	for _, a := range args {
		f.failed += " " + strings.TrimSpace(strings.ReplaceAll(toString(a), "\n", " "))
	}
}

func toString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case time.Duration:
		return v.String()
	}
	return ""
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	f := &fakeT{}
	Until(f, time.Minute, "the third read", func() (bool, string) { n++; return n == 3, "not yet" })
	if f.failed != "" || n != 3 {
		t.Fatalf("failed %q after %d reads, want success on the third", f.failed, n)
	}
}

func TestUntilFailsWithWhatAndTheLastWord(t *testing.T) {
	f := &fakeT{}
	Until(f, 3*Interval, "a state that never comes", func() (bool, string) { return false, "still pending" })
	if !strings.Contains(f.failed, "a state that never comes") || !strings.Contains(f.failed, "still pending") {
		t.Fatalf("failure %q, want it to name what it waited for and the last word", f.failed)
	}
}

func TestTrueAdaptsABoolCondition(t *testing.T) {
	f := &fakeT{}
	Until(f, time.Minute, "true", True(func() bool { return true }))
	if f.failed != "" {
		t.Fatal(f.failed)
	}
}
