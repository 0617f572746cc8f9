// Package v1 holds the versioned (kubescheduler.config.k8s.io/v1) arguments
// of holdfast's scheduler plugins, their defaults and their conversion to
// the internal types.
//
// +kubebuilder:object:generate=true
package v1
