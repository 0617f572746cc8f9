//go:build integration

package chart

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

// The two roles of holdfast-controller run under their own accounts and
// neither holds the other's grants: with the chart's RBAC (voters enabled)
// in the real apiserver, every grant of one account is refused to the other
// by a SubjectAccessReview, and allowed to its own, except the rights both
// need (informers on Nodes and Pods, Events, the election Role). That each role
// works under its own account is TestRBACGrantsEachComponentOnlyWhatItUses:
// the real binary of each role runs there as its own account.
func TestControllerRolesHoldOnlyTheirOwnGrants(t *testing.T) {
	ctx := context.Background()
	_, ch, _ := renderDefaults(t)
	ms := renderCI(t, ch, "voters-values.yaml")
	const units, voters = "holdfast-controller", "holdfast-controller-voters"
	// The release namespace, when no earlier test installed the chart.
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, m := range ms {
		switch m.Kind {
		case "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding":
		default:
			continue
		}
		obj := (&unstructured.Unstructured{Object: m.Object}).DeepCopy()
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s/%s: %v", m.Kind, m.Namespace, m.Name, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(sa string, g Grant) bool {
		t.Helper()
		// RBAC takes a moment to see new roles: ask until the account's own
		// grant is allowed before judging the other's.
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   saUser(sa),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: g.Namespace, Verb: g.Verb,
				Group: g.Group, Resource: resourceOnly(g.Resource), Subresource: subresourceOf(g.Resource), Name: g.Name},
		}}
		res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status.Allowed
	}
	grants := map[string][]Grant{}
	for _, sa := range []string{units, voters} {
		b, err := Grants(ms, Namespace, sa)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Grants) == 0 {
			t.Fatalf("the chart grants %s nothing", sa)
		}
		grants[sa] = b.Grants
	}
	// covers: a grant of the other account that gives the same right (both
	// roles need it: informers on Nodes and Pods, Events, their elections).
	covers := func(g Grant, in []Grant) bool {
		for _, o := range in {
			if o.Verb == g.Verb && o.Group == g.Group && o.Resource == g.Resource &&
				(o.Namespace == "" || o.Namespace == g.Namespace) && (o.Name == "" || o.Name == g.Name) {
				return true
			}
		}
		return false
	}
	shared := 0
	for own, other := range map[string]string{units: voters, voters: units} {
		for _, g := range grants[own] {
			if covers(g, grants[other]) {
				shared++
				continue
			}
			pollLong(t, "RBAC allowing "+own+" "+g.String(), func() bool { return allowed(own, g) })
			if allowed(other, g) {
				t.Errorf("%s holds %s's grant %s (%s)", other, own, g, g.Role)
			}
		}
	}
	t.Logf("%d grants of both roles (informers, Events, elections), %d of the units role, %d of the voters role", shared, len(grants[units]), len(grants[voters]))
	// The rights that matter most, by name: the units account never moves
	// a voter nor reads etcd's client Secret, the voters account never writes
	// a Unit's binding.
	for _, c := range []struct {
		sa string
		g  Grant
	}{
		{units, Grant{Verb: "patch", Resource: "nodes"}},
		{units, Grant{Verb: "create", Group: "holdfast.io", Resource: "voterswaps"}},
		{units, Grant{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "holdfast-voter-swap"}},
		{units, Grant{Verb: "get", Resource: "secrets", Namespace: "kube-system", Name: "etcd-client"}},
		{voters, Grant{Verb: "update", Group: "holdfast.io", Resource: "units/status"}},
		{voters, Grant{Verb: "patch", Group: "holdfast.io", Resource: "units"}},
		{voters, Grant{Verb: "create", Resource: "pods", Namespace: "plant"}},
	} {
		if allowed(c.sa, c.g) {
			t.Errorf("%s may %s", c.sa, c.g)
		}
	}
}

// resourceOnly and subresourceOf split a grant's "units/status".
func resourceOnly(r string) string { res, _, _ := strings.Cut(r, "/"); return res }

func subresourceOf(r string) string { _, sub, _ := strings.Cut(r, "/"); return sub }
