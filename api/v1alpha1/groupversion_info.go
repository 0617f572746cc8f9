// Package v1alpha1 holds holdfast's API: the Unit, VoterSwap and VoterPolicy
// kinds and every label, annotation, condition and reason name that two
// components share. Change a name here and in every user at once.
//
// +kubebuilder:object:generate=true
// +groupName=holdfast.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every holdfast kind.
	GroupVersion = schema.GroupVersion{Group: "holdfast.io", Version: "v1alpha1"}

	// SchemeBuilder registers the holdfast kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the holdfast kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
