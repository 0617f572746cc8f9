package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
)

var swapGVR = holdfastv1.GroupVersion.WithResource("voterswaps").GroupResource()
var swapGK = holdfastv1.GroupVersion.WithKind("VoterSwap").GroupKind()

// swapRunning reports whether a swap has started and not finished: it holds
// (or is about to hold) the swap Lease and must be finished or rolled back.
func swapRunning(s *holdfastv1.VoterSwap) bool {
	return s.Status.Phase == holdfastv1.SwapRunning || (!s.Status.Phase.Finished() && s.Status.StartedAt != nil)
}

// checkVoterSwapCreate applies the VoterSwap creation rules: who may ask,
// one swap at a time, and every gate of docs/design.md §6 step 1.
func checkVoterSwapCreate(o *Options, r requester, s *holdfastv1.VoterSwap, others []holdfastv1.VoterSwap, gates policy.GateInput) (verdict, []audit.Record) {
	var v verdict
	specPath := field.NewPath("spec")
	// The voters role alone creates Automatic swaps and asks for one
	// without being in a swap group.
	isVoters := r.User == o.VotersUser()
	for _, f := range []struct {
		path  *field.Path
		value string
	}{{specPath.Child("outgoing"), s.Spec.Outgoing}, {specPath.Child("incoming"), s.Spec.Incoming}} {
		if f.value == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(f.value); len(msgs) > 0 {
			v.invalidf(field.Invalid(f.path, f.value, "not a node name: "+msgs[0]))
		}
	}
	if s.Spec.Outgoing == "" {
		v.invalidf(field.Required(specPath.Child("outgoing"), "name the voter to demote"))
	}
	origin := s.Spec.Origin
	if origin == "" {
		origin = holdfastv1.SwapManual
	}
	switch {
	case origin == holdfastv1.SwapAutomatic && !isVoters:
		v.forbid(field.Forbidden(specPath.Child("origin"), fmt.Sprintf(
			"only the holdfast voter controller (%s) creates Automatic swaps; a person's swap is Manual", o.VotersUser())))
	case origin == holdfastv1.SwapManual && !isVoters && !inAnyGroup(r.Groups, o.SwapGroups):
		v.forbid(field.Forbidden(specPath, groupsNeeded("request a manual swap", r, o.SwapGroups)))
	}
	for i := range others {
		x := &others[i]
		if x.Name == s.Name || x.Status.Phase.Finished() {
			continue
		}
		phase, step := x.Status.Phase, x.Status.Step
		if phase == "" {
			phase = holdfastv1.SwapPending
		}
		where := ""
		if step != "" {
			where = fmt.Sprintf(" at step %s", step)
		}
		v.forbid(field.Forbidden(specPath, fmt.Sprintf(
			"VoterSwap %s (%s out, %s in) is %s%s; one swap at a time: wait for it to finish", x.Name, x.Spec.Outgoing,
			orScheduler(x.Spec.Incoming), phase, where)))
	}
	if len(v.invalid) == 0 {
		v.forbidAll(policy.SwapGates(&s.Spec, gates))
	}
	if !v.allowed() || origin != holdfastv1.SwapManual {
		return v, nil
	}
	return v, []audit.Record{{Reason: AuditManualSwap, Object: &audit.Object{Kind: "VoterSwap", Name: s.Name},
		Node: s.Spec.Incoming, Message: s.Spec.Reason}}
}

func orScheduler(n string) string {
	if n == "" {
		return "the scheduler's pick"
	}
	return n
}

func checkVoterSwapUpdate(old, s *holdfastv1.VoterSwap) verdict {
	var v verdict
	if !equality.Semantic.DeepEqual(old.Spec, s.Spec) {
		v.forbid(field.Forbidden(field.NewPath("spec"), "is immutable: delete this VoterSwap and create a new one"))
	}
	return v
}

func checkVoterSwapDelete(s *holdfastv1.VoterSwap) verdict {
	var v verdict
	if swapRunning(s) {
		v.forbid(field.Forbidden(field.NewPath("status", "phase"), fmt.Sprintf(
			"swap %s is running (step %s); a swap in progress is always finished or rolled back, delete it afterwards",
			s.Status.SwapID, s.Status.Step)))
	}
	return v
}

// VoterSwapValidator guards VoterSwaps: who may ask, one at a time, the
// gates, immutability and deletion while running.
type VoterSwapValidator struct {
	Options *Options
	Reader  client.Reader
	Audit   *auditLog
}

var _ admission.Validator[*holdfastv1.VoterSwap] = &VoterSwapValidator{}

func (sv *VoterSwapValidator) ValidateCreate(ctx context.Context, s *holdfastv1.VoterSwap) (admission.Warnings, error) {
	r, err := requesterFrom(ctx)
	if err != nil {
		return nil, err
	}
	var swaps holdfastv1.VoterSwapList
	if err := sv.Reader.List(ctx, &swaps); err != nil {
		return nil, readFailed("listing VoterSwaps", err)
	}
	gates := policy.GateInput{Nodes: map[string]*corev1.Node{}, Now: sv.Options.Now()}
	if gates.Policy, err = getVoterPolicy(ctx, sv.Reader); err != nil {
		return nil, readFailed("reading the VoterPolicy", err)
	}
	var nodes corev1.NodeList
	if err := sv.Reader.List(ctx, &nodes); err != nil {
		return nil, readFailed("listing Nodes", err)
	}
	for i := range nodes.Items {
		gates.Nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	if gates.SwapLease, err = getSwapLease(ctx, sv.Reader); err != nil {
		return nil, readFailed("reading the swap Lease", err)
	}
	v, audits := checkVoterSwapCreate(sv.Options, r, s, swaps.Items, gates)
	if err := v.err(swapGVR, swapGK, s.Name); err != nil {
		return nil, err
	}
	return nil, sv.Audit.record(r, audits)
}

func (sv *VoterSwapValidator) ValidateUpdate(_ context.Context, old, s *holdfastv1.VoterSwap) (admission.Warnings, error) {
	v := checkVoterSwapUpdate(old, s)
	return nil, v.err(swapGVR, swapGK, s.Name)
}

func (sv *VoterSwapValidator) ValidateDelete(_ context.Context, s *holdfastv1.VoterSwap) (admission.Warnings, error) {
	v := checkVoterSwapDelete(s)
	return nil, v.err(swapGVR, swapGK, s.Name)
}
