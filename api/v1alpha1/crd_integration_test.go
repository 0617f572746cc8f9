//go:build integration

package v1alpha1_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.Options{}) }

const unitYAML = `apiVersion: holdfast.io/v1alpha1
kind: Unit
metadata:
  name: %s
  namespace: %s
spec:
  runtime:
    image: holdfast.local/unit-runtime:dev
  nodeSelector:
    holdfast.io/device: kiln-1
  availability:
%s
`

func unitManifest(name, ns, availability string) string {
	return fmt.Sprintf(unitYAML, name, ns, availability)
}

// columns splits kubectl's table output into header and rows of cells.
func columns(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1))
	}
	return rows
}

func TestValidUnitIsAcceptedDefaultedAndPrinted(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	k := env.Kubectl()

	k.MustRun(t, unitManifest("kiln-1", ns, `    mode: Failover
    targets:
      nodes: [standby-1]`), "apply", "-f", "-")

	var u holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	a := u.Spec.Availability
	if a.LeaseDurationSeconds != 30 || a.RuntimeStartupGraceSeconds != 120 || a.Colocation != holdfastv1.ColocationWarn ||
		a.RebindMarginSeconds != nil || u.Spec.Runtime.HealthPort != 9440 || u.Spec.Runtime.LeasePort != 9443 ||
		u.Spec.Runtime.MetricsPort != 9441 || u.Spec.Runtime.ImagePullPolicy != "IfNotPresent" {
		t.Fatalf("defaults not applied as docs/design.md §2 says: %+v runtime %+v", a, u.Spec.Runtime)
	}
	if got := a.RebindMargin(); got != 20*time.Second {
		t.Errorf("default margin for a 30s lease = %v, want hold bound 15s + 5s", got)
	}

	// A unit with no availability at all is an Autonomy unit.
	k.MustRun(t, fmt.Sprintf(`apiVersion: holdfast.io/v1alpha1
kind: Unit
metadata: {name: press-2, namespace: %s}
spec:
  runtime: {image: holdfast.local/unit-runtime:dev}
  nodeSelector: {holdfast.io/device: press-2}
`, ns), "apply", "-f", "-")
	var autonomy holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "press-2"}, &autonomy); err != nil {
		t.Fatal(err)
	}
	if autonomy.Spec.Availability.Mode != holdfastv1.Autonomy || autonomy.Spec.Availability.LeaseDurationSeconds != 30 {
		t.Fatalf("a unit without availability must default to Autonomy with a 30s lease: %+v", autonomy.Spec.Availability)
	}

	// The status subresource carries the binding the printer columns show.
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{
		Node: "edge-1", Epoch: 7, Pod: "kiln-1-runtime-e7", LeaseState: holdfastv1.LeaseHeld, LeaseStateEpoch: 7,
	}
	meta.SetStatusCondition(&u.Status.Conditions, metav1.Condition{
		Type: holdfastv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: holdfastv1.ReasonRenewalAcknowledged,
		Message: "Renewal acknowledged at epoch 7",
	})
	if err := env.Client.Status().Update(ctx, &u); err != nil {
		t.Fatalf("updating the status subresource: %v", err)
	}

	out := k.MustRun(t, "", "get", "units", "-n", ns, "kiln-1").Stdout
	rows := columns(out)
	wantHeader := []string{"NAME", "MODE", "NODE", "EPOCH", "LEASE", "HELD", "AGE"}
	if !equality.Semantic.DeepEqual(rows[0], wantHeader) {
		t.Fatalf("kubectl get units header = %q, want %q", rows[0], wantHeader)
	}
	if got := rows[1][:6]; !equality.Semantic.DeepEqual(got, []string{"kiln-1", "Failover", "edge-1", "7", "Held", "True"}) {
		t.Fatalf("kubectl get units row = %q\n%s", rows[1], out)
	}

	// A spec update does not touch the status, and the status endpoint does
	// not take spec changes.
	u.Spec.Runtime.Image = "holdfast.local/unit-runtime:v2"
	u.Status.RuntimeBinding.Epoch = 99
	if err := env.Client.Update(ctx, &u); err != nil {
		t.Fatal(err)
	}
	var back holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&u), &back); err != nil {
		t.Fatal(err)
	}
	if back.Status.RuntimeBinding.Epoch != 7 || back.Spec.Runtime.Image != "holdfast.local/unit-runtime:v2" {
		t.Fatalf("status must change only through the status subresource: epoch %d image %s",
			back.Status.RuntimeBinding.Epoch, back.Spec.Runtime.Image)
	}
}

func TestValidVoterSwapAndVoterPolicyAreAcceptedAndPrinted(t *testing.T) {
	ctx := context.Background()
	k := env.Kubectl()

	k.MustRun(t, `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec:
  etcd:
    endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
`, "apply", "-f", "-")
	t.Cleanup(func() { k.Run(t, "", "delete", "voterpolicy", "default", "--ignore-not-found") })
	var p holdfastv1.VoterPolicy
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "default"}, &p); err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if s.TargetVoters != 3 || s.DryRun == nil || !*s.DryRun || s.CooldownSeconds == nil || *s.CooldownSeconds != 3600 || s.OperationTimeoutSeconds != 600 ||
		s.WorkloadDrainWaitSeconds == nil || *s.WorkloadDrainWaitSeconds != 900 ||
		s.LearnerStallSeconds != 300 || s.Host.ServerUnit != "k3s.service" || s.Fitness.WindowSeconds != 600 ||
		s.EligibleSelector == nil || s.EligibleSelector.MatchLabels[holdfastv1.LabelVoterEligible] != "true" {
		t.Fatalf("VoterPolicy defaults not applied (dry run on, three voters, eligible by label): %+v", s)
	}
	if s.Host.Actuator != holdfastv1.ActuatorSystemd || s.Host.StaticPod != nil {
		t.Fatalf("VoterPolicy spec.host.actuator defaults to Systemd with no staticPod settings: %+v", s.Host)
	}
	if s.Host.MemberDataDir != "" || s.Host.MemberDataDirOrDefault() != "/var/lib/rancher/k3s/server/db" {
		t.Fatalf("VoterPolicy spec.host.memberDataDir: stored %q (want none: its default follows the actuator), default %q (want k3s's)",
			s.Host.MemberDataDir, s.Host.MemberDataDirOrDefault())
	}
	// With StaticPod the default member data directory is kubeadm's.
	k.MustRun(t, `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec:
  etcd:
    endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
  host: {actuator: StaticPod, staticPod: {etcdImage: registry.k8s.io/etcd:3.6.5-0}}
`, "apply", "-f", "-")
	var sp holdfastv1.VoterPolicy
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "default"}, &sp); err != nil {
		t.Fatal(err)
	}
	if h := sp.Spec.Host; h.MemberDataDir != "" || h.MemberDataDirOrDefault() != "/var/lib/etcd" {
		t.Fatalf("a StaticPod VoterPolicy's memberDataDir: stored %q, default %q; want none stored and kubeadm's /var/lib/etcd", h.MemberDataDir, h.MemberDataDirOrDefault())
	}
	rows := columns(k.MustRun(t, "", "get", "voterpolicies").Stdout)
	if want := []string{"NAME", "TARGET", "VOTERS", "LEADER", "DRYRUN", "AGE"}; !equality.Semantic.DeepEqual(rows[0], want) {
		t.Fatalf("kubectl get voterpolicies header = %q, want %q", rows[0], want)
	}

	k.MustRun(t, `apiVersion: holdfast.io/v1alpha1
kind: VoterSwap
metadata: {name: swap-cp3-edge7}
spec:
  outgoing: cp-3
  incoming: edge-7
  reason: fsync p99 above 10ms for 10 minutes
`, "create", "-f", "-")
	t.Cleanup(func() { k.Run(t, "", "delete", "voterswap", "swap-cp3-edge7", "--ignore-not-found") })
	var sw holdfastv1.VoterSwap
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "swap-cp3-edge7"}, &sw); err != nil {
		t.Fatal(err)
	}
	if sw.Spec.Origin != holdfastv1.SwapManual {
		t.Fatalf("a VoterSwap a person creates defaults to origin Manual, got %q", sw.Spec.Origin)
	}
	sw.Status = holdfastv1.VoterSwapStatus{
		SwapID: "20261129T201500Z-cp-3-edge-7", Incoming: "edge-7",
		Step: holdfastv1.StepPromote, Phase: holdfastv1.SwapRunning,
	}
	if err := env.Client.Status().Update(ctx, &sw); err != nil {
		t.Fatal(err)
	}
	out := k.MustRun(t, "", "get", "voterswaps").Stdout
	rows = columns(out)
	if want := []string{"NAME", "OUT", "IN", "STEP", "PHASE", "AGE"}; !equality.Semantic.DeepEqual(rows[0], want) {
		t.Fatalf("kubectl get voterswaps header = %q, want %q", rows[0], want)
	}
	if got := rows[1][:5]; !equality.Semantic.DeepEqual(got, []string{"swap-cp3-edge7", "cp-3", "edge-7", "Promote", "Running"}) {
		t.Fatalf("kubectl get voterswaps row = %q\n%s", rows[1], out)
	}

	// Status may change while the spec may not.
	sw.Status.Step = holdfastv1.StepRegate
	if err := env.Client.Status().Update(ctx, &sw); err != nil {
		t.Fatalf("a status update of a VoterSwap must be allowed: %v", err)
	}
}

func TestInvalidObjectsAreRefusedWithTheRulesMessage(t *testing.T) {
	ns := env.Namespace(t)
	k := env.Kubectl()
	for _, tc := range []struct {
		name     string
		manifest string
		wantErr  []string
	}{{
		name:     "lease 0",
		manifest: unitManifest("lease-zero", ns, "    leaseDurationSeconds: 0"),
		wantErr:  []string{"spec.availability.leaseDurationSeconds", "must be between 10 and 600 seconds"},
	}, {
		name:     "lease 10000",
		manifest: unitManifest("lease-huge", ns, "    leaseDurationSeconds: 10000"),
		wantErr:  []string{"spec.availability.leaseDurationSeconds", "must be between 10 and 600 seconds"},
	}, {
		name:     "grace below the lease",
		manifest: unitManifest("grace-low", ns, "    leaseDurationSeconds: 60\n    runtimeStartupGraceSeconds: 30"),
		wantErr:  []string{"spec.availability.runtimeStartupGraceSeconds", "must be at least leaseDurationSeconds"},
	}, {
		name:     "unknown mode",
		manifest: unitManifest("mode-bad", ns, "    mode: Hot"),
		wantErr:  []string{"spec.availability.mode", `Unsupported value: "Hot"`, `"Autonomy", "Failover"`},
	}, {
		name:     "margin below the hold bound",
		manifest: unitManifest("margin-low", ns, "    leaseDurationSeconds: 30\n    rebindMarginSeconds: 14"),
		wantErr:  []string{"spec.availability.rebindMarginSeconds", "must be at least the hold bound"},
	}, {
		name:     "failover with no targets",
		manifest: unitManifest("no-targets", ns, "    mode: Failover"),
		wantErr:  []string{"spec.availability.targets", "must name at least one node or a selector when mode is Failover"},
	}, {
		name:     "warm standby without failover",
		manifest: unitManifest("warm-autonomy", ns, "    mode: Autonomy\n    warmStandby: true"),
		wantErr:  []string{"spec.availability.warmStandby", "needs mode Failover"},
	}, {
		name: "metrics port on the lease port",
		manifest: fmt.Sprintf(`apiVersion: holdfast.io/v1alpha1
kind: Unit
metadata: {name: ports-clash, namespace: %s}
spec:
  runtime: {image: holdfast.local/unit-runtime:dev, metricsPort: 9443}
  nodeSelector: {holdfast.io/device: kiln-1}
`, ns),
		wantErr: []string{"spec.runtime.metricsPort", "metricsPort must differ from healthPort and leasePort"},
	}, {
		name: "voter policy not named default",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: fleet}
spec: {etcd: {endpoints: ["https://10.0.0.1:2379"]}}
`,
		wantErr: []string{"VoterPolicy is a singleton: its name must be default"},
	}, {
		name: "even voter target",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec: {targetVoters: 4, etcd: {endpoints: ["https://10.0.0.1:2379"]}}
`,
		wantErr: []string{"spec.targetVoters", "must be odd and between 1 and 9"},
	}, {
		name: "static pod actuator without its settings",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec: {etcd: {endpoints: ["https://10.0.0.1:2379"]}, host: {actuator: StaticPod, memberDataDir: /var/lib/etcd}}
`,
		wantErr: []string{"spec.host.staticPod", "staticPod is required when actuator is StaticPod"},
	}, {
		name: "static pod settings under the systemd actuator",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec: {etcd: {endpoints: ["https://10.0.0.1:2379"]}, host: {staticPod: {etcdImage: "registry.k8s.io/etcd:3.6.5-0"}}}
`,
		wantErr: []string{"spec.host.staticPod", "staticPod is set only when actuator is StaticPod"},
	}, {
		name: "unknown actuator",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec: {etcd: {endpoints: ["https://10.0.0.1:2379"]}, host: {actuator: Docker}}
`,
		wantErr: []string{"spec.host.actuator", `Unsupported value: "Docker"`},
	}, {
		name: "static pod without its etcd image",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterPolicy
metadata: {name: default}
spec: {etcd: {endpoints: ["https://10.0.0.1:2379"]}, host: {actuator: StaticPod, staticPod: {manifestsDir: /etc/kubernetes/manifests}}}
`,
		wantErr: []string{"spec.host.staticPod.etcdImage", "Required value"},
	}, {
		name: "swap in and out the same node",
		manifest: `apiVersion: holdfast.io/v1alpha1
kind: VoterSwap
metadata: {name: same-node}
spec: {outgoing: cp-1, incoming: cp-1}
`,
		wantErr: []string{"spec.incoming", "must differ from outgoing"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res := k.Run(t, tc.manifest, "create", "-f", "-")
			if res.ExitCode == 0 {
				t.Fatalf("an invalid object was accepted:\n%s", res)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(res.Stderr, want) {
					t.Errorf("kubectl's error does not say %q:\n%s", want, res.Stderr)
				}
			}
			// Nothing was created.
			if got := k.Run(t, tc.manifest, "get", "-f", "-", "-o", "name"); got.ExitCode == 0 {
				t.Errorf("the refused object exists:\n%s", got)
			}
		})
	}
}

// A warm standby is promoted only by an automatic re-bind: the CRD takes
// warmStandby on a Failover unit and refuses it, naming the field, on an
// Autonomy one (including one that says nothing of its mode).
func TestWarmStandbyNeedsModeFailover(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	create := func(a holdfastv1.Availability) error {
		u := &holdfastv1.Unit{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "warm-", Namespace: ns},
			Spec: holdfastv1.UnitSpec{
				Runtime:      holdfastv1.UnitRuntime{Image: "x"},
				NodeSelector: map[string]string{"holdfast.io/device": "d"},
				Availability: a,
			},
		}
		return env.Client.Create(ctx, u, client.DryRunAll)
	}
	targets := &holdfastv1.FailoverTargets{Nodes: []string{"edge-2"}}
	if err := create(holdfastv1.Availability{Mode: holdfastv1.Failover, Targets: targets, WarmStandby: true}); err != nil {
		t.Fatalf("a Failover unit with a warm standby was refused: %v", err)
	}
	for _, mode := range []holdfastv1.AvailabilityMode{holdfastv1.Autonomy, ""} {
		err := create(holdfastv1.Availability{Mode: mode, Targets: targets, WarmStandby: true})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.availability.warmStandby") || !strings.Contains(err.Error(), "needs mode Failover") {
			t.Errorf("mode %q with a warm standby: %v, want Invalid naming spec.availability.warmStandby", mode, err)
		}
	}
	if err := create(holdfastv1.Availability{Mode: holdfastv1.Autonomy, WarmStandby: false}); err != nil {
		t.Errorf("an Autonomy unit without a warm standby was refused: %v", err)
	}
}

func TestVoterSwapSpecIsImmutable(t *testing.T) {
	k := env.Kubectl()
	k.MustRun(t, `apiVersion: holdfast.io/v1alpha1
kind: VoterSwap
metadata: {name: swap-immutable}
spec: {outgoing: cp-1, incoming: edge-1}
`, "create", "-f", "-")
	t.Cleanup(func() { k.Run(t, "", "delete", "voterswap", "swap-immutable", "--ignore-not-found") })

	res := k.Run(t, "", "patch", "voterswap", "swap-immutable", "--type=merge", "-p", `{"spec":{"incoming":"edge-2"}}`)
	if res.ExitCode == 0 {
		t.Fatalf("editing a VoterSwap's spec was accepted:\n%s", res)
	}
	if !strings.Contains(res.Stderr, "spec is immutable: delete this VoterSwap and create a new one") {
		t.Fatalf("kubectl's error does not carry the rule's message:\n%s", res.Stderr)
	}
	var sw holdfastv1.VoterSwap
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "swap-immutable"}, &sw); err != nil {
		t.Fatal(err)
	}
	if sw.Spec.Incoming != "edge-1" {
		t.Fatalf("the refused edit changed the spec: incoming %q", sw.Spec.Incoming)
	}
	// Labels and annotations stay editable: only the spec is frozen.
	k.MustRun(t, "", "annotate", "voterswap", "swap-immutable", "note=reviewed")
}

// The CRD's CEL rules restate two Go rules of api/; these hold each pair
// together at every boundary.
func TestCRDRulesAgreeWithTheGoRules(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	create := func(a holdfastv1.Availability) error {
		u := &holdfastv1.Unit{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "rule-", Namespace: ns},
			Spec: holdfastv1.UnitSpec{
				Runtime:      holdfastv1.UnitRuntime{Image: "x"},
				NodeSelector: map[string]string{"holdfast.io/device": "d"},
				Availability: a,
			},
		}
		return env.Client.Create(ctx, u, client.DryRunAll)
	}

	minS, maxS := int32(holdfastv1.MinLeaseDuration/time.Second), int32(holdfastv1.MaxLeaseDuration/time.Second)
	for lease, ok := range map[int32]bool{minS - 1: false, minS: true, maxS: true, maxS + 1: false} {
		err := create(holdfastv1.Availability{LeaseDurationSeconds: lease, RuntimeStartupGraceSeconds: 3600})
		if (err == nil) != ok {
			t.Errorf("lease %ds: accepted=%v, want %v (%v)", lease, err == nil, ok, err)
		}
	}

	// margin >= HoldBound(lease), with HoldBound's clamp, for leases on both
	// sides of the clamp's corners and odd ones where half is not whole.
	for _, lease := range []int32{10, 11, 19, 30, 31, 59, 60, 61, 600} {
		bound := holdfastv1.HoldBound(time.Duration(lease) * time.Second)
		for margin := int32(1); margin <= 40; margin++ {
			want := time.Duration(margin)*time.Second >= bound
			err := create(holdfastv1.Availability{
				LeaseDurationSeconds: lease, RuntimeStartupGraceSeconds: 600, RebindMarginSeconds: ptr.To(margin),
			})
			if err != nil && !apierrors.IsInvalid(err) {
				t.Fatal(err)
			}
			if (err == nil) != want {
				t.Errorf("lease %ds margin %ds: CRD accepted=%v, Go hold bound %v says %v", lease, margin, err == nil, bound, want)
			}
		}
	}
}
