package grantor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/holdfast-io/holdfast/api/lease"
)

// StatusInterval is how often the status of a runtime that holds no lease
// (an Autonomy runtime) is read. No grant goes to it, so its status is the
// only word the controller has of what it found at its devices (a later
// owner epoch, docs/design.md §3 L13).
const StatusInterval = 10 * time.Second

// Report is the last status (GET /v1/lease) read from a watched runtime.
type Report struct {
	Target Target
	// At is when the status was read; zero until the first answer.
	At     time.Time
	Status lease.Status
}

// watch reads one runtime's status every StatusInterval.
type watch struct {
	target Target
	report Report
	cancel context.CancelFunc
	done   chan struct{}
}

// Watch keeps reading the status of t's runtime, which holds no lease, and
// calls Notify when what it says of its devices changes. A watch at another
// epoch or address is replaced. A stepped grantor (Options.Stepped) runs no
// watch: its caller steps the renewal loops only.
func (g *Grantor) Watch(t Target) {
	if g.opts.Stepped != nil {
		return
	}
	g.mu.Lock()
	if g.watches == nil {
		g.watches = map[types.NamespacedName]*watch{}
	}
	w := g.watches[t.Unit]
	if w != nil && w.target.Epoch == t.Epoch && w.target.PodUID == t.PodUID && w.target.Address == t.Address {
		g.mu.Unlock()
		return
	}
	delete(g.watches, t.Unit)
	g.mu.Unlock()
	if w != nil {
		w.stop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w = &watch{target: t, report: Report{Target: t}, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	g.watches[t.Unit] = w
	g.mu.Unlock()
	go g.runWatch(ctx, w)
}

// Unwatch stops reading the unit's runtime's status.
func (g *Grantor) Unwatch(unit types.NamespacedName) {
	g.mu.Lock()
	w := g.watches[unit]
	delete(g.watches, unit)
	g.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// Report is the last report of the unit's watched runtime.
func (g *Grantor) Report(unit types.NamespacedName) (Report, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.watches[unit]
	if w == nil {
		return Report{}, false
	}
	return w.report, true
}

func (w *watch) stop() {
	w.cancel()
	<-w.done
}

func (g *Grantor) runWatch(ctx context.Context, w *watch) {
	defer close(w.done)
	clk := g.opts.Clock
	for {
		st, err := g.readStatus(ctx, w.target)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			klog.V(2).InfoS("Reading a runtime's status", "unit", w.target.Unit, "epoch", w.target.Epoch, "err", err)
		} else {
			g.mu.Lock()
			changed := w.report.At.IsZero() || !slices.Equal(w.report.Status.LaterOwners, st.LaterOwners)
			w.report.At, w.report.Status = clk.Now(), st
			g.mu.Unlock()
			if changed {
				g.opts.Notify(w.target.Unit)
			}
		}
		t := clk.NewTimer(StatusInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// readStatus reads the runtime's status over the lease channel as a grant
// goes: the runtime proves it is the binding's (L12), on a connection made
// for this read alone, so a rotated certificate is used from the next read.
func (g *Grantor) readStatus(ctx context.Context, t Target) (lease.Status, error) {
	var st lease.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.scheme+"://"+t.Address+lease.Path, nil)
	if err != nil {
		return st, err
	}
	tr := g.transport(t)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%d: %.200s", resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, err
	}
	if st.Epoch != t.Epoch {
		return st, fmt.Errorf("the runtime at %s is at epoch %d, not %d", t.Address, st.Epoch, t.Epoch)
	}
	return st, nil
}
