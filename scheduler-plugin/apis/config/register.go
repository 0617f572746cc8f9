package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is the internal version of kube-scheduler's group.
var SchemeGroupVersion = schema.GroupVersion{Group: schedconfig.GroupName, Version: runtime.APIVersionInternal}

var (
	// localSchemeBuilder is kube-scheduler's own, so that its configuration
	// loader knows the holdfast plugin args.
	localSchemeBuilder = &schedconfig.SchemeBuilder
	// AddToScheme registers the internal args types.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&UnitPlacementArgs{},
		&StandbyColocationArgs{},
		&VoterEligibilityArgs{},
	)
	return nil
}

func init() {
	localSchemeBuilder.Register(addKnownTypes)
}
