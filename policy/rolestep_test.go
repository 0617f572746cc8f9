package policy

import (
	"strings"
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The role-step table pairs each step with the one desired role the node
// plugin carries it out under; anything else is refused with the field and
// the values it may take.
func TestTheRoleStepTable(t *testing.T) {
	if got := strings.Join(RoleSteps(), ","); got != "promote,step-down,finish-demote,rollback" {
		t.Errorf("RoleSteps() = %s, want the swap's order", got)
	}
	for _, tc := range []struct {
		step, desired, refusal string
	}{
		{holdfastv1.RoleStepPromote, holdfastv1.RoleServer, ""},
		{holdfastv1.RoleStepStepDown, holdfastv1.RoleAgent, ""},
		{holdfastv1.RoleStepFinishDemote, holdfastv1.RoleAgent, ""},
		{holdfastv1.RoleStepRollback, holdfastv1.RoleAgent, ""},
		{holdfastv1.RoleStepPromote, holdfastv1.RoleAgent, "step promote needs desired role server, the Node says agent"},
		{holdfastv1.RoleStepStepDown, holdfastv1.RoleServer, "step step-down needs desired role agent, the Node says server"},
		{holdfastv1.RoleStepRollback, "", `unknown role "": metadata.labels[holdfast.io/desired-role] must be server or agent`},
		{"demote", holdfastv1.RoleAgent, `unknown role step "demote": metadata.annotations[holdfast.io/role-step] must be one of promote, step-down, finish-demote, rollback`},
	} {
		if got := RoleStepRefusal(tc.step, tc.desired); got != tc.refusal {
			t.Errorf("RoleStepRefusal(%q, %q) = %q, want %q", tc.step, tc.desired, got, tc.refusal)
		}
	}
}
