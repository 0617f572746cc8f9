package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

// Unit is a Failover unit with its own device.
type Unit struct {
	Key   types.NamespacedName
	Plant *cluster.Plant
	// Register is the output register its runtime writes every scan.
	Register uint16
	w        *World
	// plantName and plantIndex start its device again (StartDevice).
	plantName  string
	plantIndex int
}

// UnitOptions describe a unit.
type UnitOptions struct {
	Namespace, Name string
	// LeaseSeconds is the control lease (default 10, the least the API
	// admits); the start-up grace is the lease but at least 30s, and the
	// margin the hold bound.
	LeaseSeconds int32
	// Primary is the node the runtime starts on (labelled for the unit's
	// nodeSelector); Targets are the standbys.
	Primary string
	Targets []string
	// DeviceDown leaves the unit's device stopped when the Unit is created
	// (the coupler unreachable at start-up); StartDevice starts it.
	DeviceDown bool
}

// startupGraceSeconds is the least start-up grace a unit gets: a container
// start on a real kubelet takes seconds on a busy 2-core machine, and a
// runtime that misses its grace is re-bound before it ever held.
const startupGraceSeconds = 30

// outputRegister is the register every runtime writes its counter to.
const outputRegister = 100

// CreateUnit starts the unit's device, labels its primary and creates the
// Unit.
func (w *World) CreateUnit(ctx context.Context, o UnitOptions) (*Unit, error) {
	if o.LeaseSeconds == 0 {
		o.LeaseSeconds = 10
	}
	if err := w.EnsureNamespace(ctx, o.Namespace); err != nil {
		return nil, err
	}
	w.plants++
	plantName, plantIndex := "plant-"+o.Namespace+"-"+o.Name, w.plants
	plant, err := w.StartPlant(ctx, plantName, plantIndex)
	if err != nil {
		return nil, err
	}
	if o.DeviceDown {
		plant.Stop(5 * time.Second)
	}
	sel := map[string]string{"plant.example/" + o.Name: "io"}
	if err := w.LabelNode(ctx, o.Primary, sel); err != nil {
		return nil, err
	}
	hold := holdfastv1.HoldBound(time.Duration(o.LeaseSeconds) * time.Second)
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Spec: holdfastv1.UnitSpec{
			Runtime: holdfastv1.UnitRuntime{
				Image: RuntimeImage, ImagePullPolicy: corev1.PullNever, HealthPort: 9440, LeasePort: 9443,
				Args: []string{
					"--metrics-port=9441",
					"--scan-interval=200ms",
					fmt.Sprintf("--device=coupler=modbus://%s?epochRegister=%d&timeout=1s", plant.Address, devicesim.DefaultEpochRegister),
					fmt.Sprintf("--output=counter=coupler:%d,step=1", outputRegister),
				},
			},
			NodeSelector: sel,
			Availability: holdfastv1.Availability{
				Mode:                       holdfastv1.Failover,
				LeaseDurationSeconds:       o.LeaseSeconds,
				RuntimeStartupGraceSeconds: max(o.LeaseSeconds, startupGraceSeconds),
				RebindMarginSeconds:        ptr.To(int32(hold / time.Second)),
				Targets:                    &holdfastv1.FailoverTargets{Nodes: o.Targets},
				Colocation:                 holdfastv1.ColocationWarn,
			},
		},
	}
	if err := w.Client.Create(ctx, u); err != nil {
		return nil, err
	}
	return &Unit{Key: client.ObjectKeyFromObject(u), Plant: plant, Register: outputRegister, w: w,
		plantName: plantName, plantIndex: plantIndex}, nil
}

// StartDevice starts the unit's device (stopped by DeviceDown) at the same
// address.
func (u *Unit) StartDevice(ctx context.Context) error {
	if !u.Plant.Exited() {
		return fmt.Errorf("unit %s: its device is running", u.Key)
	}
	p, err := u.w.StartPlant(ctx, u.plantName, u.plantIndex)
	if err != nil {
		return err
	}
	u.Plant = p
	return nil
}

// Get reads the Unit.
func (u *Unit) Get(ctx context.Context) (*holdfastv1.Unit, error) {
	var got holdfastv1.Unit
	return &got, u.w.Client.Get(ctx, u.Key, &got)
}

// WaitHeld waits until the binding at epoch holds its lease and returns it.
func (u *Unit) WaitHeld(ctx context.Context, epoch int64, timeout time.Duration) (*holdfastv1.RuntimeBinding, error) {
	var last *holdfastv1.RuntimeBinding
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		got, err := u.Get(ctx)
		if err != nil {
			return false, nil
		}
		last = got.Status.RuntimeBinding
		return last != nil && last.Epoch == epoch && last.LeaseState == holdfastv1.LeaseHeld && last.LeaseStateEpoch == epoch, nil
	})
	if err != nil {
		return last, fmt.Errorf("unit %s: lease not Held at epoch %d within %v (binding %+v): %w", u.Key, epoch, timeout, last, err)
	}
	return last, nil
}

// WaitEpoch waits until the binding has reached epoch (authorised, not
// necessarily placed or held) and returns it.
func (u *Unit) WaitEpoch(ctx context.Context, epoch int64, timeout time.Duration) (*holdfastv1.RuntimeBinding, error) {
	var last *holdfastv1.RuntimeBinding
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		got, err := u.Get(ctx)
		if err != nil {
			return false, nil
		}
		last = got.Status.RuntimeBinding
		return last != nil && last.Epoch >= epoch, nil
	})
	if err != nil {
		return last, fmt.Errorf("unit %s: epoch %d not reached within %v (binding %+v): %w", u.Key, epoch, timeout, last, err)
	}
	return last, nil
}

// WaitCondition waits until the Unit's condition of type is True and
// returns the Unit.
func (u *Unit) WaitCondition(ctx context.Context, condType string, timeout time.Duration) (*holdfastv1.Unit, error) {
	var last *holdfastv1.Unit
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		got, err := u.Get(ctx)
		if err != nil {
			return false, nil
		}
		last = got
		return meta.IsStatusConditionTrue(got.Status.Conditions, condType), nil
	})
	if err != nil {
		var st any
		if last != nil {
			st = last.Status
		}
		return last, fmt.Errorf("unit %s: condition %s not True within %v (status %+v): %w", u.Key, condType, timeout, st, err)
	}
	return last, nil
}

// Writes is the unit's device write log.
func (u *Unit) Writes(ctx context.Context) ([]devicesim.Write, error) {
	return devicesim.FetchWrites(u.w.HTTPClient(), u.Plant.HTTP)
}

// WaitWrites waits until epoch has had n writes accepted.
func (u *Unit) WaitWrites(ctx context.Context, epoch int64, n int, timeout time.Duration) error {
	var last []int64
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		log, err := u.Writes(ctx)
		if err != nil {
			return false, nil
		}
		last = devicesim.Epochs(log)
		return len(devicesim.ByEpoch(log)[epoch]) >= n, nil
	})
	if err != nil {
		return fmt.Errorf("unit %s: %d device writes at epoch %d not seen within %v (epochs that wrote: %v): %w", u.Key, n, epoch, timeout, last, err)
	}
	return nil
}

// CheckNoTwoWriters reads a device's write log and proves there was one
// writer at a time: in the device's own order, the epoch of every accepted
// write never goes back (no two epochs interleave, no epoch wrote after a
// higher one had written). A write attempt of a lower epoch after a higher
// one wrote is allowed only as a late delivery: refused by the device's
// owner-epoch block, and on a connection the device had already seen before
// the higher epoch first wrote (a request the stale runtime sent before the
// cut, which TCP delivered when the link came back), and at most one such
// request per connection (a Modbus TCP client has one request in flight). A
// stale runtime that dialled again and tried, or went on trying on its old
// connection, is a failure. The late deliveries are returned
// so a drill can show them.
func CheckNoTwoWriters(log []devicesim.Write) (late []devicesim.Write, err error) {
	if err := devicesim.CheckOneWriter(log); err != nil {
		return nil, err
	}
	firstSeen := map[string]time.Time{}
	var high int64
	var highAt time.Time
	for _, w := range log {
		if _, ok := firstSeen[w.Peer]; !ok {
			firstSeen[w.Peer] = w.Time
		}
		if w.Epoch < high {
			if w.Accepted {
				return late, fmt.Errorf("epoch %d wrote register %d at %s after epoch %d had written at %s",
					w.Epoch, w.Register, w.Time.Format(time.RFC3339Nano), high, highAt.Format(time.RFC3339Nano))
			}
			if !firstSeen[w.Peer].Before(highAt) {
				return late, fmt.Errorf("epoch %d tried to write register %d at %s from %s, a connection first seen at %s, after epoch %d had written at %s: the stale runtime dialled the device again",
					w.Epoch, w.Register, w.Time.Format(time.RFC3339Nano), w.Peer, firstSeen[w.Peer].Format(time.RFC3339Nano), high, highAt.Format(time.RFC3339Nano))
			}
			if n := lateRequests(late, w); n > 0 {
				return late, fmt.Errorf("epoch %d tried to write register %d at %s from %s after epoch %d had written at %s, the %d-th late request on that connection: the stale runtime went on trying",
					w.Epoch, w.Register, w.Time.Format(time.RFC3339Nano), w.Peer, high, highAt.Format(time.RFC3339Nano), n+1)
			}
			late = append(late, w)
			continue
		}
		if w.Epoch > high && w.Accepted {
			high, highAt = w.Epoch, w.Time
		}
	}
	return late, nil
}

// lateRequests counts the requests (one per distinct time: a request
// writing several registers logs one Write each) from w's connection in
// late other than w's own.
func lateRequests(late []devicesim.Write, w devicesim.Write) int {
	seen := map[time.Time]bool{}
	for _, l := range late {
		if l.Peer == w.Peer && !l.Time.Equal(w.Time) {
			seen[l.Time] = true
		}
	}
	return len(seen)
}

// Events are the Unit's Events in time order.
func (u *Unit) Events(ctx context.Context) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := u.w.Client.List(ctx, &list, client.InNamespace(u.Key.Namespace)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Unit" && e.Regarding.Name == u.Key.Name {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	return out, nil
}

// PodEvents are the Events of the unit's runtime pods (the scheduler's
// FailedScheduling and Scheduled, the kubelet's) in time order.
func (u *Unit) PodEvents(ctx context.Context) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := u.w.Client.List(ctx, &list, client.InNamespace(u.Key.Namespace)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && strings.HasPrefix(e.Regarding.Name, u.Key.Name+"-runtime-e") {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return EventTime(out[i]).Before(EventTime(out[j])) })
	return out, nil
}

// EventTime is when an Event last happened.
func EventTime(e eventsv1.Event) time.Time { return eventTime(e) }

func eventTime(e eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	if e.DeprecatedLastTimestamp.Time.After(e.DeprecatedFirstTimestamp.Time) {
		return e.DeprecatedLastTimestamp.Time
	}
	return e.DeprecatedFirstTimestamp.Time
}

// EventReasons lists the reasons of the Unit's Events in time order.
func (u *Unit) EventReasons(ctx context.Context) ([]string, error) {
	evs, err := u.Events(ctx)
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out, err
}

// RuntimePod is the runtime pod of epoch, or nil.
func (u *Unit) RuntimePod(ctx context.Context, epoch int64) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := u.w.Client.Get(ctx, types.NamespacedName{Namespace: u.Key.Namespace, Name: fmt.Sprintf("%s-runtime-e%d", u.Key.Name, epoch)}, &pod)
	if err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &pod, nil
}

// Delete removes the Unit and its runtime pods and waits until the kubelets
// have stopped them (there is no garbage collector without a
// controller-manager, and runtimes of every unit share the nodes' host
// ports), then stops its device.
func (u *Unit) Delete(ctx context.Context) error {
	if err := client.IgnoreNotFound(u.w.Client.Delete(ctx, &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: u.Key.Namespace, Name: u.Key.Name}})); err != nil {
		return err
	}
	sel := client.MatchingLabels{holdfastv1.LabelUnit: u.Key.Name}
	err := cluster.Poll(ctx, 2*time.Minute, func() (bool, error) {
		var pods corev1.PodList
		if err := u.w.Client.List(ctx, &pods, client.InNamespace(u.Key.Namespace), sel); err != nil {
			return false, nil
		}
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp.IsZero() {
				_ = u.w.Client.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(2))
			}
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("unit %s: runtime pods not gone: %w", u.Key, err)
	}
	u.Plant.Stop(5 * time.Second)
	return nil
}
