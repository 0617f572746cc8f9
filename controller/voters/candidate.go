package voters

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// DefaultCandidateImage is what the voter-candidate pod runs if it ever
// starts: it only has to be placed, and is deleted as soon as its node is
// taken.
const DefaultCandidateImage = "registry.k8s.io/pause:3.10"

// CandidatePodName is the voter-candidate pod of a VoterSwap.
func CandidatePodName(swap string) string {
	name := "voter-candidate-" + swap
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// CandidatePod is the pod holdfast-scheduler places on the node the swap
// promotes (docs/design.md §4 VoterEligibility), owned by the VoterSwap so it goes
// with it.
func CandidatePod(s *holdfastv1.VoterSwap, namespace, image string) *corev1.Pod {
	if image == "" {
		image = DefaultCandidateImage
	}
	isController := true
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      CandidatePodName(s.Name),
			Labels:    map[string]string{holdfastv1.LabelRole: holdfastv1.RoleVoterCandidate, holdfastv1.LabelVoterSwap: s.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: holdfastv1.GroupVersion.String(), Kind: "VoterSwap",
				Name: s.Name, UID: s.UID, Controller: &isController}},
		},
		Spec: corev1.PodSpec{
			SchedulerName:                 holdfastv1.SchedulerName,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{Name: "candidate", Image: image,
				Resources: corev1.ResourceRequirements{Requests: small, Limits: small}}},
		},
	}
}

// Candidates manages voter-candidate pods.
type Candidates struct {
	Client    client.Client
	Reader    client.Reader
	Namespace string
	Image     string
}

// Get returns the swap's candidate pod, nil when there is none.
func (c *Candidates) Get(ctx context.Context, swap string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: CandidatePodName(swap)}, pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the voter-candidate pod: %w", err)
	}
	return pod, nil
}

// Create creates the swap's candidate pod.
func (c *Candidates) Create(ctx context.Context, s *holdfastv1.VoterSwap) error {
	err := c.Client.Create(ctx, CandidatePod(s, c.Namespace, c.Image))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Delete deletes the swap's candidate pod at once.
func (c *Candidates) Delete(ctx context.Context, swap string) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: CandidatePodName(swap)}}
	return client.IgnoreNotFound(c.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)))
}
