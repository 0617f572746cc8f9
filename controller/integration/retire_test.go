//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
)

// L13 across re-creations, with real runtime processes on the real
// apiserver and a plain device (no owner-epoch register: it takes every
// write, as a real Modbus device does). A held Failover unit is deleted
// while its node's kubelet is cut off, so its runtime runs on and writes;
// a GitOps tool creates the Unit again at once, and again, until the name
// is free, with a primary on another node. The name stays taken until the
// deleted Unit's runtime has provably stopped writing (its lease and the
// margin since the last grant), so the device's log, read by real time and
// by peer, shows the old runtime's last write before the new one's first.
func TestARecreatedUnitNeverStartsASecondWriter(t *testing.T) {
	dev, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0", Mode: devicesim.Plain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	plainArgs := func(register string) []string { return plainArgs(dev, register) }
	p := newPlantWith(t, func(u *holdfastv1.Unit) { u.Spec.Runtime.Args = plainArgs("100") }, "standby-1")
	ctx := context.Background()
	poll.Until(t, 20*time.Second, "the finalizer on the Unit", func() (bool, string) {
		u := p.unit()
		return controllerutil.ContainsFinalizer(u, holdfastv1.FinalizerRuntimeStopped), fmt.Sprintf("finalizers %v", u.Finalizers)
	})
	other := p.ns + "-other"
	p.k.node(other, map[string]string{"holdfast.io/device": p.ns + "-other"})
	p.place(1)
	p.waitLease(1, holdfastv1.LeaseHeld, plantStartupWait)
	writesTo := func(register uint16) []devicesim.Write { return writesTo(dev, register) }
	poll.Until(t, 20*time.Second, "the first runtime writing", func() (bool, string) {
		return len(writesTo(100)) >= 3, fmt.Sprintf("%d writes", len(writesTo(100)))
	})
	old := p.k.proc(units.PodName("kiln", p.epoch(1)))

	p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
	gone := p.unit()
	if err := env.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	again := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "kiln"},
		Spec:       *p.u.Spec.DeepCopy(),
	}
	again.Spec.NodeSelector = map[string]string{"holdfast.io/device": p.ns + "-other"}
	again.Spec.Runtime.Args = plainArgs("101")
	refused, sawRetiring := 0, false
	poll.Until(t, 60*time.Second, "the Unit created again", func() (bool, string) {
		if u := (&holdfastv1.Unit{}); env.Client.Get(ctx, p.key, u) == nil && u.UID == gone.UID {
			c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionRuntimeHandOver)
			sawRetiring = sawRetiring || (c != nil && c.Status == metav1.ConditionTrue && strings.HasPrefix(c.Message, "Unit deleted"))
		}
		err := env.Client.Create(ctx, again.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			refused++
		}
		return err == nil, fmt.Sprintf("create: %v", err)
	})
	if refused == 0 || !sawRetiring {
		t.Fatalf("the name was free at once (refused %d creates, RuntimeHandOver seen %v): the deleted Unit was not held", refused, sawRetiring)
	}
	if st, err := old.leaseStatus(); err != nil || !st.Fenced || st.State != leaseapi.Fenced {
		t.Fatalf("the deleted Unit's runtime reports %+v (%v) once the name is free, want it fenced", st, err)
	}
	e := waitNewEpoch(t, p.key, 0)
	if e <= p.epoch(1) {
		t.Fatalf("the re-created Unit took epoch %d, not above %d", e, p.epoch(1))
	}
	schedule(t, p.key, e, other)
	poll.Until(t, 30*time.Second, "the re-created Unit's runtime writing", func() (bool, string) {
		return len(writesTo(101)) >= 3, fmt.Sprintf("%d writes", len(writesTo(101)))
	})
	olds, news := writesTo(100), writesTo(101)
	last, first := olds[len(olds)-1].Time, news[0].Time
	if !first.After(last) {
		t.Fatalf("two writers: the re-created Unit's runtime first wrote at %v, the deleted Unit's runtime last wrote at %v", first, last)
	}
	t.Logf("the deleted Unit's runtime last wrote at %v; the re-created Unit's first write came %v later (%d creates refused meanwhile)",
		last.Format(time.RFC3339Nano), first.Sub(last), refused)
	var reasons []string
	for _, ev := range events(t, gone) {
		if ev.Regarding.UID == gone.UID {
			reasons = append(reasons, ev.Reason)
		}
	}
	if !slices.Contains(reasons, units.EventRetiring) || !slices.Contains(reasons, units.EventRetired) {
		t.Fatalf("the deleted Unit's events %v, want %s and %s", reasons, units.EventRetiring, units.EventRetired)
	}
}

// plainArgs are a runtime's arguments for a plain device (no owner-epoch
// register) writing to register: each Unit's runtime counts on its own
// register of the one device, so the log tells the processes apart (all
// reach it from loopback).
func plainArgs(dev *devicesim.Sim, register string) []string {
	var args []string
	for _, a := range runtimeArgs(dev.Addr()) {
		a = strings.Replace(a, "epochRegister=9000", "epochRegister=none", 1)
		args = append(args, strings.Replace(a, "coupler:100", "coupler:"+register, 1))
	}
	return args
}

// writesTo are the device's accepted writes to register, in order.
func writesTo(dev *devicesim.Sim, register uint16) []devicesim.Write {
	var out []devicesim.Write
	for _, w := range dev.Writes() {
		if w.Register == register && w.Accepted {
			out = append(out, w)
		}
	}
	return out
}
