#!/usr/bin/env bash
# Sourced by the scripts that build Kubernetes commands from this module's
# graph. k8s_ldflags VERSION prints the ldflags that stamp the version the way
# Kubernetes' own release build does, or the binaries report v0.0.0-master
# (nodes then show that version and version-skew checks misfire).
k8s_ldflags() {
	local version=$1 major minor pkg flags="-s -w"
	major=${version#v}
	major=${major%%.*}
	minor=${version#v*.}
	minor=${minor%%.*}
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X ${pkg}.gitVersion=${version}"
		flags+=" -X ${pkg}.gitMajor=${major}"
		flags+=" -X ${pkg}.gitMinor=${minor}"
		flags+=" -X ${pkg}.gitTreeState=clean"
	done
	echo "${flags}"
}
