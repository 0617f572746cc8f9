package role_test

import "sigs.k8s.io/controller-runtime/pkg/config"

// ctrlConfigT lets several test managers register a controller of the
// same name in one process.
type ctrlConfigT = config.Controller
