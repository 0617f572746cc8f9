//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mb "github.com/simonvetter/modbus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/runtime/driver/modbus"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestADeviceHoldingALaterEpochIsNeverWritten (L13): the unit's device
// remembers an owner epoch later than any the controller draws (another
// binding took it). The real runtime reads the device's owner-epoch block
// before its first write and writes nothing, not even its epoch: the
// device's log stays empty while the runtime scans on. The Unit says so,
// through the lease reply (Failover) or the runtime's status (Autonomy): the
// condition LaterEpochAtDevice and a Warning Event naming the device, both
// epochs and the fix. The fix works: a failover with a confirmed fence draws
// the next epoch above the device's, and that runtime drives the device.
func TestADeviceHoldingALaterEpochIsNeverWritten(t *testing.T) {
	for _, mode := range []holdfastv1.AvailabilityMode{holdfastv1.Failover, holdfastv1.Autonomy} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			p := newPlantWith(t, func(u *holdfastv1.Unit) { u.Spec.Availability.Mode = mode }, "standby-1")
			later := time.Now().Add(24 * time.Hour).UnixMilli()
			declareOwner(t, p.dev.Addr(), later)

			p.place(1)
			e1 := p.epoch(1)
			if e1 >= later {
				t.Fatalf("the controller drew epoch %d, not below the device's %d: the test proves nothing", e1, later)
			}
			var c *metav1.Condition
			poll.Until(t, 60*time.Second, "LaterEpochAtDevice", func() (bool, string) {
				u := p.unit()
				c = meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionLaterEpochAtDevice)
				return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", u.Status.Conditions)
			})
			for _, want := range []string{
				fmt.Sprintf("device coupler at %s holds owner epoch %d, later than epoch %d of this unit's runtime on node %s, which writes nothing to it", p.dev.Addr(), later, e1, p.primary),
				fmt.Sprintf("Fix: stop whatever runtime holds epoch %d at the device", later),
				fmt.Sprintf("kubectl holdfast failover -n %s kiln --to <standby> --confirm-fenced", p.ns),
				fmt.Sprintf("drawn above %d", later),
			} {
				if !strings.Contains(c.Message, want) {
					t.Errorf("the condition does not say %q:\n%s", want, c.Message)
				}
			}
			if c.Reason != holdfastv1.ReasonWritesWithheld {
				t.Errorf("condition reason %s", c.Reason)
			}
			poll.Until(t, 10*time.Second, "the Event", func() (bool, string) {
				for _, e := range events(t, p.u) {
					if e.Reason == units.EventLaterEpochAtDevice && e.Type == "Warning" && e.Note == c.Message {
						return true, ""
					}
				}
				return false, strings.Join(p.eventReasons(), ",")
			})

			// The runtime goes on scanning, reading the block before each
			// attempt; nothing it sends reaches the device.
			reads := p.dev.ReadsServed()
			poll.Until(t, 20*time.Second, "ten more withheld attempts", func() (bool, string) {
				return p.dev.ReadsServed() >= reads+10, fmt.Sprintf("%d reads", p.dev.ReadsServed()-reads)
			})
			if log := p.dev.Writes(); len(log) != 0 {
				t.Fatalf("the device's log holds %d writes of a runtime behind its owner epoch, the first %+v", len(log), log[0])
			}

			// The fix: a person's failover, fence confirmed, goes above the
			// device's epoch, and that runtime drives the device.
			annotate(t, p.key, fenceConfirmed(t, p.key, "the other writer of the coupler was stopped", p.epoch(1),
				holdfastv1.AnnotationFailoverTo, p.targets[0]))
			p.place(2)
			if e2 := p.epoch(2); e2 <= later {
				t.Fatalf("the failover drew epoch %d, not above the device's %d", e2, later)
			}
			p.waitWrites(2)
			poll.Until(t, 30*time.Second, "LaterEpochAtDevice cleared", func() (bool, string) {
				u := p.unit()
				c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionLaterEpochAtDevice)
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason == holdfastv1.ReasonNoLaterEpoch, fmt.Sprintf("%+v", c)
			})
			log := p.dev.Writes()
			if err := devicesim.CheckOneWriter(log); err != nil {
				t.Fatal(err)
			}
			for _, w := range log {
				if w.Epoch != p.epoch(2) {
					t.Fatalf("the device saw a write at epoch %d: %+v", w.Epoch, w)
				}
			}
		})
	}
}

// declareOwner writes epoch into the device's owner-epoch block, as the
// runtime of a binding the controller never saw would have.
func declareOwner(t *testing.T, addr string, epoch int64) {
	t.Helper()
	c, err := mb.NewClient(&mb.ClientConfiguration{URL: "tcp://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Open(); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteRegisters(devicesim.DefaultEpochRegister, modbus.EncodeEpoch(epoch)); err != nil {
		t.Fatal(err)
	}
}
