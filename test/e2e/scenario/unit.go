package scenario

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

// Unit is a Failover unit with its own device.
type Unit struct {
	Key   types.NamespacedName
	Plant *cluster.Plant
	// Register is the output register its runtime writes every scan.
	Register uint16
	// Device is its device's mode.
	Device devicesim.Mode
	// Protocol is what its device speaks.
	Protocol devicesim.Protocol
	w        *World
	// plantName and plantIndex start its device again (StartDevice).
	plantName  string
	plantIndex int
	// epochs are its bindings' epochs in order, as WaitBinding saw them:
	// the controller draws them from its clock and the cluster's epoch
	// record (docs/design.md §3 L13), so a drill names a binding by its
	// place, 1 for the first.
	epochs []int64

	mu sync.Mutex
	// nodes is the node of every epoch the Unit's status or a runtime pod
	// was seen bound to: the writers its device may see (Writers).
	nodes map[int64]string
	// conns is every connection to its device seen held by a runtime
	// process of it, with the process's epoch (watchConns).
	conns devicesim.Conns
	// device is its device's address, the same across StartDevice.
	device    string
	stopConns context.CancelFunc
}

// UnitOptions describe a unit.
type UnitOptions struct {
	Namespace, Name string
	// LeaseSeconds is the control lease (default: the installed grantor's
	// floor, the least the webhook admits, World.LeaseFloor); the start-up
	// grace is the lease but at least 30s, and the margin the hold bound.
	LeaseSeconds int32
	// Primary is the node the runtime starts on (labelled for the unit's
	// nodeSelector); Targets are the standbys.
	Primary string
	Targets []string
	// DeviceDown leaves the unit's device stopped when the Unit is created
	// (the coupler unreachable at start-up); StartDevice starts it.
	DeviceDown bool
	// MQTTBroker is the runtime's --mqtt-broker (a Broker's URL); empty
	// publishes nothing.
	MQTTBroker string
	// Device is its device's mode (default the World's).
	Device devicesim.Mode
	// Protocol is what its device speaks (default devicesim.Modbus).
	Protocol devicesim.Protocol
	// RuntimeArgs are more flags of its runtime.
	RuntimeArgs []string
	// Mode is its availability mode (default Failover).
	Mode holdfastv1.AvailabilityMode
	// WarmStandby keeps a warm pod on each standby (Failover only).
	WarmStandby bool
}

// startupGraceSeconds is the least start-up grace a unit gets: a container
// start on a real kubelet takes seconds on a busy 2-core machine, and a
// runtime that misses its grace is re-bound before it ever held.
const startupGraceSeconds = 30

// outputRegister is the register every runtime writes its counter to.
const outputRegister = 100

// leasePort is every unit's lease port.
const leasePort = 9443

// CreateUnit starts the unit's device, labels its primary and creates the
// Unit.
func (w *World) CreateUnit(ctx context.Context, o UnitOptions) (*Unit, error) {
	if o.LeaseSeconds == 0 {
		o.LeaseSeconds = w.LeaseFloor()
	}
	if o.Device == "" {
		o.Device = w.device
	}
	if o.Mode == "" {
		o.Mode = holdfastv1.Failover
	}
	if o.Protocol == "" {
		o.Protocol = devicesim.Modbus
	}
	if err := w.EnsureNamespace(ctx, o.Namespace); err != nil {
		return nil, err
	}
	w.plants++
	plantName, plantIndex := "plant-"+o.Namespace+"-"+o.Name, w.plants
	plant, err := w.StartPlant(ctx, plantName, plantIndex, o.Device, o.Protocol)
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
	device := deviceURL(plant.Address, o.Protocol, o.Device)
	args := []string{
		"--metrics-port=9441",
		"--scan-interval=200ms",
		"--device=coupler=" + device,
		fmt.Sprintf("--output=counter=coupler:%d,step=1", outputRegister),
	}
	if o.MQTTBroker != "" {
		args = append(args, "--mqtt-broker="+o.MQTTBroker)
	}
	args = append(args, o.RuntimeArgs...)
	hold := holdfastv1.HoldBound(time.Duration(o.LeaseSeconds) * time.Second)
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Spec: holdfastv1.UnitSpec{
			Runtime: holdfastv1.UnitRuntime{
				Image: RuntimeImage, ImagePullPolicy: corev1.PullNever, HealthPort: 9440, LeasePort: leasePort,
				Args: args,
			},
			NodeSelector: sel,
			Availability: holdfastv1.Availability{
				Mode:                       o.Mode,
				LeaseDurationSeconds:       o.LeaseSeconds,
				RuntimeStartupGraceSeconds: max(o.LeaseSeconds, startupGraceSeconds),
				RebindMarginSeconds:        ptr.To(int32(hold / time.Second)),
				Targets:                    &holdfastv1.FailoverTargets{Nodes: o.Targets},
				Colocation:                 holdfastv1.ColocationWarn,
				WarmStandby:                o.WarmStandby,
			},
		},
	}
	if err := w.Client.Create(ctx, u); err != nil {
		return nil, err
	}
	unit := &Unit{Key: client.ObjectKeyFromObject(u), Plant: plant, Register: outputRegister, Device: o.Device, Protocol: o.Protocol, w: w,
		plantName: plantName, plantIndex: plantIndex, nodes: map[int64]string{}, conns: devicesim.Conns{}, device: plant.Address}
	watch, stop := context.WithCancel(context.WithoutCancel(ctx))
	unit.stopConns = stop
	go unit.watchConns(watch)
	return unit, nil
}

// deviceURL is the runtime's --device URL of a device at addr. A device
// with an owner-epoch block (node) is told the runtime's epoch; a plain one
// is configured as a plant configures most: no such block. An OPC UA
// session takes a few round trips to open, so its requests get longer.
func deviceURL(addr string, protocol devicesim.Protocol, mode devicesim.Mode) string {
	if protocol == devicesim.OPCUA {
		url := fmt.Sprintf("opcua://%s?node.%d=%s&timeout=2s", addr, outputRegister, devicesim.OPCUANode(outputRegister))
		if mode == devicesim.OwnerEpoch {
			url += "&epochNode=" + devicesim.OPCUAEpochNode
		}
		return url
	}
	url := fmt.Sprintf("modbus://%s?timeout=1s", addr)
	if mode == devicesim.OwnerEpoch {
		url += fmt.Sprintf("&epochRegister=%d", devicesim.DefaultEpochRegister)
	}
	return url
}

// StartDevice starts the unit's device (stopped by DeviceDown) at the same
// address.
func (u *Unit) StartDevice(ctx context.Context) error {
	if !u.Plant.Exited() {
		return fmt.Errorf("unit %s: its device is running", u.Key)
	}
	p, err := u.w.StartPlant(ctx, u.plantName, u.plantIndex, u.Device, u.Protocol)
	if err != nil {
		return err
	}
	u.Plant = p
	return nil
}

// Get reads the Unit.
func (u *Unit) Get(ctx context.Context) (*holdfastv1.Unit, error) {
	var got holdfastv1.Unit
	if err := u.w.Client.Get(ctx, u.Key, &got); err != nil {
		return &got, err
	}
	if b := got.Status.RuntimeBinding; b != nil && b.Node != "" {
		u.sawBound(b.Epoch, b.Node)
	}
	return &got, nil
}

func (u *Unit) sawBound(epoch int64, node string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nodes[epoch] = node
}

// Writers are the runtimes the unit's device may have seen, in epoch
// order: every epoch its status or a runtime pod of it was seen bound to a
// node, with that node's field address.
func (u *Unit) Writers(ctx context.Context) ([]devicesim.Writer, error) {
	var pods corev1.PodList
	if err := u.w.Client.List(ctx, &pods, client.InNamespace(u.Key.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: u.Key.Name}); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		if e, err := strconv.ParseInt(p.Labels[holdfastv1.LabelEpoch], 10, 64); err == nil && p.Spec.NodeName != "" {
			u.sawBound(e, p.Spec.NodeName)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []devicesim.Writer
	for e, node := range u.nodes {
		wr := devicesim.Writer{Name: fmt.Sprintf("epoch %d on %s", e, node), Epoch: e}
		if n, ok := u.w.Nodes[node]; ok {
			wr.Host = n.FieldIP
		}
		out = append(out, wr)
	}
	slices.SortFunc(out, func(a, b devicesim.Writer) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out, nil
}

// Turns reads the device's write log by true time and connection into the
// writers' turns (devicesim.Turns), each connection named by the runtime
// process seen holding it (Conns): the error is the first sign of two
// writers, in either device mode.
func (u *Unit) Turns(ctx context.Context) ([]devicesim.Turn, error) {
	log, err := u.Writes(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := u.Writers(ctx)
	if err != nil {
		return nil, err
	}
	return devicesim.Turns(log, ws, u.Conns())
}

// Epoch is the epoch of the unit's n-th binding (1 for the first), zero
// until WaitBinding saw it.
func (u *Unit) Epoch(n int) int64 {
	if n < 1 || n > len(u.epochs) {
		return 0
	}
	return u.epochs[n-1]
}

// WaitBinding waits until the unit has its n-th binding (authorised, not
// necessarily placed or held), the first binding seen after the (n-1)-th,
// and returns it; a binding seen later than the n-th counts as the n-th.
func (u *Unit) WaitBinding(ctx context.Context, n int, timeout time.Duration) (*holdfastv1.RuntimeBinding, error) {
	if n < 1 || n > len(u.epochs)+1 {
		return nil, fmt.Errorf("unit %s: binding %d asked before binding %d was seen", u.Key, n, len(u.epochs)+1)
	}
	after := u.Epoch(n - 1)
	got, err := u.waitUnit(ctx, timeout, fmt.Sprintf("binding %d (an epoch above %d)", n, after), func(b *holdfastv1.Unit) bool {
		r := b.Status.RuntimeBinding
		return r != nil && r.Epoch > after
	})
	if err != nil {
		return binding(got), err
	}
	if n > len(u.epochs) {
		u.epochs = append(u.epochs, got.Status.RuntimeBinding.Epoch)
	}
	return binding(got), nil
}

// WaitHeld waits until the unit's n-th binding holds its lease and returns
// it.
func (u *Unit) WaitHeld(ctx context.Context, n int, timeout time.Duration) (*holdfastv1.RuntimeBinding, error) {
	start := time.Now()
	if _, err := u.WaitBinding(ctx, n, timeout); err != nil {
		return nil, err
	}
	return u.WaitHeldAt(ctx, u.Epoch(n), timeout-time.Since(start))
}

// WaitHeldAt waits until the binding at epoch holds its lease and returns
// it.
func (u *Unit) WaitHeldAt(ctx context.Context, epoch int64, timeout time.Duration) (*holdfastv1.RuntimeBinding, error) {
	got, err := u.waitUnit(ctx, timeout, fmt.Sprintf("lease Held at epoch %d", epoch), func(b *holdfastv1.Unit) bool {
		r := b.Status.RuntimeBinding
		return r != nil && r.Epoch == epoch && r.LeaseState == holdfastv1.LeaseHeld && r.LeaseStateEpoch == epoch
	})
	return binding(got), err
}

// WaitCondition waits until the Unit's condition of type is True and
// returns the Unit.
func (u *Unit) WaitCondition(ctx context.Context, condType string, timeout time.Duration) (*holdfastv1.Unit, error) {
	return u.waitUnit(ctx, timeout, "condition "+condType+" True", func(b *holdfastv1.Unit) bool {
		return meta.IsStatusConditionTrue(b.Status.Conditions, condType)
	})
}

// WaitConditionStatus waits until the Unit's condition of type has status
// and returns the Unit.
func (u *Unit) WaitConditionStatus(ctx context.Context, condType string, status metav1.ConditionStatus, timeout time.Duration) (*holdfastv1.Unit, error) {
	return u.waitUnit(ctx, timeout, fmt.Sprintf("condition %s %s", condType, status), func(b *holdfastv1.Unit) bool {
		c := meta.FindStatusCondition(b.Status.Conditions, condType)
		return c != nil && c.Status == status
	})
}

// BystanderGrant is what any process on the network could send: a
// well-formed grant for the unit's binding at epoch, acknowledged age and
// all, POSTed in plain HTTP to its runtime's lease port on node. It returns
// the runtime's answer (403 Unauthenticated: only the grantor, over mutual
// TLS, may grant).
func (u *Unit) BystanderGrant(ctx context.Context, node string, epoch int64) (int, string, error) {
	ack := int64(0)
	body, err := json.Marshal(lease.Grant{Unit: u.Key.String(), Epoch: epoch, DurationMillis: 600000, AckAgeMillis: &ack,
		Grantor: "bystander", Seq: uint64(time.Now().UnixNano())})
	if err != nil {
		return 0, "", err
	}
	url := fmt.Sprintf("http://%s:%d%s", u.w.Nodes[node].IP, leasePort, lease.Path)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := u.w.HTTPClient().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// Writes is the unit's device write log.
func (u *Unit) Writes(ctx context.Context) ([]devicesim.Write, error) {
	return devicesim.FetchWrites(u.w.HTTPClient(), u.Plant.HTTP)
}

// WaitWrites waits until the runtime of epoch has had n writes accepted.
func (u *Unit) WaitWrites(ctx context.Context, epoch int64, n int, timeout time.Duration) error {
	_, err := waitFor(ctx, timeout, func() ([]devicesim.Turn, error) {
		turns, _ := u.Turns(ctx) // counted whatever the judgement
		return turns, nil
	}, func(turns []devicesim.Turn) bool {
		t, _ := devicesim.Of(turns, epoch)
		return t.Accepted >= n
	}, func(turns []devicesim.Turn) error {
		return fmt.Errorf("unit %s: %d device writes of epoch %d not seen within %v (turns: %s)", u.Key, n, epoch, timeout, TurnsString(turns))
	})
	return err
}

// TurnsString prints turns for a finding.
func TurnsString(turns []devicesim.Turn) string {
	var out []string
	for _, t := range turns {
		out = append(out, fmt.Sprintf("%s on %s: %d accepted, %d refused, %s..%s", t.Writer.Name, t.Peer, t.Accepted, t.Refused,
			t.First.Format(time.StampMilli), t.Last.Format(time.StampMilli)))
	}
	return "[" + strings.Join(out, "; ") + "]"
}

// waitUnit waits until done holds for the Unit; what names the wait in the
// error, which shows the last status read.
func (u *Unit) waitUnit(ctx context.Context, timeout time.Duration, what string, done func(*holdfastv1.Unit) bool) (*holdfastv1.Unit, error) {
	return waitFor(ctx, timeout, func() (*holdfastv1.Unit, error) { return u.Get(ctx) }, done,
		func(last *holdfastv1.Unit) error {
			var st any
			if last != nil {
				st = last.Status
			}
			return fmt.Errorf("unit %s: %s not reached within %v (status %+v)", u.Key, what, timeout, st)
		})
}

// waitFor is the one wait of the scenario: it reads with get until done
// holds for what was read (a read that fails is tried again) and, at the
// deadline, returns the last thing read with failed's error wrapping the
// poll's.
func waitFor[T any](ctx context.Context, timeout time.Duration, get func() (T, error), done func(T) bool, failed func(last T) error) (T, error) {
	var last T
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		got, err := get()
		if err != nil {
			return false, nil
		}
		last = got
		return done(got), nil
	})
	if err != nil {
		return last, fmt.Errorf("%w: %w", failed(last), err)
	}
	return last, nil
}

func binding(u *holdfastv1.Unit) *holdfastv1.RuntimeBinding {
	if u == nil {
		return nil
	}
	return u.Status.RuntimeBinding
}

// NeighbourQueueWindow is how long after a node's link drops a segment can
// still wait in the kernel's neighbour (ARP) queue, below any socket, and so
// reach the device after its runtime fenced (runtime/README.md "Nothing
// late": the one late delivery the runtime cannot prevent). A re-bind margin
// at least this long means nothing of a fenced epoch can reach the device
// after the next epoch's first write.
const NeighbourQueueWindow = 3 * time.Second

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
	err := u.w.Client.Get(ctx, types.NamespacedName{Namespace: u.Key.Namespace, Name: holdfastv1.RuntimePodName(u.Key.Name, epoch)}, &pod)
	if err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &pod, nil
}

// WarmPods are the unit's warm pods not yet promoted, by the standby each
// stands by.
func (u *Unit) WarmPods(ctx context.Context) (map[string]corev1.Pod, error) {
	var pods corev1.PodList
	if err := u.w.Client.List(ctx, &pods, client.InNamespace(u.Key.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: u.Key.Name}); err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		if units.IsWarmPod(&p) && p.DeletionTimestamp.IsZero() {
			out[p.Labels[holdfastv1.LabelWarmStandby]] = p
		}
	}
	return out, nil
}

// WaitWarmReady waits until every standby due a warm pod runs a ready one
// (the WarmStandby condition True) and returns the warm pods.
func (u *Unit) WaitWarmReady(ctx context.Context, timeout time.Duration) (map[string]corev1.Pod, error) {
	if _, err := u.WaitConditionStatus(ctx, holdfastv1.ConditionWarmStandby, metav1.ConditionTrue, timeout); err != nil {
		return nil, err
	}
	return u.WarmPods(ctx)
}

// Delete removes the Unit and waits until kube-controller-manager's garbage
// collector has deleted its runtime pods (the Unit owns them) and the
// kubelets have stopped them (runtimes of every unit share the nodes' host
// ports), then stops its device.
func (u *Unit) Delete(ctx context.Context) error {
	if err := client.IgnoreNotFound(u.w.Client.Delete(ctx, &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: u.Key.Namespace, Name: u.Key.Name}})); err != nil {
		return err
	}
	if err := u.WaitPodsGone(ctx, 2*time.Minute); err != nil {
		return err
	}
	u.Plant.Stop(5 * time.Second)
	u.stopConns()
	return nil
}

// WaitPodsGone waits until no runtime pod of the unit exists.
func (u *Unit) WaitPodsGone(ctx context.Context, timeout time.Duration) error {
	var left []string
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		var pods corev1.PodList
		if err := u.w.Client.List(ctx, &pods, client.InNamespace(u.Key.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: u.Key.Name}); err != nil {
			return false, nil
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, fmt.Sprintf("%s on %s (deleting %v)", p.Name, p.Spec.NodeName, !p.DeletionTimestamp.IsZero()))
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("unit %s: runtime pods not gone: %v: %w", u.Key, left, err)
	}
	return nil
}
