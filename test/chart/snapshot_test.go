package chart

import (
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// votersWorkload is the voters role's rendered workload: its kind, the pod
// template and, for a StatefulSet, its claim templates and their retention.
type votersWorkload struct {
	kind      string
	pod       corev1.PodSpec
	claims    []corev1.PersistentVolumeClaim
	retention *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy
}

func renderVoters(t *testing.T, values string) votersWorkload {
	t.Helper()
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ch, v)
	if err != nil {
		t.Fatalf("%s: %v", values, err)
	}
	var out []votersWorkload
	for _, m := range ms {
		if m.Name != "holdfast-controller-voters" {
			continue
		}
		switch m.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.Object, &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, votersWorkload{kind: m.Kind, pod: d.Spec.Template.Spec})
		case "StatefulSet":
			var s appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.Object, &s); err != nil {
				t.Fatal(err)
			}
			out = append(out, votersWorkload{kind: m.Kind, pod: s.Spec.Template.Spec, claims: s.Spec.VolumeClaimTemplates,
				retention: s.Spec.PersistentVolumeClaimRetentionPolicy})
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d workloads named holdfast-controller-voters, want one", values, len(out))
	}
	return out[0]
}

// TestTheVotersSnapshotsOutliveThePod: by default the voters role keeps
// its verified snapshots on a claim of its own (a StatefulSet's claim
// template, retained when the pod, the StatefulSet or the release goes),
// with the claim's StorageClass and size from values, or on one existing
// claim; only persistence disabled falls back to an emptyDir. Each way,
// the role is told what holds them (--snapshot-volume), which each
// VoterSwap records with the pod and node as status.snapshot.location.
func TestTheVotersSnapshotsOutliveThePod(t *testing.T) {
	for _, tc := range []struct {
		values string
		kind   string
		// claim is the claim template's StorageClass and size ("" for none);
		// source is the pod's snapshots volume source (kind only).
		class, size string
		source      string
		arg         string
	}{
		{values: "controller: {voters: {enabled: true}}", kind: "StatefulSet", size: "2Gi",
			arg: "--snapshot-volume=persistentVolumeClaim/snapshots-$(POD_NAME)"},
		{values: "controller: {voters: {enabled: true, persistence: {enabled: true, storageClass: plant-ssd, size: 5Gi}}}", kind: "StatefulSet",
			class: "plant-ssd", size: "5Gi", arg: "--snapshot-volume=persistentVolumeClaim/snapshots-$(POD_NAME)"},
		{values: "controller: {voters: {enabled: true, persistence: {enabled: true, existingClaim: holdfast-snapshots}}}", kind: "Deployment",
			source: "persistentVolumeClaim/holdfast-snapshots", arg: "--snapshot-volume=persistentVolumeClaim/holdfast-snapshots"},
		{values: "controller: {voters: {enabled: true, persistence: {enabled: false}}}", kind: "Deployment",
			source: "emptyDir", arg: "--snapshot-volume=emptyDir"},
	} {
		w := renderVoters(t, tc.values)
		if w.kind != tc.kind {
			t.Errorf("%s: the voters role is a %s, want a %s", tc.values, w.kind, tc.kind)
			continue
		}
		c := w.pod.Containers[0]
		if !slices.Contains(c.Args, tc.arg) {
			t.Errorf("%s: voters args %v lack %s", tc.values, c.Args, tc.arg)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" && e.ValueFrom != nil }) {
			t.Errorf("%s: no POD_NAME for --snapshot-volume", tc.values)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "snapshots" && m.MountPath == "/var/lib/holdfast/snapshots" && !m.ReadOnly
		}) {
			t.Errorf("%s: the snapshots volume is not mounted at --snapshot-dir: %+v", tc.values, c.VolumeMounts)
		}
		var source string
		for _, v := range w.pod.Volumes {
			switch {
			case v.Name != "snapshots":
			case v.PersistentVolumeClaim != nil:
				source = "persistentVolumeClaim/" + v.PersistentVolumeClaim.ClaimName
			case v.EmptyDir != nil:
				source = "emptyDir"
			default:
				source = "other"
			}
		}
		if source != tc.source {
			t.Errorf("%s: the pod's snapshots volume is %q, want %q", tc.values, source, tc.source)
		}
		if tc.kind != "StatefulSet" {
			continue
		}
		if len(w.claims) != 1 || w.claims[0].Name != "snapshots" {
			t.Fatalf("%s: claim templates %+v, want one named snapshots", tc.values, w.claims)
		}
		spec := w.claims[0].Spec
		class := ""
		if spec.StorageClassName != nil {
			class = *spec.StorageClassName
		}
		if size := spec.Resources.Requests[corev1.ResourceStorage]; class != tc.class || size.String() != tc.size ||
			!slices.Equal(spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
			t.Errorf("%s: claim template class %q size %s modes %v, want %q %s ReadWriteOnce", tc.values, class, size.String(), spec.AccessModes, tc.class, tc.size)
		}
		if r := w.retention; r == nil || r.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
			r.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
			t.Errorf("%s: claim retention %+v, want Retain when deleted and when scaled", tc.values, r)
		}
	}
}
