// Package pluginargs turns what the scheduler hands a holdfast plugin's New
// into its validated internal args, the same way for all three plugins.
package pluginargs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Getter returns a plugin's internal args (type I, versioned type V) from
// the object its New receives.
type Getter[I any] func(obj runtime.Object) (*I, error)

// For is the Getter of plugin name: the internal args as the scheduler's
// loader decoded and defaulted them, or, when there is no pluginConfig at
// all (a framework built by hand), V's defaults converted; either way
// validated, with errors at pluginConfig[name].args.
func For[V, I any](
	name string,
	setDefaults func(*V),
	convert func(*V, *I, conversion.Scope) error,
	validate func(*field.Path, *I) error,
) Getter[I] {
	path := field.NewPath("pluginConfig").Key(name).Child("args")
	return func(obj runtime.Object) (*I, error) {
		var args *I
		if obj == nil {
			var v V
			setDefaults(&v)
			args = new(I)
			if err := convert(&v, args, nil); err != nil {
				return nil, err
			}
		} else {
			internal, ok := any(obj).(*I)
			if !ok {
				return nil, fmt.Errorf("want args of type %T, got %T", args, obj)
			}
			args = internal
		}
		if err := validate(path, args); err != nil {
			return nil, err
		}
		return args, nil
	}
}
