//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestRollingRestartOfEveryComponentFencesNothing: in steady state (epoch 1
// holding and writing), every holdfast component is restarted one replica
// at a time, as an operator's rollout restart of every Deployment and of
// holdfast-node's DaemonSet (scenario.World.RollingRestart). Zero fences:
// watched at the runtime and in the Unit throughout the restart and one
// lease after it, the runtime never leaves Held or fences and stays the
// same incarnation, the binding stays epoch 1 Held, no Event of a lost
// lease, holdfast-node stops nothing of the unit, and the device keeps
// taking epoch 1's writes from one writer.
func TestRollingRestartOfEveryComponentFencesNothing(t *testing.T) {
	d := newDrill(t, "rolling-restart", 0)
	b1 := d.held(1)
	before := d.runtimeView(b1.Node, b1.Epoch, time.Second)
	w := d.watchSteady(b1.Epoch, b1.Node)
	startedAt := time.Now()
	if err := world.RollingRestart(d.ctx); err != nil {
		w.stop()
		t.Fatal(err)
	}
	rolled := time.Since(startedAt)
	d.runtimeView(b1.Node, b1.Epoch, 10*time.Second)
	if v := w.stop(); len(v) > 0 {
		t.Fatalf("while every component restarted, at %d of %d readings:\n%s", len(v), w.readings, strings.Join(v, "\n"))
	}
	t.Logf("every holdfast component restarted in %v (%s); %d readings of the runtime and the Unit, all Held", rolled.Round(100*time.Millisecond), world.Installed(), w.readings)
	after := d.runtimeView(b1.Node, b1.Epoch, time.Second)
	if after.Incarnation != before.Incarnation {
		t.Fatalf("the runtime was replaced: %+v, was %+v", after, before)
	}
	d.noFailoverEvents()
	acts, err := world.FenceActions(b1.Node)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acts {
		if a.Namespace == d.u.Key.Namespace && a.Unit == d.u.Key.Name {
			t.Fatalf("holdfast-node stopped the unit's runtime: %+v", a)
		}
	}
	d.writesSince(b1.Epoch, startedAt.Add(rolled))
	d.oneWriterSoFar()
}

// steadyWatch reads the runtime of epoch at node and the Unit every half
// second and keeps every reading that was not Held.
type steadyWatch struct {
	done       chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	violations []string
	readings   int
}

func (d *drill) watchSteady(epoch int64, node string) *steadyWatch {
	w := &steadyWatch{done: make(chan struct{})}
	url := fmt.Sprintf("http://%s:9443%s", world.Nodes[node].IP, lease.Path)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			var bad []string
			if st, err := leaseStatus(world.HTTPClient(), url); err != nil {
				bad = append(bad, "runtime: "+err.Error())
			} else if st.Epoch != epoch || st.Fenced || st.State != lease.Held {
				bad = append(bad, fmt.Sprintf("runtime: %+v", st))
			}
			if u, err := d.u.Get(d.ctx); err == nil {
				if b := u.Status.RuntimeBinding; b == nil || b.Epoch != epoch || b.LeaseState != holdfastv1.LeaseHeld {
					bad = append(bad, fmt.Sprintf("binding: %+v", b))
				}
			}
			w.mu.Lock()
			w.readings++
			for _, b := range bad {
				w.violations = append(w.violations, time.Now().Format(time.StampMilli)+" "+b)
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *steadyWatch) stop() []string {
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.violations
}
