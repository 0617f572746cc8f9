// Package voters is the voter swap controller (docs/design.md §6): it replaces one
// etcd voter with another, one swap at a time, under the swap Lease
// kube-system/holdfast-voter-swap, through the etcd client and the node
// plugin's role actuator (which it drives through Node labels and
// annotations).
//
// The package is split so that every decision is a pure function:
//
//   - observe.go: what a pass sees (Observation) and etcd's own view of its
//     members (EtcdView), and Assess, which maps members to Nodes and judges
//     their health.
//   - next.go: Next, the next-action function. Fed the VoterSwaps, the
//     VoterPolicy, the Nodes, the etcd member list and the Lease, it returns
//     at most one Action, with the status the swap records once it is done.
//     Each pass takes at most one action, so a controller killed at any
//     instant resumes from the VoterSwap status, the Node annotations and
//     etcd itself.
//   - policy.go: the VoterPolicy status (voters by etcd's vote, learners,
//     leader, cluster ID, evenSince, conditions) the webhook's gates read.
//   - fitness.go: when a voter is unfit, over the policy's window.
//   - etcd.go, snapshot.go: the etcd client v3 operations (health per
//     endpoint, learner add and promote, leader move, removal) and the
//     verified snapshot.
//   - lease.go: acquire, renew (keeping acquireTime and annotations,
//     failing if the holder changed) and release of the swap Lease.
//   - nodes.go, candidate.go: the Node writes (cordon with the swap's taint,
//     role steps, role labels), drains, and the voter-candidate pod the
//     scheduler places when a swap names no incoming node.
//   - reconciler.go: the pass: observe, record the policy status, ask Next,
//     carry out the action, record it (status, Event, audit line, metrics).
//
// The rules a swap shares with admission (SwapGates, NodeReady, the swap
// Lease's expiry) are imported from policy, so the webhook and the
// controller judge alike.
package voters
