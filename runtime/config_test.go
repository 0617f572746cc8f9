package runtime_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/simdriver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// Bad input: every output and input needs a name unique among both and a
// device that exists; each one that has not is named with its field path.
func TestConfigNamesEveryBadOutputAndInput(t *testing.T) {
	_, err := runtime.New(runtime.Config{
		Lease:                  lease.Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Autonomy, LeaseDuration: 30 * time.Second},
		InsecurePlaintextLease: true,
		Drivers:                []driver.Driver{simdriver.New("plc", 0)},
		Outputs:                []runtime.Output{{Name: "valve", Device: "plc"}, {Name: "valve", Device: "nowhere"}},
		Inputs:                 []runtime.Input{{Name: "", Device: "plc"}, {Name: "valve", Device: "plc"}},
	}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err == nil {
		t.Fatal("a config with clashing names and an unknown device was accepted")
	}
	for _, want := range []string{
		`outputs[1].name: "valve": must be set and unique`,
		`outputs[1].device: "nowhere": no such device`,
		`inputs[0].name: "": must be set and unique among inputs and outputs`,
		`inputs[1].name: "valve": must be set and unique among inputs and outputs`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "outputs[0]") {
		t.Errorf("error %q names the good first output", err)
	}
}
