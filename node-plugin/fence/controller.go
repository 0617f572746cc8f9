package fence

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/periodic"
)

// CacheUnits reads units from the manager's cache.
type CacheUnits struct{ Client client.Reader }

// Unit returns the cached unit.
func (c CacheUnits) Unit(ctx context.Context, namespace, name string) (*holdfastv1.Unit, bool) {
	u := &holdfastv1.Unit{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u); err != nil {
		return nil, false
	}
	return u, true
}

// CachePods reads runtime pods from the manager's cache, which holds the
// warm standby pods on this node (NewManager).
type CachePods struct{ Client client.Reader }

// PodLabels returns the cached pod's labels when it is the pod of uid.
func (c CachePods) PodLabels(ctx context.Context, namespace, name, uid string) (map[string]string, bool) {
	p := &corev1.Pod{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, p); err != nil || string(p.UID) != uid {
		return nil, false
	}
	return p.Labels, true
}

// HTTPLease reads GET /v1/lease over plain HTTP.
type HTTPLease struct{ Client *http.Client }

// Status fetches a runtime's lease status.
func (h HTTPLease) Status(ctx context.Context, host string, port int32) (*lease.Status, error) {
	c := h.Client
	if c == nil {
		c = &http.Client{Timeout: statusTimeout}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d%s", host, port, lease.Path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", lease.Path, resp.Status)
	}
	var st lease.Status
	if err := decodeJSON(resp.Body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// EventNotifier creates a Warning Event on the unit for each action,
// synchronously, so an action whose Event did not land stays queued. The
// Event is named after the action's sandbox: an agent that restarts after
// posting it but before recording it as posted posts it again harmlessly.
type EventNotifier struct {
	Client   client.Client
	NodeName string
}

// Fenced posts the action's Event.
func (n EventNotifier) Fenced(ctx context.Context, a Action) error {
	u := &holdfastv1.Unit{}
	ref := corev1.ObjectReference{Kind: "Unit", APIVersion: holdfastv1.GroupVersion.String(), Namespace: a.Namespace, Name: a.Unit}
	if err := n.Client.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Unit}, u); err == nil {
		ref.UID, ref.ResourceVersion = u.UID, u.ResourceVersion
	}
	at := metav1.NewTime(a.At)
	meta := metav1.ObjectMeta{GenerateName: a.Unit + ".fence.", Namespace: a.Namespace}
	if a.Sandbox != "" {
		meta = metav1.ObjectMeta{Name: a.Unit + ".fence." + shortID(a.Sandbox), Namespace: a.Namespace}
	}
	ev := &corev1.Event{
		ObjectMeta:          meta,
		InvolvedObject:      ref,
		Reason:              a.Reason,
		Message:             fmt.Sprintf("Node %s stopped runtime pod %s (epoch %d): %s", n.NodeName, a.Pod, a.Epoch, a.Message),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "holdfast-node", Host: n.NodeName},
		FirstTimestamp:      at,
		LastTimestamp:       at,
		Count:               1,
		ReportingController: "holdfast.io/holdfast-node",
		ReportingInstance:   n.NodeName,
		Action:              "Fence",
	}
	if err := n.Client.Create(ctx, ev); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// shortID is a CRI ID's first 16 characters (crictl shows 13), unique
// enough among one unit's sandboxes and safe in an object name.
func shortID(id string) string {
	if len(id) > 16 {
		return strings.ToLower(id[:16])
	}
	return strings.ToLower(id)
}

// ReadyzProbe says whether the apiserver answers /readyz within 2s.
func ReadyzProbe(cfg *rest.Config) (func(ctx context.Context) error, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}, nil
}

// UnitReconciler fences a unit's stale runtimes as soon as its binding
// changes.
type UnitReconciler struct {
	Agent *Agent
}

// SetupWithManager watches Units.
func (r *UnitReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("fence").For(&holdfastv1.Unit{}).Complete(r)
}

// Reconcile fences one unit's stale runtimes on this node.
func (r *UnitReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if _, err := r.Agent.FenceStale(ctx, req.Namespace, req.Name); err != nil {
		return ctrl.Result{}, err
	}
	r.Agent.Flush(ctx)
	return ctrl.Result{}, nil
}

// Loop is the agent's periodic pass (a manager Runnable): probe the
// apiserver, poll the local runtimes' lease status, then fence stale epochs,
// post queued Events and publish the host's runtimes while the apiserver
// answers, or stop wedged runtimes while it does not.
type Loop struct {
	Agent *Agent
	// Runtimes publishes the host's runtimes while the apiserver answers
	// (nil: not published).
	Runtimes *RuntimesReporter
	Probe    func(ctx context.Context) error
	// Every is the pass interval (1s when zero), on Clock (the real clock
	// when nil).
	Every time.Duration
	Clock clock.WithTicker
}

// Pass runs one pass.
func (l *Loop) Pass(ctx context.Context) {
	log := klog.FromContext(ctx)
	err := l.Probe(ctx)
	l.Agent.APIServerUnreachable(err != nil)
	if oerr := l.Agent.Observe(ctx); oerr != nil {
		log.Error(oerr, "Polling local runtimes")
	}
	if err != nil {
		log.V(2).Info("Apiserver out of reach: watching for wedged runtimes", "err", err)
		if _, ferr := l.Agent.FenceWedged(ctx); ferr != nil {
			log.Error(ferr, "Stopping wedged runtimes")
		}
		return
	}
	if _, ferr := l.Agent.FenceStale(ctx, "", ""); ferr != nil {
		log.Error(ferr, "Fencing stale runtimes")
	}
	l.Agent.Flush(ctx)
	if l.Runtimes != nil {
		if rerr := l.Runtimes.Pass(ctx); rerr != nil {
			log.Error(rerr, "Publishing the host's runtimes")
		}
	}
}

// Start runs passes until ctx ends.
func (l *Loop) Start(ctx context.Context) error {
	every := l.Every
	if every == 0 {
		every = time.Second
	}
	return periodic.Run(ctx, l.Clock, every, l.Pass)
}
