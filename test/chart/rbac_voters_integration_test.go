//go:build integration

package chart

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/etcdproc"
	"github.com/holdfast-io/holdfast/test/etcdtls"
	"github.com/holdfast-io/holdfast/test/poll"
)

// votersUnexercised are the voters role's grants its scenario does not
// reach, each with why it stays.
var votersUnexercised = map[string]string{
	"create voterswaps.holdfast.io (ClusterRole/holdfast-controller-voters)": "an automatic swap (dry run off) is created only after a voter is unfit for a whole fitness window (at least 60s); " +
		"controller/voters TestNextIdleAndDecisions holds the decision, TestAnUnfitVoterIsOnlyProposedUnderDryRun drills it on real etcd",
	"create pods in holdfast-system (Role/holdfast-system/holdfast-controller-voter-candidate)": "the voter-candidate pod is placed only for a swap that names no incoming node; " +
		"this scenario's swap names its candidate (controller/voters TestFullSwapWithRealEtcd places and deletes one on real etcd)",
	"delete pods in holdfast-system (Role/holdfast-system/holdfast-controller-voter-candidate)": "the voter-candidate pod is deleted once the scheduler's pick is recorded, so only after a swap that placed one",
	"patch events.events.k8s.io (ClusterRole/holdfast-controller-voters)":                       "an Event is patched only when the same decision is recorded again within the event series window; this scenario records each once",
}

// renderCI renders the chart with charts/holdfast/ci/<file>.
func renderCI(t *testing.T, ch *chart.Chart, file string) []Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Dir(repoRoot(t)), "ci", file))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("ci/%s: %v", file, err)
	}
	ms, _, err := Render(ch, v)
	if err != nil {
		t.Fatalf("rendering with ci/%s: %v", file, err)
	}
	return ms
}

// addedGrants are the grants of b the defaults do not give sa: what the
// values file adds for its role.
func addedGrants(t *testing.T, defaults []Manifest, b Bound, sa string) Bound {
	t.Helper()
	d, err := Grants(defaults, Namespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	had := map[string]bool{}
	for _, g := range d.Grants {
		had[g.String()] = true
	}
	out := b
	out.Grants = nil
	for _, g := range b.Grants {
		if !had[g.String()] {
			out.Grants = append(out.Grants, g)
		}
	}
	if len(out.Grants) == 0 {
		t.Fatalf("the values add no grant to %s", sa)
	}
	return out
}

// applyRBAC puts the ServiceAccounts and RBAC objects rendered in with in place of those in
// base (the helm-installed defaults) for the test, and puts base back after.
func applyRBAC(t *testing.T, base, with []Manifest) {
	t.Helper()
	ctx := context.Background()
	key := func(m Manifest) string { return m.Kind + "/" + m.Namespace + "/" + m.Name }
	installed := map[string]Manifest{}
	for _, m := range base {
		installed[key(m)] = m
	}
	for _, m := range with {
		switch m.Kind {
		case "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding":
		default:
			continue
		}
		old, had := installed[key(m)]
		if had && reflect.DeepEqual(old.Object, m.Object) {
			continue
		}
		obj := &unstructured.Unstructured{Object: m.Object}
		obj = obj.DeepCopy()
		if !had {
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("creating %s: %v", key(m), err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
			continue
		}
		replace := func(to map[string]any) error {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(obj.GroupVersionKind())
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
				return err
			}
			next := (&unstructured.Unstructured{Object: to}).DeepCopy()
			next.SetResourceVersion(cur.GetResourceVersion())
			next.SetLabels(cur.GetLabels())
			next.SetAnnotations(cur.GetAnnotations())
			return env.Client.Update(ctx, next)
		}
		if err := replace(m.Object); err != nil {
			t.Fatalf("updating %s: %v", key(m), err)
		}
		t.Cleanup(func() {
			if err := replace(old.Object); err != nil {
				t.Errorf("restoring %s: %v", key(m), err)
			}
		})
	}
}

// votersScenario runs holdfast-controller --role=voters with the chart's
// args (ci/voters-values.yaml) against a real three-member etcd on loopback
// that requires client certificates, reached with the Secret the chart lets
// it read by name. A manual VoterSwap goes through the gates, the swap Lease,
// the verified snapshot, the candidate's cordon and drain (one pod evicted),
// and is abandoned before etcd is touched because the candidate's peer URL
// is unknown: uncordoned, the Lease released, the outcome recorded, with
// Events and the VoterPolicy status on the way.
func votersScenario(t *testing.T, bin, kubeconfig string, chartArgs []string) {
	ctx := context.Background()
	// Other tests act as this account too (the attack catalogue): only the
	// binary's requests, from here on, are judged.
	before, err := Requests(auditLog, saUser("holdfast-controller-voters"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pki := etcdtls.New(t)
	tlsArgs := pki.ServerArgs(t, dir)
	names := []string{"rb-v1", "rb-v2", "rb-v3"}
	ms, err := etcdproc.NewMembers(names...)
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for i := range ms {
		ms[i] = etcdtls.HTTPS(ms[i])
		endpoints = append(endpoints, ms[i].ClientURL)
	}
	for _, m := range ms {
		cmd := etcdproc.Command(filepath.Join(env.BinDir, "etcd"), m, filepath.Join(dir, m.Name), etcdproc.InitialCluster(ms...), "new")
		cmd.Args = append(cmd.Args, tlsArgs...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}

	// The client certificate where ci/voters-values.yaml says, and a
	// Secret beside it the role must never read.
	secret := pki.Secret("kube-system", "etcd-client")
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "rb-not-yours"}, StringData: map[string]string{"k": "v"}}
	for _, o := range []client.Object{secret, other} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, o) })
	}

	ready := func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
		if err := env.Client.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{holdfastv1.LabelEtcdRole: "true"}}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
		ready(n)
	}
	// The candidate: eligible, provisioned, Ready, but with neither a peer
	// URL annotation nor an InternalIP, so the swap stops before etcd.
	cand := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rb-vin", Labels: map[string]string{holdfastv1.LabelVoterEligible: "true"},
		Annotations: map[string]string{holdfastv1.AnnotationProvisioned: "true"}}}
	if err := env.Client.Create(ctx, cand); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, cand) })
	ready(cand)
	ns := env.Namespace(t)
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rb-web"},
		Spec: corev1.PodSpec{NodeName: cand.Name, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "web", Image: "example.invalid/web:1"}}}}
	if err := env.Client.Create(ctx, web); err != nil {
		t.Fatal(err)
	}

	policy := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, OperationTimeoutSeconds: 60,
			Etcd: holdfastv1.EtcdAccess{Endpoints: endpoints, ClientCertSecretRef: &corev1.SecretReference{Namespace: "kube-system", Name: "etcd-client"}}}}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, policy) })

	snapshots := filepath.Join(dir, "snapshots")
	proc := startProcess(t, bin, kubeconfig, override(chartArgs, map[string]string{
		"health-probe-bind-address": "127.0.0.1:0", "metrics-bind-address": "0",
		"audit-log-path": filepath.Join(dir, "audit.log"), "identity": "rb-voters",
		"snapshot-dir": snapshots, "voter-swap-pass-interval": "300ms", "voter-idle-pass-interval": "1s",
		"kubeconfig": kubeconfig, // in a pod: the in-cluster service account
	}))
	getPolicy := func() *holdfastv1.VoterPolicy {
		p := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pollLong(t, "the voters by etcd's vote in VoterPolicy status", func() bool {
		p := getPolicy()
		return strings.Join(p.Status.Voters, ",") == strings.Join(names, ",") && p.Status.Leader != ""
	})

	sw := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "rb-voter-swap"},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: "rb-v1", Incoming: cand.Name, Origin: holdfastv1.SwapManual, Reason: "RBAC scenario"}}
	if err := env.Client.Create(ctx, sw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	pollLong(t, "the swap abandoned for the unknown peer URL", func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sw), sw); err != nil {
			t.Fatal(err)
		}
		return sw.Status.Phase == holdfastv1.SwapAbandoned
	})
	hist, _ := json.Marshal(sw.Status.History)
	if !strings.Contains(string(hist), "NoPeerURL") || sw.Status.Snapshot == nil {
		t.Errorf("the swap did not go through the snapshot and the drain to NoPeerURL: snapshot %+v\n%s", sw.Status.Snapshot, hist)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(web), web); !apierrors.IsNotFound(err) {
		t.Errorf("the candidate's pod was not evicted: %v", err)
	}
	n := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cand), n); err != nil || n.Spec.Unschedulable {
		t.Errorf("the candidate is left cordoned: %v", err)
	}
	// The swap's phase is recorded first; the pass after it frees the Lease.
	l := &coordinationv1.Lease{}
	pollLong(t, "the swap Lease released", func() bool {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l); err != nil {
			t.Fatalf("the swap Lease: %v", err)
		}
		return l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	})
	t.Cleanup(func() { _ = env.Client.Delete(ctx, l) })
	proc.stop(t)

	// Secrets: only the one named in VoterPolicy, only by name.
	reqs, err := Requests(auditLog, saUser("holdfast-controller-voters"))
	if err != nil {
		t.Fatal(err)
	}
	read := false
	for _, r := range reqs[len(before):] {
		if r.Resource != "secrets" {
			continue
		}
		if r.Verb != "get" || r.Namespace != "kube-system" || r.Name != "etcd-client" {
			t.Errorf("the voters role touched a Secret other than by name: %s", r)
		}
		read = read || r.Code == 200
	}
	if !read {
		t.Errorf("the voters role never read the etcd client Secret")
	}
}

// pollLong is eventually with room for a real etcd and a loaded machine.
func pollLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 3*time.Minute, what, poll.True(cond))
}
