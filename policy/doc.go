// Package policy holds the safety rules that more than one holdfast component
// applies: the admission webhook refuses a change that breaks them, and the
// controller checks the same functions before it acts. Every function here is
// pure (objects and a clock in, a verdict out), so both sides agree by
// construction and the rules are tested without a cluster.
//
//   - swap Lease: SwapLeaseHeld, SwapLeaseExpiry, SwapLeaseNodes, SwapLeaseNames
//     (node recovery leaves alone the nodes an unexpired swap Lease names).
//   - voter swap gates: SwapGates, TombstoneOfCluster, Members, NodeReady,
//     NodeProvisioned, NodeEligible, NodePinned (docs/design.md §6 step 1, as VoterPolicy status and the Nodes
//     show them).
//   - role steps: RoleSteps, RoleForStep, RoleStepRefusal (the role-step
//     table: the controller sets a step with its desired role, the webhook
//     admits only these steps, the node plugin carries out only a matching
//     pair).
//   - units: AvailabilityErrors (docs/design.md §3 L3/L4 through api/v1alpha1's
//     HoldBound and RebindMargin), RebindPending, TargetsIncludingPrimary,
//     EligibleTarget.
package policy
