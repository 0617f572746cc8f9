package v1alpha1

import "testing"

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
