package grantor

import (
	"testing"
	"time"
)

func TestWithoutAnAnchorTheGrantorRetriesAtMostEverySecondAndNoPOSTOutlastsTheCadence(t *testing.T) {
	if got := StartupInterval(30 * time.Second); got != time.Second {
		t.Errorf("StartupInterval(30s) = %v, want 1s", got)
	}
	if got := RequestTimeout(10 * time.Second); got > 10*time.Second/6 {
		t.Errorf("RequestTimeout(10s) = %v, longer than the cadence", got)
	}
	if got := RequestTimeout(30 * time.Second); got != 2*time.Second {
		t.Errorf("RequestTimeout(30s) = %v, want 2s", got)
	}
}
