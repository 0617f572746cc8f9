package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// targetType is what each path decodes an object into.
var targetType = map[string]func() any{
	PathNode:       func() any { return &corev1.Node{} },
	PathLease:      func() any { return &coordinationv1.Lease{} },
	PathUnit:       func() any { return &holdfastv1.Unit{} },
	PathVoterSwap:  func() any { return &holdfastv1.VoterSwap{} },
	PathPod:        func() any { return &corev1.Pod{} },
	PathPodBinding: func() any { return &corev1.Binding{} },
}

// decodes reports whether raw is an object of the path's type.
func decodes(path string, raw runtime.RawExtension) bool {
	return len(raw.Raw) > 0 && json.Unmarshal(raw.Raw, targetType[path]()) == nil
}

// FuzzAdmissionReview sends arbitrary AdmissionReview bodies to every
// validator over HTTP, against an empty cluster: no input panics the server,
// every answer is a well-formed review, and no request whose object (or old
// object) does not decode as the path's kind is ever allowed.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(uint8(0), []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"UPDATE","userInfo":{"username":"admin"},"object":{"metadata":{"name":"n1","labels":{"holdfast.io/desired-role":"server"}}},"oldObject":{"metadata":{"name":"n1"}}}}`))
	scheme, err := NewScheme()
	if err != nil {
		f.Fatal(err)
	}
	o := DefaultOptions()
	o.Audit = &bytes.Buffer{}
	o.Now = func() time.Time { return time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC) }
	handlers := Handlers(scheme, fake.NewClientBuilder().WithScheme(scheme).Build(), &o)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		path := Paths[int(which)%len(Paths)]
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		handlers[path].ServeHTTP(rec, req)

		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			return // refused before any rule ran; nothing to judge
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("%s answered %q, not an AdmissionReview", path, rec.Body.String())
		}
		if !out.Response.Allowed {
			return
		}
		switch in.Request.Operation {
		case admissionv1.Create, admissionv1.Update:
			if !decodes(path, in.Request.Object) {
				t.Fatalf("%s allowed a %s whose object is malformed: %s", path, in.Request.Operation, in.Request.Object.Raw)
			}
		}
		switch in.Request.Operation {
		case admissionv1.Update, admissionv1.Delete:
			if !decodes(path, in.Request.OldObject) {
				t.Fatalf("%s allowed a %s whose old object is malformed: %s", path, in.Request.Operation, in.Request.OldObject.Raw)
			}
		}
		// A node role switch by anyone but the controller is never allowed.
		if path == PathNode && in.Request.UserInfo.Username != o.Controller && in.Request.Operation == admissionv1.Update {
			var oldN, newN corev1.Node
			_ = json.Unmarshal(in.Request.OldObject.Raw, &oldN)
			_ = json.Unmarshal(in.Request.Object.Raw, &newN)
			if len(changedKeys(oldN.Labels, newN.Labels, controllerOnlyKey))+len(changedKeys(oldN.Annotations, newN.Annotations, controllerOnlyKey)) > 0 {
				t.Fatalf("a role change by %q was allowed", in.Request.UserInfo.Username)
			}
		}
	})
}

// FuzzSwapLeaseRules: arbitrary old and new swap Leases, by anyone, at any
// time. No panic; a held Lease never changes holder, never loses a node and
// is never deleted; no one but the controller changes its spec.
func FuzzSwapLeaseRules(f *testing.F) {
	f.Add([]byte(`{"metadata":{"namespace":"kube-system","name":"holdfast-voter-swap","labels":{"holdfast.io/guarded":"true"},"annotations":{"holdfast.io/swap-id":"s1","holdfast.io/swap-nodes":"cp-3,edge-7"}},"spec":{"holderIdentity":"ctl","leaseDurationSeconds":60,"renewTime":"2026-11-29T19:59:50.000000Z"}}`),
		[]byte(`{"metadata":{"namespace":"kube-system","name":"holdfast-voter-swap","labels":{"holdfast.io/guarded":"true"},"annotations":{"holdfast.io/swap-id":"s1","holdfast.io/swap-nodes":"cp-3"}},"spec":{"holderIdentity":"other","leaseDurationSeconds":60}}`),
		true, int64(0))
	o := DefaultOptions()
	t0 := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, oldJSON, newJSON []byte, asController bool, offsetSeconds int64) {
		var old, newL coordinationv1.Lease
		if json.Unmarshal(oldJSON, &old) != nil || json.Unmarshal(newJSON, &newL) != nil {
			return
		}
		old.Namespace, old.Name = holdfastv1.SwapLeaseNamespace, holdfastv1.SwapLeaseName
		newL.Namespace, newL.Name = old.Namespace, old.Name
		r := requester{User: "someone"}
		if asController {
			r.User = o.Controller
		}
		now := t0.Add(time.Duration(offsetSeconds%1e6) * time.Second)
		v := checkSwapLease(&o, r, &old, &newL, now)
		held := policy.SwapLeaseHeld(&old, now)
		if v.allowed() {
			if held && policy.SwapLeaseHolder(&newL) != "" && policy.SwapLeaseHolder(&newL) != policy.SwapLeaseHolder(&old) {
				t.Fatalf("the holder of a held Lease changed: %q -> %q", policy.SwapLeaseHolder(&old), policy.SwapLeaseHolder(&newL))
			}
			if !asController && !equalSpec(&old, &newL) {
				t.Fatal("someone other than the controller changed the spec")
			}
			if held && policy.SwapLeaseHolder(&newL) != "" {
				kept := map[string]bool{}
				for _, n := range policy.SwapLeaseNodes(&newL) {
					kept[n] = true
				}
				for _, n := range policy.SwapLeaseNodes(&old) {
					if !kept[n] {
						t.Fatalf("node %s dropped from a held Lease", n)
					}
				}
			}
		}
		if d := checkSwapLease(&o, r, &old, nil, now); held && d.allowed() {
			t.Fatal("a held Lease was deleted")
		}
	})
}

func equalSpec(a, b *coordinationv1.Lease) bool {
	x, _ := json.Marshal(a.Spec)
	y, _ := json.Marshal(b.Spec)
	return bytes.Equal(x, y)
}

// BenchmarkHandler is the webhook's own service time for one guarded node
// request (decode, rules, encode), without the apiserver or the network.
func BenchmarkHandler(b *testing.B) {
	scheme, err := NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultOptions()
	h := Handlers(scheme, fake.NewClientBuilder().WithScheme(scheme).Build(), &o)[PathNode]
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"UPDATE","userInfo":{"username":"system:serviceaccount:holdfast-system:holdfast-node","extra":{"authentication.kubernetes.io/node-name":["n1"]}},"object":{"metadata":{"name":"n1","annotations":{"holdfast.io/fitness":"{\"fsyncP99Millis\":4}"}}},"oldObject":{"metadata":{"name":"n1","annotations":{"holdfast.io/fitness":"{\"fsyncP99Millis\":3}"}}}}}`)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, PathNode, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if !bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`)) {
			b.Fatalf("not allowed: %s", rec.Body.String())
		}
	}
}
