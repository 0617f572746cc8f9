// Package uninstallguard refuses helm uninstall while Units in Failover mode
// exist. Uninstalling stops the grantor that renews their leases, so each
// such runtime fences once its lease runs out (docs/operations.md,
// "Uninstalling"). The chart runs Check from a pre-delete hook Job
// (holdfast-controller --role=uninstall-guard) unless uninstall.force.
package uninstallguard

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// FailoverUnits lists the Units of every namespace whose
// spec.availability.mode is Failover, a Unit being deleted included (its
// runtime runs until holdfast-controller has seen it stop), sorted by
// namespace and name. c should read the apiserver, not a cache.
func FailoverUnits(ctx context.Context, c client.Reader) ([]types.NamespacedName, error) {
	var out []types.NamespacedName
	opts := []client.ListOption{client.Limit(500)}
	for {
		var list holdfastv1.UnitList
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("listing Units: %w", err)
		}
		for _, u := range list.Items {
			if u.Spec.Availability.Mode == holdfastv1.Failover {
				out = append(out, types.NamespacedName{Namespace: u.Namespace, Name: u.Name})
			}
		}
		if list.Continue == "" {
			break
		}
		opts = []client.ListOption{client.Limit(500), client.Continue(list.Continue)}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// Release names the helm release the guard protects, for the fix it prints.
type Release struct {
	Name, Namespace string
}

// Check returns nil when no Unit runs in Failover mode, else an error that
// names each such Unit and the ways on.
func Check(ctx context.Context, c client.Reader, rel Release) error {
	units, err := FailoverUnits(ctx, c)
	if err != nil {
		return err
	}
	if len(units) == 0 {
		return nil
	}
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.String()
	}
	// helm has marked the release uninstalling when its pre-delete hook
	// runs, and helm upgrade refuses such a release: the ways on are
	// another helm uninstall or a rollback to the same revision.
	return fmt.Errorf("refusing to uninstall holdfast: %d Unit(s) run in Failover mode (%s); without holdfast-controller "+
		"nothing renews their leases and each runtime fences (stops writing) once its lease runs out. Nothing was deleted. "+
		"Delete those Units first (kubectl delete unit -n NAMESPACE NAME: holdfast stops each runtime) and run helm uninstall again; "+
		"or uninstall anyway: helm uninstall %s -n %s --no-hooks (uninstall.force=true, set beforehand, skips this check); "+
		"or keep holdfast: helm rollback %s REVISION -n %s, with the revision helm history shows as uninstalling",
		len(units), strings.Join(names, ", "), rel.Name, rel.Namespace, rel.Name, rel.Namespace)
}
