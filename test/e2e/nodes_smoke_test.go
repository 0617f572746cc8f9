//go:build integration && !e2e

package e2e

// make test's smoke cluster: a primary and one standby, both real kubelets.
var clusterNodes = []string{"edge-a", "edge-b"}
