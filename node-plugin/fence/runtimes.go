package fence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Runtimes lists the runtime pods on this host from CRI: every sandbox
// with holdfast's unit and epoch labels that is ready or has a container
// that has not exited (a sandbox between two starts of its container still
// runs the runtime's pod). Sorted.
func (a *Agent) Runtimes(ctx context.Context) ([]holdfastv1.NodeRuntime, error) {
	a.init()
	sbs, err := a.runtimeSandboxes(ctx, "", "")
	if err != nil {
		return nil, err
	}
	out := []holdfastv1.NodeRuntime{}
	for _, r := range sbs {
		if r.epoch == 0 {
			// A warm standby bound to no epoch is no epoch's writer.
			continue
		}
		live := r.sb.State == runtimeapi.PodSandboxState_SANDBOX_READY
		if !live {
			cs, err := a.CRI.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: r.sb.Id})
			if err != nil {
				return nil, fmt.Errorf("listing containers of sandbox %s: %w", r.sb.Id, err)
			}
			live = slices.ContainsFunc(cs, func(c *runtimeapi.Container) bool { return c.State != runtimeapi.ContainerState_CONTAINER_EXITED })
		}
		if !live {
			continue
		}
		rt := holdfastv1.NodeRuntime{Namespace: r.namespace, Unit: r.unit, Epoch: r.epoch, Pod: r.sb.Labels[labelPodName], PodUID: r.sb.Labels[labelPodUID]}
		if m := r.sb.Metadata; m != nil && rt.PodUID == "" {
			rt.Pod, rt.PodUID = m.Name, m.Uid
		}
		out = append(out, rt)
	}
	slices.SortFunc(out, func(x, y holdfastv1.NodeRuntime) int {
		return strings.Compare(fmt.Sprintf("%s/%s@%020d/%s", x.Namespace, x.Unit, x.Epoch, x.PodUID), fmt.Sprintf("%s/%s@%020d/%s", y.Namespace, y.Unit, y.Epoch, y.PodUID))
	})
	return out, nil
}

// RuntimesReporter publishes the host's runtimes on its own Node
// (holdfast.io/runtimes, docs/design.md §3 L11/L13): the controller takes a
// runtime's pod gone from the apiserver as a stopped writer only with a
// listing made after it saw the pod gone, and only this plugin sees the
// process. It writes when the runtimes or the hand-overs it answers change,
// and at least every Refresh.
type RuntimesReporter struct {
	Agent *Agent
	// Client patches the Node; Units reads the Units (the cache).
	Client   client.Client
	Units    client.Reader
	NodeName string
	Clock    clock.PassiveClock
	// Refresh bounds the age of the published listing (30s when zero).
	Refresh time.Duration

	last *holdfastv1.RuntimesReport
}

// Pass lists the host and publishes it when due. The hand-overs it answers
// are read before the host is listed, so the listing is later than each.
func (r *RuntimesReporter) Pass(ctx context.Context) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	refresh := r.Refresh
	if refresh == 0 {
		refresh = 30 * time.Second
	}
	var units holdfastv1.UnitList
	if err := r.Units.List(ctx, &units); err != nil {
		return fmt.Errorf("listing units: %w", err)
	}
	var answers []holdfastv1.RuntimesAnswer
	for _, u := range units.Items {
		if b := u.Status.RuntimeBinding; b != nil && b.Node == r.NodeName && b.HandOver != nil && b.HandOver.PodGoneAt != nil {
			answers = append(answers, holdfastv1.RuntimesAnswer{Namespace: u.Namespace, Unit: u.Name, PodGoneAt: *b.HandOver.PodGoneAt})
		}
	}
	slices.SortFunc(answers, func(x, y holdfastv1.RuntimesAnswer) int {
		return strings.Compare(x.Namespace+"/"+x.Unit, y.Namespace+"/"+y.Unit)
	})
	running, err := r.Agent.Runtimes(ctx)
	if err != nil {
		return err
	}
	now := r.Clock.Now()
	rep := &holdfastv1.RuntimesReport{At: metav1.NewTime(now), Runtimes: running, Answers: answers}
	if l := r.last; l != nil && now.Sub(l.At.Time) < refresh && slices.Equal(l.Runtimes, rep.Runtimes) &&
		slices.EqualFunc(l.Answers, rep.Answers, func(x, y holdfastv1.RuntimesAnswer) bool {
			return x.Namespace == y.Namespace && x.Unit == y.Unit && x.PodGoneAt.Equal(&y.PodGoneAt)
		}) {
		return nil
	}
	val, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{holdfastv1.AnnotationRuntimes: string(val)}}})
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	node.Name = r.NodeName
	if err := r.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("publishing %s on Node %s: %w", holdfastv1.AnnotationRuntimes, r.NodeName, err)
	}
	r.last = rep
	return nil
}
