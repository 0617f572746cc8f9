// Package sim is a deterministic, seeded simulation of holdfast's control
// lease that searches for two writers (docs/safety.md). It runs the real
// code, not a model of it: the runtime (runtime.Runtime with its lease
// Keeper, scan and guarded write path, served through its own lease
// Handler), the grantor's loops and book (controller/grantor, stepped), the
// unit controller (controller/units' Reconciler and WarmStart, Decide
// inside), the leadership stand-down and hold-off (controller/leadership's
// Run and Tenure), the node plugin's fence agent (node-plugin/fence) and the
// webhook's admission of every Unit write (webhook.Handlers).
//
// Around them it simulates what cannot run deterministically: one clock per
// machine, each at its own bounded rate error; a network of delays, loss,
// duplication, reordering and one-way cuts, with the control network and
// the field network apart; pauses of processes and of whole machines;
// crashes, power cuts, leader kills and hand-overs, a lost apiserver; and a
// plant operator who edits every availability field, asks for failovers
// (with and without a confirmed fence), restarts, deletes and re-creates
// units. The apiserver, the kubelet, the scheduler, kube-controller-
// manager's node lifecycle and garbage collector, and client-go's leader
// election are simulated at their contracts (apiserver.go, kubelet.go,
// election.go).
//
// Everything is stepped from one event loop in true time (scheduler.go):
// no wall-clock sleep, no goroutine scheduling leaks into the outcome. The
// two pieces of real code that block on goroutines (a reconcile pass's
// apiserver calls, leadership.Run's stand-down timer) run in lock-step: the
// event loop waits until the goroutine parks on something only the loop can
// release. One seed gives one run, exactly.
//
// Two properties are checked at every instant of true time (properties.go):
// never two runtimes of one unit that may write (Held, Holding or
// Autonomous) with their field path open; no write reaching a device from an
// epoch below one that already wrote there. A violation is shrunk to a
// minimal schedule (shrink.go) and printed as a timeline of true time and
// each machine's clock (timeline.go).
package sim
