package webhook

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
)

func TestVerdictStatusCodes(t *testing.T) {
	var v verdict
	if err := v.err(nodeGVR, nodeGK, "n1"); err != nil {
		t.Fatalf("an empty verdict allows: %v", err)
	}
	v.forbid(field.Forbidden(field.NewPath("a"), "no"))
	if code := v.err(nodeGVR, nodeGK, "n1").(interface{ Status() metav1.Status }).Status().Code; code != 403 {
		t.Fatalf("a policy refusal is %d, want 403", code)
	}
	v.invalidf(field.Invalid(field.NewPath("b"), "x", "bad"))
	st := v.err(nodeGVR, nodeGK, "n1").(interface{ Status() metav1.Status }).Status()
	if st.Code != 422 || len(st.Details.Causes) != 2 {
		t.Fatalf("malformed input is %d with %d causes, want 422 listing both reasons", st.Code, len(st.Details.Causes))
	}
}

func TestOptionsFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--controller-service-account=plant/hf-ctl", "--swap-groups=fleet-admins, system:masters", "--failover-groups=shift-leads"}); err != nil {
		t.Fatal(err)
	}
	if o.Controller != "system:serviceaccount:plant:hf-ctl" || strings.Join(o.SwapGroups, "|") != "fleet-admins|system:masters" ||
		strings.Join(o.FailoverGroups, "|") != "shift-leads" || strings.Join(o.ConfirmFencedGroups, "|") != "system:masters" {
		t.Fatalf("flags not applied: %+v", o)
	}
	for _, bad := range []string{"--node-plugin-service-account=holdfast-node", "--swap-groups= , "} {
		if err := fs.Parse([]string{bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// --voters-service-account: empty keeps the voters rights with the
// controller account (existing installs); set, the voters rights move to it
// alone. No account may be another component's.
func TestVotersServiceAccountFlag(t *testing.T) {
	o := DefaultOptions()
	if o.VotersUser() != o.Controller {
		t.Fatalf("unset, the voters rights stay with %s; got %s", o.Controller, o.VotersUser())
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--voters-service-account=plant/hf-voters"}); err != nil {
		t.Fatal(err)
	}
	if o.VotersUser() != "system:serviceaccount:plant:hf-voters" || o.Controller != DefaultOptions().Controller {
		t.Fatalf("flag not applied: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	// The voters rights are the voters account's alone.
	units := requester{User: o.Controller}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{holdfastv1.LabelDesiredRole: holdfastv1.RoleServer}}}
	if v, _ := checkNode(&o, units, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, n, nodeFacts{}); v.allowed() {
		t.Fatal("the controller account set a desired role with a voters account configured")
	}
	for _, bad := range []string{"--voters-service-account=hf-voters", "--voters-service-account=Plant/hf", "--voters-service-account=plant/"} {
		if err := fs.Parse([]string{bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for _, c := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.Voters = o.NodePlugin }, "nodePluginServiceAccount: Invalid value: \"system:serviceaccount:holdfast-system:holdfast-node\": is also votersServiceAccount"},
		{func(o *Options) { o.Scheduler = o.Controller }, "schedulerServiceAccount: Invalid value: \"system:serviceaccount:holdfast-system:holdfast-controller\": is also controllerServiceAccount"},
		{func(o *Options) { o.Controller = "" }, "controllerServiceAccount: Required value"},
		{func(o *Options) { o.Voters = "holdfast-controller-voters" }, "votersServiceAccount: Invalid value"},
	} {
		o := DefaultOptions()
		c.set(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error saying %q", err, c.want)
		}
	}
	// One account for both roles, spelled out, is the same as unset.
	o = DefaultOptions()
	o.Voters = o.Controller
	if err := o.Validate(); err != nil {
		t.Errorf("voters account = controller account: %v", err)
	}
}

func TestAuditLinesAreWholeJSON(t *testing.T) {
	var buf bytes.Buffer
	a := newAuditLog(&Options{Audit: &buf, Now: func() time.Time { return t0 }})
	r := requester{User: "sam", Groups: []string{"shift-leads"}, UID: "u-1", DryRun: true}
	if err := a.record(r, []audit.Record{{Reason: AuditManualFailover, Object: audit.Unit("p", "k"), Node: "edge-2", Message: "breaker", RequestID: "req-1"}}); err != nil {
		t.Fatal(err)
	}
	var rec audit.Record
	if err := json.Unmarshal(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), &rec); err != nil || bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("not one JSON line: %q (%v)", buf.String(), err)
	}
	if rec.Actor != "sam" || rec.Component != audit.ComponentWebhook || rec.AdmissionUID != "u-1" || !rec.DryRun || !rec.Time.Equal(t0) || rec.Message != "breaker" {
		t.Fatalf("record %+v", rec)
	}
	// The request ID is under the key the controller's audit lines use
	// (internal/audit.Record), so the two trails join on one key.
	for _, want := range []string{`"admissionUID":"u-1"`, `"requestID":"req-1"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("audit line %s lacks %s", buf.String(), want)
		}
	}
}
