package webhook

import (
	"context"
	"fmt"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// requester is who asks, and how: the parts of an admission request the
// rules read.
type requester struct {
	User        string
	Groups      []string
	Extra       map[string][]string
	UID         string
	SubResource string
	DryRun      bool
}

func requesterFrom(ctx context.Context) (requester, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return requester{}, err
	}
	return requesterOf(req.AdmissionRequest), nil
}

func requesterOf(req admissionv1.AdmissionRequest) requester {
	r := requester{
		User:        req.UserInfo.Username,
		Groups:      req.UserInfo.Groups,
		UID:         string(req.UID),
		SubResource: req.SubResource,
		DryRun:      req.DryRun != nil && *req.DryRun,
	}
	if len(req.UserInfo.Extra) > 0 {
		r.Extra = make(map[string][]string, len(req.UserInfo.Extra))
		for k, v := range req.UserInfo.Extra {
			r.Extra[k] = v
		}
	}
	return r
}

// nodeName is the node a pod-bound service account token was issued on.
func (r requester) nodeName() string {
	if v := r.Extra[serviceaccount.NodeNameKey]; len(v) == 1 {
		return v[0]
	}
	return ""
}

func (r requester) describe() string {
	return fmt.Sprintf("%s (groups %s)", r.User, strings.Join(r.Groups, ", "))
}

// verdict is a rule check's outcome: malformed input (422) and policy
// refusals (403). Every reason is kept so the person sees them all at once.
type verdict struct {
	invalid   field.ErrorList
	forbidden field.ErrorList
}

func (v *verdict) invalidf(err *field.Error)   { v.invalid = append(v.invalid, err) }
func (v *verdict) forbid(err *field.Error)     { v.forbidden = append(v.forbidden, err) }
func (v *verdict) forbidAll(l field.ErrorList) { v.forbidden = append(v.forbidden, l...) }
func (v verdict) allowed() bool                { return len(v.invalid) == 0 && len(v.forbidden) == 0 }

// err is the API error the apiserver hands the client: 422 Invalid when
// anything is malformed (listing the policy reasons too), else 403 Forbidden.
func (v *verdict) err(gr schema.GroupResource, gk schema.GroupKind, name string) error {
	switch {
	case len(v.invalid) > 0:
		return apierrors.NewInvalid(gk, name, append(append(field.ErrorList{}, v.invalid...), v.forbidden...))
	case len(v.forbidden) > 0:
		return apierrors.NewForbidden(gr, name, v.forbidden.ToAggregate())
	}
	return nil
}

// changedKeys are the keys in either map whose presence or value differs,
// sorted, among those keep selects.
func changedKeys(oldM, newM map[string]string, keep func(string) bool) []string {
	var out []string
	for k, nv := range newM {
		if ov, ok := oldM[k]; keep(k) && (!ok || ov != nv) {
			out = append(out, k)
		}
	}
	for k := range oldM {
		if _, ok := newM[k]; keep(k) && !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// readFailed refuses a request the webhook could not judge: failing closed,
// with the reason, so the person can retry.
func readFailed(what string, err error) error {
	return apierrors.NewInternalError(fmt.Errorf("holdfast webhook: %s: %w; retry", what, err))
}
