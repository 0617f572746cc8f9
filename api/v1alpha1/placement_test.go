package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseEpoch(t *testing.T) {
	for v, want := range map[string]int64{"1": 1, "12": 12} {
		if got, err := ParseEpoch(v); err != nil || got != want {
			t.Errorf("ParseEpoch(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "0", "-3", "e12", "1.5", "+7", "07"} {
		if _, err := ParseEpoch(v); err == nil {
			t.Errorf("ParseEpoch(%q) accepted", v)
		}
	}
}

func TestParseIncarnation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *RuntimeIncarnation
		err  bool
	}{
		{in: "none"},
		{in: "5b1e3d2a-9c47-4f0e-8a61-2f7d9c3e4b10/0", want: &RuntimeIncarnation{PodUID: "5b1e3d2a-9c47-4f0e-8a61-2f7d9c3e4b10"}},
		{in: "uid/12", want: &RuntimeIncarnation{PodUID: "uid", RestartCount: 12}},
		{in: "", err: true},
		{in: "None", err: true},
		{in: "uid", err: true},
		{in: "/3", err: true},
		{in: "uid/", err: true},
		{in: "uid/-1", err: true},
		{in: "uid/+1", err: true},
		{in: "uid/01", err: true},
		{in: "a/b/1", err: true},
		{in: "uid/99999999999", err: true},
	} {
		got, err := ParseIncarnation(tc.in)
		if (err != nil) != tc.err || (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("ParseIncarnation(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil && got != nil && got.String() != tc.in {
			t.Errorf("%+v spells %q, read from %q", got, got.String(), tc.in)
		}
	}
}

func TestWarmPodNameIsADNSLabelForEveryNode(t *testing.T) {
	unit := strings.Repeat("u", MaxUnitNameLength)
	a, b := WarmPodName(unit, strings.Repeat("n", 253)), WarmPodName(unit, strings.Repeat("n", 252)+"m")
	if errs := validation.IsDNS1123Label(a); len(errs) > 0 {
		t.Errorf("WarmPodName = %q: %v", a, errs)
	}
	if a == b {
		t.Errorf("two nodes share the warm pod name %q", a)
	}
	if strings.HasPrefix(a, RuntimePodName(unit, 1)[:len(unit)+len(runtimePodInfix)]) {
		t.Errorf("warm pod %q reads as a runtime pod of an epoch", a)
	}
}
