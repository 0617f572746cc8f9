// Package scheme makes kube-scheduler's configuration scheme know the
// holdfast plugin args, so that a KubeSchedulerConfiguration file with
// pluginConfig for UnitPlacement, StandbyColocation and VoterEligibility
// decodes strictly, defaults and converts. Import it for its side effect in
// any binary or test that loads a scheduler configuration.
package scheme

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	configv1 "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/v1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/validation"
)

var (
	// Scheme is kube-scheduler's own configuration scheme.
	Scheme = kubeschedulerscheme.Scheme
	// Codecs decodes strictly: an unknown field is an error.
	Codecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict)
)

func init() {
	AddToScheme(Scheme)
}

// AddToScheme registers the holdfast args, internal and v1, with scheme.
func AddToScheme(scheme *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(scheme))
	utilruntime.Must(configv1.AddToScheme(scheme))
}

// LoadConfigFile reads a KubeSchedulerConfiguration file as kube-scheduler
// does (strict decoding, defaults, conversion to the internal types) and
// validates it, holdfast's plugin args included.
func LoadConfigFile(path string) (*schedconfig.KubeSchedulerConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := LoadConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// LoadConfig decodes and validates a KubeSchedulerConfiguration.
func LoadConfig(data []byte) (*schedconfig.KubeSchedulerConfiguration, error) {
	obj, gvk, err := Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("want a KubeSchedulerConfiguration, got %s", gvk)
	}
	cfg.TypeMeta.APIVersion = gvk.GroupVersion().String()
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Validate runs kube-scheduler's own checks and holdfast's args checks, with
// the full field path of every args.
func Validate(cfg *schedconfig.KubeSchedulerConfiguration) error {
	var errs []error
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		errs = append(errs, err)
	}
	for i, prof := range cfg.Profiles {
		for j, pc := range prof.PluginConfig {
			path := field.NewPath("profiles").Index(i).Child("pluginConfig").Index(j).Child("args")
			var err error
			switch args := pc.Args.(type) {
			case *config.UnitPlacementArgs:
				err = validation.ValidateUnitPlacementArgs(path, args)
			case *config.StandbyColocationArgs:
				err = validation.ValidateStandbyColocationArgs(path, args)
			case *config.VoterEligibilityArgs:
				err = validation.ValidateVoterEligibilityArgs(path, args)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return utilerrors.Flatten(utilerrors.NewAggregate(errs))
}
