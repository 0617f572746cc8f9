package lease

import (
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestGrantValidateNamesEveryFieldAndReason(t *testing.T) {
	valid := Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: 30000, AckAgeMillis: ptr(int64(5000)), Anchor: "opaque-token",
		Grantor: "holdfast-controller-0", Seq: 9}
	if errs := valid.Validate(); len(errs) != 0 {
		t.Fatalf("a valid grant was refused: %v", errs)
	}
	noAck := valid
	noAck.AckAgeMillis = nil
	if errs := noAck.Validate(); len(errs) != 0 {
		t.Fatalf("a grant without an acknowledged age is well formed (it grants nothing): %v", errs)
	}

	bad := Grant{Epoch: 0, DurationMillis: 9999, AckAgeMillis: ptr(int64(-1))}
	errs := bad.Validate()
	got := errs.ToAggregate().Error()
	for _, want := range []string{
		"unit: Required value: must name the unit",
		"epoch: Invalid value: 0: must be at least 1",
		"durationMillis: Invalid value: 9999: must be between 10000 and 600000",
		"ackAgeMillis: Invalid value: -1: must not be negative",
		"grantor: Required value: must name the grantor",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Validate() = %q, missing %q", got, want)
		}
	}
	if len(errs) != 5 {
		t.Errorf("Validate() returned %d errors, want every one of 5: %v", len(errs), errs)
	}

	longAnchor := valid
	longAnchor.Anchor = Anchor(strings.Repeat("a", MaxAnchorLength+1))
	if errs := longAnchor.Validate(); len(errs) != 1 || errs[0].Field != "anchor" || !strings.Contains(errs[0].Error(), "128") {
		t.Errorf("an anchor longer than %d must be refused on anchor: %v", MaxAnchorLength, errs)
	}

	long := valid
	long.DurationMillis = 600001
	if errs := long.Validate(); len(errs) != 1 || errs[0].Field != "durationMillis" {
		t.Errorf("a duration above 600s must be refused on durationMillis: %v", errs)
	}
}

func TestGrantAckAge(t *testing.T) {
	g := Grant{DurationMillis: 30000}
	if _, ok := g.AckAge(); ok {
		t.Fatal("a grant without ackAgeMillis reported an acknowledged age")
	}
	g.AckAgeMillis = ptr(int64(1500))
	if age, ok := g.AckAge(); !ok || age.Milliseconds() != 1500 {
		t.Fatalf("AckAge() = %v, %v; want 1.5s, true", age, ok)
	}
	if g.Duration().Seconds() != 30 {
		t.Fatalf("Duration() = %v, want 30s", g.Duration())
	}
}
