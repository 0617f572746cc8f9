//go:build integration

package chart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// attacker is an identity the catalogue acts as: a client with its
// credentials, and the attacks its job is (not attempted, each with why).
type attacker struct {
	name string
	cfg  *rest.Config
	may  map[string]string
}

// clients are the attacker's clients: one for built-in kinds, one for
// holdfast's.
func (a attacker) clients(t *testing.T) (*kubernetes.Clientset, client.Client) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(a.cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cs, c
}

// attack is one thing a compromised component or a plant user must not do.
type attack struct {
	what string
	do   func(ctx context.Context, cs *kubernetes.Clientset, c client.Client) error
}

// The fixture the attacks aim at.
const (
	catNodeA, catNodeB = "cat-a", "cat-b"
	catUnit            = "kiln-1"
)

// catalogue are the attacks of issue 21 on the plant namespace plant (its
// Unit kiln-1 with a binding and runtime pod kiln-1-runtime-e1) and the
// namespace other (a Unit kiln-2). Every write is a server-side dry run:
// authorization and admission judge it, nothing is stored.
func catalogue(plant, other string) []attack {
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	patchNode := func(patch string) func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
		return func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			_, err := cs.CoreV1().Nodes().Patch(ctx, catNodeB, types.MergePatchType, []byte(patch), dry)
			return err
		}
	}
	runtimePod := func(ns string, epoch int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: holdfastv1.RuntimePodName(catUnit, epoch),
				Labels: map[string]string{holdfastv1.LabelUnit: catUnit, holdfastv1.LabelEpoch: fmt.Sprint(epoch)}},
			Spec: corev1.PodSpec{SchedulerName: holdfastv1.SchedulerName, Containers: []corev1.Container{{Name: "runtime", Image: "holdfast.local/unit-runtime:dev"}}},
		}
	}
	return []attack{
		{"cordon another Node", patchNode(`{"spec":{"unschedulable":true}}`)},
		{"taint another Node NoExecute", patchNode(`{"spec":{"taints":[{"key":"example.com/evict","effect":"NoExecute"}]}}`)},
		{"set another Node's desired role", patchNode(`{"metadata":{"labels":{"` + holdfastv1.LabelDesiredRole + `":"server"}}}`)},
		{"take the swap Lease", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			_, err := cs.CoordinationV1().Leases(holdfastv1.SwapLeaseNamespace).Patch(ctx, holdfastv1.SwapLeaseName, types.MergePatchType,
				[]byte(`{"spec":{"holderIdentity":"attacker","leaseDurationSeconds":3600}}`), dry)
			return err
		}},
		{"delete the swap Lease", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoordinationV1().Leases(holdfastv1.SwapLeaseNamespace).Delete(ctx, holdfastv1.SwapLeaseName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"create a VoterSwap", func(ctx context.Context, _ *kubernetes.Clientset, c client.Client) error {
			sw := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "attack"}, Spec: holdfastv1.VoterSwapSpec{Outgoing: catNodeA, Incoming: catNodeB}}
			return c.Create(ctx, sw, client.DryRunAll)
		}},
		{"change a Unit of another namespace", func(ctx context.Context, _ *kubernetes.Clientset, c client.Client) error {
			u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "kiln-2"}}
			return c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runtime":{"image":"attacker/runtime"}}}`)), client.DryRunAll)
		}},
		{"change a Unit's status (lease Expired)", updateStatus(plant, func(b *holdfastv1.RuntimeBinding) { b.LeaseState = holdfastv1.LeaseExpired })},
		{"change a Unit's status (epoch)", updateStatus(plant, func(b *holdfastv1.RuntimeBinding) { b.Epoch = 7 })},
		{"read the lease CA Secret", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			_, err := cs.CoreV1().Secrets(Namespace).Get(ctx, "holdfast-lease-ca", metav1.GetOptions{})
			return err
		}},
		{"list the release namespace's Secrets", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			_, err := cs.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"exec into a runtime pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoreV1().RESTClient().Post().Namespace(plant).Resource("pods").Name(holdfastv1.RuntimePodName(catUnit, 1)).
				SubResource("exec").Param("container", "runtime").Param("command", "sh").Param("stdout", "true").Do(ctx).Error()
		}},
		{"attach to a runtime pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoreV1().RESTClient().Post().Namespace(plant).Resource("pods").Name(holdfastv1.RuntimePodName(catUnit, 1)).
				SubResource("attach").Param("container", "runtime").Param("stdout", "true").Do(ctx).Error()
		}},
		{"port-forward to a runtime pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoreV1().RESTClient().Post().Namespace(plant).Resource("pods").Name(holdfastv1.RuntimePodName(catUnit, 1)).
				SubResource("portforward").Param("ports", "502").Do(ctx).Error()
		}},
		// A warm standby pod reads its devices: a shell in it writes to them
		// as surely as one in the bound runtime. It need not exist for the
		// apiserver to judge the request.
		{"exec into a warm standby pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoreV1().RESTClient().Post().Namespace(plant).Resource("pods").Name(holdfastv1.WarmPodName(catUnit, catNodeB)).
				SubResource("exec").Param("container", "runtime").Param("command", "sh").Param("stdout", "true").Do(ctx).Error()
		}},
		{"port-forward to a warm standby pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoreV1().RESTClient().Post().Namespace(plant).Resource("pods").Name(holdfastv1.WarmPodName(catUnit, catNodeB)).
				SubResource("portforward").Param("ports", "502").Do(ctx).Error()
		}},
		{"add an ephemeral container to a runtime pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			p, err := cs.CoreV1().Pods(plant).Get(ctx, holdfastv1.RuntimePodName(catUnit, 1), metav1.GetOptions{})
			if err != nil {
				// Without read access the attacker sends what it guesses.
				p = runtimePod(plant, 1)
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "attacker", Image: "busybox", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}})
			_, err = cs.CoreV1().Pods(plant).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"create a runtime pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			_, err := cs.CoreV1().Pods(plant).Create(ctx, runtimePod(plant, 2), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"create a runtime pod in the release namespace", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			_, err := cs.CoreV1().Pods(Namespace).Create(ctx, runtimePod(Namespace, 2), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"bind a runtime pod", func(ctx context.Context, cs *kubernetes.Clientset, _ client.Client) error {
			return cs.CoreV1().Pods(plant).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.RuntimePodName(catUnit, 1)},
				Target: corev1.ObjectReference{Kind: "Node", Name: catNodeA}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}},
	}
}

// As each identity issue 21 names, with the chart's RBAC and admission
// (its webhook served by the real binary, its policies in the apiserver),
// every attack of the catalogue that is not the identity's job is refused:
// the node plugin of cat-a, each holdfast-controller role, holdfast-scheduler,
// holdfast-webhook, a runtime pod's service account, and a plant user with
// edit rights in the plant namespace.
func TestTheAttackCatalogueIsRefused(t *testing.T) {
	ctx := context.Background()
	root, ch, ms := renderDefaults(t)
	vwc := installForComponents(t)
	applyRBAC(t, ms, renderCI(t, ch, "voters-values.yaml"))
	serveChartWebhook(t, vwc, buildBinary(t, root, "./cmd/holdfast-webhook"),
		serviceAccountKubeconfig(ctx, t, "holdfast-webhook"), containerArgs(t, ms, "webhook"))
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	plant, other := env.Namespace(t), env.Namespace(t)
	catalogueFixture(ctx, t, cs, plant, other)

	// The node plugin's pod on cat-a, and the runtime pod.
	nodePod, err := cs.CoreV1().Pods(Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "holdfast-node-" + catNodeA},
		Spec: corev1.PodSpec{ServiceAccountName: "holdfast-node", NodeName: catNodeA,
			Containers: []corev1.Container{{Name: "node", Image: "holdfast.local/holdfast-node:dev"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Pods(Namespace).Delete(ctx, nodePod.Name, metav1.DeleteOptions{}) })
	runtimePod, err := cs.CoreV1().Pods(plant).Get(ctx, holdfastv1.RuntimePodName(catUnit, 1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	kubeconfig := func(ns, sa string, pod *corev1.Pod) *rest.Config {
		cfg, err := clientcmd.BuildConfigFromFlags("", tokenKubeconfig(ctx, t, ns, sa, pod))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	editor := rest.CopyConfig(env.Config)
	editor.Impersonate = rest.ImpersonationConfig{UserName: "plant-editor"}
	grantEdit(ctx, t, cs, plant, "plant-editor")

	attackers := []attacker{
		{name: "holdfast-node of " + catNodeA, cfg: kubeconfig(Namespace, "holdfast-node", nodePod)},
		{name: "holdfast-controller (units)", cfg: kubeconfig(Namespace, "holdfast-controller", nil), may: map[string]string{
			"change a Unit of another namespace":            "it reconciles the Units of every namespace",
			"change a Unit's status (lease Expired)":        "it owns a Unit's status",
			"change a Unit's status (epoch)":                "it owns a Unit's status",
			"create a runtime pod":                          "it creates the runtime pod of each binding",
			"create a runtime pod in the release namespace": "it creates runtime pods in every namespace a Unit is in",
		}},
		{name: "holdfast-controller-voters", cfg: kubeconfig(Namespace, "holdfast-controller-voters", nil), may: map[string]string{
			"cordon another Node":             "it drains the outgoing voter",
			"taint another Node NoExecute":    "it taints nodes during a swap",
			"set another Node's desired role": "it sets the desired role during a swap",
			"take the swap Lease":             "the swap Lease is its own",
			"delete the swap Lease":           "the swap Lease is its own",
		}},
		{name: "holdfast-scheduler", cfg: kubeconfig(Namespace, "holdfast-scheduler", nil), may: map[string]string{
			"bind a runtime pod": "it places runtime pods",
		}},
		{name: "holdfast-webhook", cfg: kubeconfig(Namespace, "holdfast-webhook", nil)},
		{name: "a runtime pod (" + plant + "/default)", cfg: kubeconfig(plant, "default", runtimePod)},
		{name: "plant-editor (edit in " + plant + ")", cfg: editor},
	}

	// helm install does not wait for the chart's policies to reach the
	// apiserver's admission cache: each is first seen refusing.
	attempt := func(a attacker, what string) error {
		cs, c := a.clients(t)
		i := slices.IndexFunc(catalogue(plant, other), func(at attack) bool { return at.what == what })
		return catalogue(plant, other)[i].do(ctx, cs, c)
	}
	for _, p := range []struct {
		a          attacker
		what, name string
	}{
		{attackers[0], "cordon another Node", "holdfast-node-own-node"},
		{attackers[3], "change a Unit's status (lease Expired)", "holdfast-scheduler-records-placement-only"},
		{attackers[6], "port-forward to a runtime pod", "holdfast-runtime-pods-sealed"},
	} {
		eventually(t, "the chart's policy "+p.name+" in force", func() bool {
			err := attempt(p.a, p.what)
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+p.name+"'")
		})
	}

	var table []string
	for _, a := range attackers {
		cs, c := a.clients(t)
		for _, at := range catalogue(plant, other) {
			if why, ok := a.may[at.what]; ok {
				table = append(table, fmt.Sprintf("%-44s | %-48s | its job: %s", a.name, at.what, why))
				continue
			}
			err := pastWebhookCalls(func() error { return at.do(ctx, cs, c) })
			by, refused := refusedBy(err)
			if !refused {
				t.Errorf("%s: %s was not refused: %v", a.name, at.what, err)
				by = fmt.Sprintf("NOT REFUSED (%v)", err)
			}
			table = append(table, fmt.Sprintf("%-44s | %-48s | %s", a.name, at.what, by))
		}
	}
	t.Logf("identity | attempt | refusal\n%s", strings.Join(table, "\n"))
}

// updateStatus changes the binding of plant's kiln-1 as an update of the
// status (the verb holdfast-scheduler holds), read first as the attacker
// reads it (guessed when it may not).
func updateStatus(plant string, change func(*holdfastv1.RuntimeBinding)) func(context.Context, *kubernetes.Clientset, client.Client) error {
	return func(ctx context.Context, _ *kubernetes.Clientset, c client.Client) error {
		u := &holdfastv1.Unit{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: plant, Name: catUnit}, u); err != nil {
			u = &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: plant, Name: catUnit, ResourceVersion: "1"}}
		}
		if u.Status.RuntimeBinding == nil {
			u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 1}
		}
		change(u.Status.RuntimeBinding)
		return c.Status().Update(ctx, u, client.DryRunAll)
	}
}

// refusedBy says which part of the apiserver refused err, with its words.
func refusedBy(err error) (string, bool) {
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
		return "", false
	}
	msg := err.Error()
	by := "RBAC"
	switch {
	case strings.Contains(msg, "ValidatingAdmissionPolicy"):
		by = "policy"
	case strings.Contains(msg, "admission webhook"):
		by = "webhook"
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return by + ": " + msg, true
}

// catalogueFixture makes what the attacks aim at: Nodes cat-a and cat-b, the
// swap Lease (free), Unit kiln-1 in plant with its binding at epoch 1 and its
// runtime pod, Unit kiln-2 in other.
func catalogueFixture(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, plant, other string) {
	t.Helper()
	for _, name := range []string{catNodeA, catNodeB} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
		Labels: map[string]string{holdfastv1.LabelGuarded: "true"}}}
	if err := pastWebhookCalls(func() error {
		_, err := cs.CoordinationV1().Leases(lease.Namespace).Create(ctx, lease, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatalf("the swap Lease: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoordinationV1().Leases(lease.Namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{})
	})
	for ns, name := range map[string]string{plant: catUnit, other: "kiln-2"} {
		u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
				NodeSelector: map[string]string{"holdfast.io/device": name},
				Availability: holdfastv1.Availability{Mode: holdfastv1.Autonomy}}}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("Unit %s/%s: %v", ns, name, err)
		}
		if ns != plant {
			continue
		}
		u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 1, Pod: holdfastv1.RuntimePodName(catUnit, 1)}
		if err := env.Client.Status().Update(ctx, u); err != nil {
			t.Fatalf("the binding of %s: %v", name, err)
		}
	}
	// Runtime pods run as their namespace's default service account (no
	// controller-manager here makes it).
	if _, err := cs.CoreV1().ServiceAccounts(plant).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: plant, Name: holdfastv1.RuntimePodName(catUnit, 1),
			Labels: map[string]string{holdfastv1.LabelUnit: catUnit, holdfastv1.LabelEpoch: "1"}},
		Spec: corev1.PodSpec{SchedulerName: holdfastv1.SchedulerName, ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "runtime", Image: "holdfast.local/unit-runtime:dev"}}},
	}
	if _, err := cs.CoreV1().Pods(plant).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the runtime pod: %v", err)
	}
}

// grantEdit gives user the edit role in ns, as the cluster's aggregation
// controller makes it (no controller-manager runs here): the rules of every
// ClusterRole the bootstrap edit role aggregates.
func grantEdit(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, ns, user string) {
	t.Helper()
	edit, err := cs.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if edit.AggregationRule == nil {
		t.Fatal("the bootstrap edit role aggregates nothing")
	}
	var rules []rbacv1.PolicyRule
	for _, sel := range edit.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			t.Fatal(err)
		}
		roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range roles.Items {
			rules = append(rules, r.Rules...)
		}
	}
	if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods/exec") }) {
		t.Fatalf("the aggregated edit role grants no pods/exec: %v", rules)
	}
	name := "test-plant-edit"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{}) })
	b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
