package v1alpha1

// Environment of the runtime container (docs/design.md §2): the controller sets
// them on every runtime pod, most through the downward API from the pod's
// own labels, and the reference runtime reads them as its flag defaults, so
// the pod and the process never disagree about which binding they are.
const (
	RuntimeEnvUnitName      = "HOLDFAST_UNIT_NAME"         // metadata.labels[holdfast.io/unit]
	RuntimeEnvNamespace     = "HOLDFAST_NAMESPACE"         // metadata.namespace
	RuntimeEnvEpoch         = "HOLDFAST_EPOCH"             // metadata.labels[holdfast.io/epoch]
	RuntimeEnvPodName       = "HOLDFAST_POD_NAME"          // metadata.name
	RuntimeEnvPodUID        = "HOLDFAST_POD_UID"           // metadata.uid
	RuntimeEnvNodeName      = "HOLDFAST_NODE_NAME"         // spec.nodeName
	RuntimeEnvPodIP         = "HOLDFAST_POD_IP"            // status.podIP
	RuntimeEnvMode          = "HOLDFAST_AVAILABILITY_MODE" // spec.availability.mode
	RuntimeEnvLeaseDuration = "HOLDFAST_LEASE_DURATION"    // spec.availability.leaseDurationSeconds, as a Go duration ("30s")
	RuntimeEnvLeasePort     = "HOLDFAST_LEASE_PORT"        // spec.runtime.leasePort
	RuntimeEnvHealthPort    = "HOLDFAST_HEALTH_PORT"       // spec.runtime.healthPort
	RuntimeEnvMetricsPort   = "HOLDFAST_METRICS_PORT"      // spec.runtime.metricsPort
	// RuntimeEnvStateDir is where the pod mounts a volume that lives as long
	// as the pod (an emptyDir): the state file a restart in place restores,
	// and the start count that gives the incarnation its restart count.
	RuntimeEnvStateDir = "HOLDFAST_STATE_DIR"
	// RuntimeEnvLeaseTLSDir is where the pod mounts its lease credentials:
	// its own key and certificate, issued by the lease signer through a
	// PodCertificateRequest, and the lease CA bundle from a
	// ClusterTrustBundle (api/lease: CredentialsFile, TrustBundleFile).
	RuntimeEnvLeaseTLSDir = "HOLDFAST_LEASE_TLS_DIR"
	// RuntimeEnvInsecurePlaintextLease is "true" on the runtime pods of a
	// controller run with --insecure-plaintext-lease, and absent otherwise.
	RuntimeEnvInsecurePlaintextLease = "HOLDFAST_INSECURE_PLAINTEXT_LEASE"
	// RuntimeEnvWarmStandby is "true" on a warm standby's runtime pod
	// (docs/design.md §3, Warm standby). Its RuntimeEnvEpoch is empty until
	// the pod's promotion labels it with an epoch, so the process starts
	// bound to no epoch and takes its epoch from its first grant; a
	// container restarted after the promotion starts as that epoch's.
	RuntimeEnvWarmStandby = "HOLDFAST_WARM_STANDBY"
)
