//go:build e2e

package e2e

import (
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// The matrix's cluster: a primary and two standbys, all real kubelets.
var clusterNodes = scenario.DefaultNodes

// clusterDevice is the matrix's device mode unless scenario.DeviceEnv says
// otherwise (make test-e2e runs it in both).
const clusterDevice = devicesim.OwnerEpoch
