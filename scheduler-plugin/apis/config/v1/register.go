package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schedschemev1 "k8s.io/kube-scheduler/config/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is kube-scheduler's configuration group, version v1.
var SchemeGroupVersion = schema.GroupVersion{Group: schedconfig.GroupName, Version: "v1"}

var (
	// localSchemeBuilder is kube-scheduler's own, so that its configuration
	// loader decodes, defaults and converts the holdfast plugin args.
	localSchemeBuilder = &schedschemev1.SchemeBuilder
	// AddToScheme registers the v1 args types, defaults and conversions.
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
	localSchemeBuilder.Register(addKnownTypes, RegisterDefaults, RegisterConversions)
}
