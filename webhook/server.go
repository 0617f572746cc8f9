// Package webhook is holdfast's validating admission webhook (docs/design.md §7): it
// refuses unsafe label, annotation, taint, Lease and object changes, listing
// every reason with its field path. The rules it shares with the controller
// live in policy; the ValidatingWebhookConfiguration that selects what
// reaches it is webhook/config/validating-webhook-configuration.yaml.
package webhook

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The paths the configuration's service references name.
const (
	PathNode       = "/validate-node"
	PathLease      = "/validate-lease"
	PathUnit       = "/validate-unit"
	PathVoterSwap  = "/validate-voterswap"
	PathPod        = "/validate-pod"
	PathPodBinding = "/validate-pod-binding"
)

// Paths lists every path Register serves.
var Paths = []string{PathNode, PathLease, PathUnit, PathVoterSwap, PathPod, PathPodBinding}

// NewScheme holds every kind the webhook decodes.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, holdfastv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Handlers builds the validators for each path. reader must read the
// apiserver directly (a manager's APIReader), never a cache.
func Handlers(scheme *runtime.Scheme, reader client.Reader, opts *Options) map[string]*admission.Webhook {
	audit := newAuditLog(opts)
	return map[string]*admission.Webhook{
		PathNode:       admission.WithValidator[*corev1.Node](scheme, &NodeValidator{Options: opts, Reader: reader, Audit: audit}),
		PathLease:      admission.WithValidator[*coordinationv1.Lease](scheme, &LeaseValidator{Options: opts}),
		PathUnit:       admission.WithValidator[*holdfastv1.Unit](scheme, &UnitValidator{Options: opts, Reader: reader, Audit: audit}),
		PathVoterSwap:  admission.WithValidator[*holdfastv1.VoterSwap](scheme, &VoterSwapValidator{Options: opts, Reader: reader, Audit: audit}),
		PathPod:        admission.WithValidator[*corev1.Pod](scheme, PodValidator{Options: opts, Reader: reader}),
		PathPodBinding: admission.WithValidator[*corev1.Binding](scheme, &BindingValidator{Options: opts, Reader: reader}),
	}
}

// Register serves every validator on the webhook server, each answer
// counted and timed (RegisterAdmissionMetrics).
func Register(srv crwebhook.Server, scheme *runtime.Scheme, reader client.Reader, opts *Options) {
	for path, h := range Handlers(scheme, reader, opts) {
		h.Handler = measured{resource: pathResources[path], next: h.Handler}
		srv.Register(path, h)
	}
}
