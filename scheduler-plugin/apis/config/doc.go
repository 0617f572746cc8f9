// Package config holds the internal types of the arguments of holdfast's
// scheduler plugins, registered into kube-scheduler's configuration group
// (kubescheduler.config.k8s.io) so that a KubeSchedulerConfiguration file
// carries them under pluginConfig. The versioned types are in v1, the checks
// in validation.
//
// +kubebuilder:object:generate=true
package config
