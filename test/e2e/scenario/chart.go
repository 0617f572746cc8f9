package scenario

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"helm.sh/helm/v3/pkg/action"
	helmchart "helm.sh/helm/v3/pkg/chart"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/test/chart"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// Install is how holdfast's components run on the cluster.
type Install string

const (
	// Processes: the webhook, the controllers and holdfast-scheduler run as
	// processes in the hub with flags the harness writes, holdfast-node as
	// a DaemonSet the harness writes.
	Processes Install = "processes"
	// Chart: `helm install charts/holdfast` (Helm's Go SDK) with the
	// chart's own Deployments, DaemonSet, RBAC, probes and webhook
	// certificate, every component's image built here and imported into
	// every node.
	Chart Install = "chart"
)

// InstallEnv names the Install a drill package uses, over its Options
// (HOLDFAST_E2E_INSTALL=chart go test -tags integration,e2e ./test/e2e/).
const InstallEnv = "HOLDFAST_E2E_INSTALL"

// ParseInstall reads an Install by name.
func ParseInstall(s string) (Install, error) {
	switch i := Install(s); i {
	case Processes, Chart:
		return i, nil
	}
	return "", fmt.Errorf("install %q: must be %s or %s", s, Processes, Chart)
}

// imageRepository and imageTag name the images the chart renders
// (<repository>/<binary>:<tag>); NodePluginImage is one of them.
const (
	imageRepository = "holdfast.test"
	imageTag        = "e2e"
)

// ReleaseName is the chart's release.
const ReleaseName = "holdfast"

// chartImages are the images of the components the chart runs.
func chartImages() []cluster.Image {
	var out []cluster.Image
	for _, bin := range []string{"holdfast-controller", "holdfast-webhook", "holdfast-scheduler"} {
		out = append(out, cluster.Image{Ref: fmt.Sprintf("%s/%s:%s", imageRepository, bin, imageTag), Package: "cmd/" + bin})
	}
	return out
}

// deploymentsLabel marks the nodes holdfast's Deployments run on: every
// node but the units' primary (Options.Nodes[0]). As in a plant, where the
// controllers run on the control side and not on the edge node a drill
// breaks, a fault of the primary does not take the grantor's leader with it
// (that fault is a drill of its own: the next leader holds off re-binds for
// the stand-down + lease + margin, longer than a drill's partition of 2x
// the lease).
const deploymentsLabel = "holdfast.test/deployments"

// chartValues are the values the chart is installed with here: the images
// built here, the units role's replicas and the drills' stand-down, the
// voters role when Options.Voters asks for it, the Deployments off the
// primary node (deploymentsLabel), and holdfast-node's host paths on these
// nodes. Everything else is the chart's default.
func (w *World) chartValues() map[string]any {
	onDeploymentNodes := map[string]any{deploymentsLabel: "true"}
	controller := map[string]any{"replicas": w.controllers, "nodeSelector": onDeploymentNodes,
		"units": map[string]any{"leaseStandDown": w.standDown.String()}}
	if w.chartVoters {
		// The cluster has no volume provisioner: the snapshots stay in an
		// emptyDir here. Their survival across the controller is held by
		// controller/voters' restart tests and the chart's render test.
		controller["voters"] = map[string]any{"enabled": true, "extraArgs": toAny(votersFlags),
			"persistence": map[string]any{"enabled": false}}
	}
	return map[string]any{
		"image":      map[string]any{"repository": imageRepository, "tag": imageTag, "pullPolicy": string(corev1.PullNever)},
		"controller": controller,
		"webhook":    map[string]any{"nodeSelector": onDeploymentNodes},
		"scheduler":  map[string]any{"nodeSelector": onDeploymentNodes},
		"node": map[string]any{
			"hostDir":          filepath.Join(cluster.NodeHostDir, "holdfast"),
			"systemdDir":       filepath.Join(cluster.NodeHostDir, "systemd"),
			"dbusSocket":       busSocket,
			"criSocket":        cluster.NodeCRISocket,
			"memberDataParent": filepath.Dir(memberDataDir),
			"etcd":             map[string]any{"localEndpoint": cluster.LocalEtcdURL},
		},
	}
}

// helmConfig is Helm's action configuration for the cluster, dialing
// through the hub.
func (w *World) helmConfig() (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &w.Kubeconfig
	ns := cluster.HoldfastNamespace
	flags.Namespace = &ns
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.Dial = w.Dial
		return c
	}
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, ns, "secret", func(format string, v ...any) { w.logf("helm: "+format, v...) }); err != nil {
		return nil, err
	}
	return cfg, nil
}

// helm is charts/holdfast and Helm's action configuration for the cluster.
func (w *World) helm() (*helmchart.Chart, *action.Configuration, error) {
	ch, err := chart.Load(w.Root)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := w.helmConfig()
	return ch, cfg, err
}

// installChart installs charts/holdfast and waits until every Deployment
// is available and holdfast-node ready on every node.
func (w *World) installChart(ctx context.Context) error {
	if err := w.EnsureNamespace(ctx, cluster.HoldfastNamespace); err != nil {
		return err
	}
	ch, cfg, err := w.helm()
	if err != nil {
		return err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = ReleaseName, cluster.HoldfastNamespace
	// The cluster starts with holdfast's CRDs (the processes install needs
	// them too): the chart adopts them, as helm install --take-ownership.
	inst.TakeOwnership = true
	inst.Timeout = 5 * time.Minute
	if _, err := inst.RunWithContext(ctx, ch, w.chartValues()); err != nil {
		return fmt.Errorf("helm install charts/holdfast: %w", err)
	}
	if err := w.WaitDeployments(ctx, 5*time.Minute); err != nil {
		return err
	}
	return w.WaitNodePlugins(ctx, 3*time.Minute)
}

// WaitDeployments waits until every Deployment of the release namespace has
// all its replicas updated and available.
func (w *World) WaitDeployments(ctx context.Context, timeout time.Duration) error {
	var last []string
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		var deps appsv1.DeploymentList
		if err := w.Client.List(ctx, &deps, client.InNamespace(cluster.HoldfastNamespace)); err != nil {
			last = []string{err.Error()}
			return false, nil
		}
		last = last[:0]
		for _, d := range deps.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want || d.Status.Replicas != want {
				last = append(last, fmt.Sprintf("%s: %d/%d updated, %d available, %d in all", d.Name, d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas, d.Status.Replicas))
			}
		}
		return len(deps.Items) > 0 && len(last) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("holdfast's Deployments not available: %s: %w\n%s", strings.Join(last, "; "), err, w.unreadyPods())
	}
	return nil
}

// unreadyPods says, for each pod of the release namespace that is not
// ready, its containers' states, its Events and the end of its log: what
// an operator reads when a rollout hangs.
func (w *World) unreadyPods() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := w.Client.List(ctx, &pods, client.InNamespace(cluster.HoldfastNamespace)); err != nil {
		return err.Error()
	}
	var evs corev1.EventList
	_ = w.Client.List(ctx, &evs, client.InNamespace(cluster.HoldfastNamespace))
	var b strings.Builder
	for _, p := range pods.Items {
		if podReady(&p) {
			continue
		}
		fmt.Fprintf(&b, "--- %s on %s (%s, IP %q):\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "container %s: ready=%v restarts=%d state=%+v last=%+v\n", c.Name, c.Ready, c.RestartCount, c.State, c.LastTerminationState)
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == p.Name {
				fmt.Fprintf(&b, "event %s x%d: %s\n", e.Reason, e.Count, e.Message)
			}
		}
		fmt.Fprintf(&b, "log:\n%s\n", w.podLogTail(ctx, p, 15))
	}
	return b.String()
}

// componentPods lists the release's pods of a chart component
// (app.kubernetes.io/component), running ones first by name.
func (w *World) componentPods(ctx context.Context, component string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := w.Client.List(ctx, &pods, client.InNamespace(cluster.HoldfastNamespace),
		client.MatchingLabels{"app.kubernetes.io/component": component}); err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods.Items, nil
}

// podLogTail is the end of a pod's container log, read through the
// apiserver as `kubectl logs` does.
func (w *World) podLogTail(ctx context.Context, pod corev1.Pod, lines int) string {
	cs, err := kubernetes.NewForConfig(w.Config)
	if err != nil {
		return err.Error()
	}
	n := int64(lines)
	b, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &n}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// The chart's component labels (app.kubernetes.io/component).
const (
	chartUnitsComponent     = "controller-units"
	chartSchedulerComponent = "scheduler"
)

// chartPorts are the controllers' metrics and health ports as the chart
// renders them by default.
const (
	chartMetricsPort = 8080
	chartHealthPort  = 8081
)

// chartControllers are the units role's pods as Controllers: identity the
// pod's name (its --identity), endpoints at the pod's address (the hub
// routes to every pod). Their Process is nil.
func (w *World) chartControllers() []*cluster.Controller {
	pods, err := w.componentPods(context.Background(), chartUnitsComponent)
	if err != nil {
		return nil
	}
	var out []*cluster.Controller
	for _, p := range pods {
		if p.Status.PodIP == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, &cluster.Controller{Identity: p.Name,
			Health:  fmt.Sprintf("http://%s:%d", p.Status.PodIP, chartHealthPort),
			Metrics: fmt.Sprintf("http://%s:%d", p.Status.PodIP, chartMetricsPort)})
	}
	return out
}

// chartRestarts sums the restarts of a component's containers.
func (w *World) chartRestarts(component string) int {
	pods, _ := w.componentPods(context.Background(), component)
	n := 0
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			n += int(c.RestartCount)
		}
	}
	return n
}

// chartLogs is the end of every pod's log of a component.
func (w *World) chartLogs(component string, lines int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := w.componentPods(ctx, component)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "--- %s on %s:\n%s\n", p.Name, p.Spec.NodeName, w.podLogTail(ctx, p, lines))
	}
	return b.String()
}

// ControllerLog is the end of a units-role replica's log, by its identity.
func (w *World) ControllerLog(c *cluster.Controller, lines int) string {
	if w.install != Chart {
		return c.Tail(lines)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p corev1.Pod
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: c.Identity}, &p); err != nil {
		return err.Error()
	}
	return w.podLogTail(ctx, p, lines)
}

// upgradeChart runs helm upgrade with the install's values changed by
// change, and waits until every Deployment has rolled.
func (w *World) upgradeChart(ctx context.Context, change func(values map[string]any)) error {
	ch, cfg, err := w.helm()
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout = cluster.HoldfastNamespace, 5*time.Minute
	values := w.chartValues()
	change(values)
	if _, err := up.RunWithContext(ctx, ReleaseName, ch, values); err != nil {
		return fmt.Errorf("helm upgrade: %w", err)
	}
	return w.WaitDeployments(ctx, 5*time.Minute)
}

// podRestarts is a chart pod a drill killed in place and its containers'
// restarts before.
type podRestarts struct {
	name     string
	restarts int32
}

func restartsOf(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// killContainer SIGKILLs the controller container of the release's pod
// named pod, by its PID on its node.
func (w *World) killContainer(ctx context.Context, pod string) (podRestarts, error) {
	var p corev1.Pod
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: pod}, &p); err != nil {
		return podRestarts{}, err
	}
	pid, err := w.Nodes[p.Spec.NodeName].ContainerPID(ctx, p.Namespace, p.Name, "controller")
	if err != nil {
		return podRestarts{}, err
	}
	return podRestarts{name: p.Name, restarts: restartsOf(&p)}, syscall.Kill(pid, syscall.SIGKILL)
}

// waitRestarted waits until the kubelet has started a killed pod's
// container again and the pod is ready.
func (w *World) waitRestarted(ctx context.Context, k podRestarts) error {
	var p corev1.Pod
	err := cluster.Poll(ctx, 3*time.Minute, func() (bool, error) {
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: k.name}, &p); err != nil {
			return false, nil
		}
		return restartsOf(&p) > k.restarts && podReady(&p), nil
	})
	if err != nil {
		return fmt.Errorf("the kubelet did not start %s again (restarts %d, was %d): %w", k.name, restartsOf(&p), k.restarts, err)
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// chartVotersComponent is the voters role's component label.
const chartVotersComponent = "controller-voters"

// chartVotersLeader is the voters role's pod holding its election, as a
// Controller (Process nil).
func (w *World) chartVotersLeader() *cluster.Controller {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var el coordinationv1.Lease
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: voters.ElectionID}, &el); err != nil || el.Spec.HolderIdentity == nil {
		return nil
	}
	pods, err := w.componentPods(ctx, chartVotersComponent)
	if err != nil {
		return nil
	}
	for _, p := range pods {
		if strings.HasPrefix(*el.Spec.HolderIdentity, p.Name) && p.Status.PodIP != "" {
			return &cluster.Controller{Identity: p.Name,
				Health:  fmt.Sprintf("http://%s:%d", p.Status.PodIP, chartHealthPort),
				Metrics: fmt.Sprintf("http://%s:%d", p.Status.PodIP, chartMetricsPort)}
		}
	}
	return nil
}

// VotersLog is the end of the voters role's log (installed by the chart:
// of every pod of it).
func (w *World) VotersLog(lines int) string {
	if w.install == Chart {
		return w.chartLogs(chartVotersComponent, lines)
	}
	if v := w.Voters(); v != nil {
		return v.Tail(lines)
	}
	return ""
}

// killChartVoters SIGKILLs the voters role's leading container on its node
// and waits until its kubelet has started it again and it is ready.
func (w *World) killChartVoters(ctx context.Context) error {
	v := w.chartVotersLeader()
	if v == nil {
		return fmt.Errorf("no pod of the voters role holds its election")
	}
	k, err := w.killContainer(ctx, v.Identity)
	if err != nil {
		return err
	}
	return w.waitRestarted(ctx, k)
}
