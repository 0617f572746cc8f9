// Package plugintest builds what the plugins' tests share: Ready nodes,
// runtime and voter-candidate pods, Units and VoterPolicies, and a scheduler
// framework handle over a snapshot of nodes and pods. Only tests import it.
package plugintest

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/holdfastclient"
)

// Namespace is where the tests' Units and runtime pods live.
const Namespace = "plant"

// ReadyNode is a Ready node with room for ordinary pods: 4 CPUs, 8Gi, 110
// pods.
func ReadyNode(name string) *st.NodeWrapper {
	return st.MakeNode().Name(name).
		Capacity(map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "110"}).
		Condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
}

// RuntimePod is the runtime pod of unit's epoch, as the controller creates
// it: named <unit>-runtime-e<epoch>, labelled, for holdfast-scheduler.
func RuntimePod(namespace, unit string, epoch int64) *st.PodWrapper {
	return st.MakePod().Namespace(namespace).Name(holdfastv1.RuntimePodName(unit, epoch)).
		UID(holdfastv1.RuntimePodName(unit, epoch)).
		SchedulerName(holdfastv1.SchedulerName).
		Label(holdfastv1.LabelUnit, unit).
		Label(holdfastv1.LabelEpoch, strconv.FormatInt(epoch, 10)).
		Container("holdfast.local/unit-runtime:dev")
}

// WarmPod is unit's warm standby pod on node, as the controller creates
// it: named WarmPodName, labelled with its unit and standby, no epoch.
func WarmPod(namespace, unit, node string) *st.PodWrapper {
	name := holdfastv1.WarmPodName(unit, node)
	return st.MakePod().Namespace(namespace).Name(name).UID(name).
		SchedulerName(holdfastv1.SchedulerName).
		Label(holdfastv1.LabelUnit, unit).
		Label(holdfastv1.LabelWarmStandby, node).
		Container("holdfast.local/unit-runtime:dev")
}

// WarmStandby keeps warm standbys of the unit.
func (u *UnitWrapper) WarmStandby() *UnitWrapper {
	u.Spec.Availability.WarmStandby = true
	return u
}

// VoterCandidatePod is the voter controller's placement pod.
func VoterCandidatePod(namespace, name string) *st.PodWrapper {
	return st.MakePod().Namespace(namespace).Name(name).UID(name).
		SchedulerName(holdfastv1.SchedulerName).
		Label(holdfastv1.LabelRole, holdfastv1.RoleVoterCandidate).
		Container("registry.k8s.io/pause:3.10")
}

// UnitWrapper builds a Unit.
type UnitWrapper struct{ holdfastv1.Unit }

// MakeUnit is a Failover unit named name whose primaries carry
// holdfast.io/device=<name>, with the CRD's defaults.
func MakeUnit(namespace, name string) *UnitWrapper {
	return &UnitWrapper{holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("unit-" + namespace + "-" + name)},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", HealthPort: 9440, LeasePort: 9443},
			NodeSelector: map[string]string{"holdfast.io/device": name},
			Availability: holdfastv1.Availability{
				Mode: holdfastv1.Failover, LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 120,
				Colocation: holdfastv1.ColocationWarn,
			},
		},
	}}
}

// Obj returns the Unit.
func (u *UnitWrapper) Obj() *holdfastv1.Unit { return &u.Unit }

// Mode sets the availability mode.
func (u *UnitWrapper) Mode(m holdfastv1.AvailabilityMode) *UnitWrapper {
	u.Spec.Availability.Mode = m
	return u
}

// Targets names failover target nodes.
func (u *UnitWrapper) Targets(nodes ...string) *UnitWrapper {
	if u.Spec.Availability.Targets == nil {
		u.Spec.Availability.Targets = &holdfastv1.FailoverTargets{}
	}
	u.Spec.Availability.Targets.Nodes = nodes
	return u
}

// TargetSelector chooses failover targets by label.
func (u *UnitWrapper) TargetSelector(sel *metav1.LabelSelector) *UnitWrapper {
	if u.Spec.Availability.Targets == nil {
		u.Spec.Availability.Targets = &holdfastv1.FailoverTargets{}
	}
	u.Spec.Availability.Targets.Selector = sel
	return u
}

// Colocation sets the co-location policy ("" for a Unit stored before the
// field existed).
func (u *UnitWrapper) Colocation(p holdfastv1.ColocationPolicy) *UnitWrapper {
	u.Spec.Availability.Colocation = p
	return u
}

// Authorised writes the binding the controller writes before it creates
// the pod of epoch: no node yet.
func (u *UnitWrapper) Authorised(b holdfastv1.RuntimeBinding) *UnitWrapper {
	u.Status.RuntimeBinding = &b
	return u
}

// PolicyWrapper builds a VoterPolicy.
type PolicyWrapper struct{ holdfastv1.VoterPolicy }

// MakePolicy is the singleton VoterPolicy with the CRD's defaults and the
// given members as voters.
func MakePolicy(clusterID string, voters ...string) *PolicyWrapper {
	return &PolicyWrapper{holdfastv1.VoterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{
			TargetVoters:     3,
			EligibleSelector: &metav1.LabelSelector{MatchLabels: map[string]string{holdfastv1.LabelVoterEligible: "true"}},
			Fitness:          holdfastv1.FitnessThresholds{WindowSeconds: 600, MaxFsyncMillis: 10, MaxPeerRTTMillis: 50},
			Etcd:             holdfastv1.EtcdAccess{Endpoints: []string{"https://127.0.0.1:2379"}},
		},
		Status: holdfastv1.VoterPolicyStatus{Voters: voters, ClusterID: clusterID},
	}}
}

// Obj returns the VoterPolicy.
func (p *PolicyWrapper) Obj() *holdfastv1.VoterPolicy { return &p.VoterPolicy }

// Learners lists learner members.
func (p *PolicyWrapper) Learners(nodes ...string) *PolicyWrapper {
	p.Status.Learners = nodes
	return p
}

// EligibleNode is a Ready node an admin allowed to become a voter and whose
// server unit is installed.
func EligibleNode(name string) *st.NodeWrapper {
	return ReadyNode(name).Label(holdfastv1.LabelVoterEligible, "true").Annotation(holdfastv1.AnnotationProvisioned, "true")
}

// Client is a fake apiserver client holding objs, with the status
// subresource of holdfast's kinds; funcs intercept its calls (zero value for
// none).
func Client(funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().
		WithScheme(holdfastclient.Scheme()).
		WithObjects(objs...).
		WithStatusSubresource(&holdfastv1.Unit{}, &holdfastv1.VoterPolicy{}).
		WithInterceptorFuncs(funcs).
		Build()
}

// Handle is a scheduler framework handle over nodes and pods: a snapshot
// for Filter and Reserve, a node informer for Bind, a fake clientset (its
// reactors answer the pods/binding the binder creates), and a recorder whose
// events the test reads.
func Handle(t testing.TB, nodes []*corev1.Node, pods []*corev1.Pod) (fwk.Handle, *events.FakeRecorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := clientsetfake.NewClientset()
	factory := informers.NewSharedInformerFactory(cs, 0)
	nodeStore := factory.Core().V1().Nodes().Informer().GetStore()
	for _, n := range nodes {
		if err := nodeStore.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	recorder := events.NewFakeRecorder(100)
	fh, err := tf.NewFramework(ctx,
		[]tf.RegisterPluginFunc{
			tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
			tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		}, holdfastv1.SchedulerName,
		frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(pods, nodes)),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithClientSet(cs),
		frameworkruntime.WithEventRecorder(recorder),
	)
	if err != nil {
		t.Fatal(err)
	}
	return fh, recorder
}

// InformerHandle is a scheduler framework handle whose informers list and
// watch cs (the test starts them) and whose pod activations go to
// activator.
func InformerHandle(t testing.TB, cs *clientsetfake.Clientset, activator fwk.PodActivator) fwk.Handle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fh, err := tf.NewFramework(ctx,
		[]tf.RegisterPluginFunc{
			tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
			tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		}, holdfastv1.SchedulerName,
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(cs, 0)),
		frameworkruntime.WithClientSet(cs),
		frameworkruntime.WithPodActivator(activator),
	)
	if err != nil {
		t.Fatal(err)
	}
	return fh
}

// Poll waits up to 10s for done, failing the test with what it waited for.
func Poll(t testing.TB, what string, done func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return done(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// NodeInfo is the snapshot's view of node name.
func NodeInfo(t testing.TB, fh fwk.Handle, name string) fwk.NodeInfo {
	t.Helper()
	ni, err := fh.SnapshotSharedLister().NodeInfos().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return ni
}
