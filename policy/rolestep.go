package policy

import (
	"fmt"
	"strings"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// roleSteps is the role-step table (docs/design.md §5, §6): each step a
// voter swap sets on a Node (holdfast.io/role-step) with the desired role
// (holdfast.io/desired-role) it goes with, in the order a swap uses them.
// The controller sets the pair, the webhook admits only these steps, and the
// node plugin carries a step out only when the Node holds its pair.
var roleSteps = []struct{ step, role string }{
	{holdfastv1.RoleStepPromote, holdfastv1.RoleServer},
	{holdfastv1.RoleStepStepDown, holdfastv1.RoleAgent},
	{holdfastv1.RoleStepFinishDemote, holdfastv1.RoleAgent},
	{holdfastv1.RoleStepRollback, holdfastv1.RoleAgent},
}

// RoleSteps lists the role steps in the order a swap uses them.
func RoleSteps() []string {
	out := make([]string, 0, len(roleSteps))
	for _, s := range roleSteps {
		out = append(out, s.step)
	}
	return out
}

// RoleForStep is the desired role a role step goes with; false for a step
// that is not in the table.
func RoleForStep(step string) (string, bool) {
	for _, s := range roleSteps {
		if s.step == step {
			return s.role, true
		}
	}
	return "", false
}

// RoleStepRefusal says why a Node's role step cannot be carried out with
// its desired role, "" when the pair is one of the table's.
func RoleStepRefusal(step, desired string) string {
	role, ok := RoleForStep(step)
	if !ok {
		return fmt.Sprintf("unknown role step %q: metadata.annotations[%s] must be one of %s", step, holdfastv1.AnnotationRoleStep, strings.Join(RoleSteps(), ", "))
	}
	if desired != holdfastv1.RoleServer && desired != holdfastv1.RoleAgent {
		return fmt.Sprintf("unknown role %q: metadata.labels[%s] must be server or agent", desired, holdfastv1.LabelDesiredRole)
	}
	if desired != role {
		return fmt.Sprintf("step %s needs desired role %s, the Node says %s", step, role, desired)
	}
	return ""
}
