package actuator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/atomicfile"
)

// StepDown takes the member out of serving before the controller removes
// it: the kube-apiserver manifest removed, the role file agent, and done
// once the kubelet has stopped the apiserver (its mirror pod gone). The
// etcd manifest stays: the member keeps voting until it is removed.
func (a *StaticPodActuator) StepDown(ctx context.Context) error {
	api := a.apiServerRef()
	since, err := a.removeManifest(APIServerManifest)
	if err != nil {
		return err
	}
	if err := a.cfg.State.SetRole(holdfastv1.RoleAgent); err != nil {
		return err
	}
	if err := a.waitGone(ctx, api, since); err != nil {
		return err
	}
	return a.clearRemovedAt(APIServerManifest)
}

// FinishDemote finishes a removed member to a worker: role file agent, the
// apiserver and etcd manifests removed, and once the kubelet has stopped
// etcd (its mirror pod gone), the member data moved aside keeping the
// newest copy, the tombstone retired beside it, the member's certificates
// and the join target removed. Rollback is the same host work.
//
// It holds the host's member lock while it changes the host's record, and
// never moves the data of an etcd the kubelet still runs.
func (a *StaticPodActuator) FinishDemote(ctx context.Context) error {
	st := a.cfg.State
	unlock, err := st.LockAsAgent()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := a.removeManifest(APIServerManifest); err != nil {
		return err
	}
	since, err := a.removeManifest(EtcdManifest)
	if err != nil {
		return err
	}
	if err := a.waitGone(ctx, a.etcdRef(), since); err != nil {
		return err
	}
	if err := retireMember(st); err != nil {
		return err
	}
	if err := removeMemberCerts(a.cfg.PKIDir); err != nil {
		return err
	}
	if err := st.ClearJoin(); err != nil {
		return err
	}
	if err := a.clearRemovedAt(APIServerManifest); err != nil {
		return err
	}
	return a.clearRemovedAt(EtcdManifest)
}

// Rollback returns a candidate whose promotion failed to a worker.
func (a *StaticPodActuator) Rollback(ctx context.Context) error { return a.FinishDemote(ctx) }

// Guard removes the etcd and apiserver manifests when the member was
// removed (a tombstone, holdfast's or etcd's own): that member is gone from
// its cluster, so stopping it never costs quorum. A stepped-down member
// with no tombstone keeps running: it votes until the controller removes
// it. The etcd manifest is written only by Promote, which checks the same
// host files first.
func (a *StaticPodActuator) Guard(context.Context) (bool, string, error) {
	ok, why, err := a.cfg.State.ServerAllowed()
	if err != nil || ok {
		return ok, why, err
	}
	removed, err := a.cfg.State.Removed()
	if err != nil || removed == "" {
		return ok, why, err
	}
	for _, m := range []string{APIServerManifest, EtcdManifest} {
		if _, err := os.Stat(a.manifest(m)); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return ok, why, err
		}
		if _, err := a.removeManifest(m); err != nil {
			return ok, why, err
		}
	}
	return ok, why, nil
}

// ActiveRole is server while the etcd mirror pod of this node runs, else
// agent: the kubelet, which runs this plugin, is the worker.
func (a *StaticPodActuator) ActiveRole(ctx context.Context) (string, error) {
	ns, name := mirrorName(a.etcdRef(), a.cfg.NodeName)
	p, err := a.pods.MirrorPod(ctx, ns, name)
	if err != nil {
		return "", err
	}
	if p != nil && p.Annotations[annotationConfigMirror] != "" && p.Status.Phase == corev1.PodRunning {
		return holdfastv1.RoleServer, nil
	}
	return holdfastv1.RoleAgent, nil
}

func (a *StaticPodActuator) etcdRef() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "etcd"}}
}

// apiServerRef names the apiserver's static pod as the template does.
func (a *StaticPodActuator) apiServerRef() *corev1.Pod {
	if p, err := a.apiServerPod(); err == nil {
		return p
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-apiserver"}}
}

// removedAtFile under the host state directory records when the actuator
// removed a manifest, so a wait for its pod to stop is bounded from the
// removal across retries and restarts.
func (a *StaticPodActuator) removedAtFile(manifest string) string {
	return filepath.Join(a.cfg.State.Dir, "static-pod-removed-"+strings.TrimSuffix(manifest, ".yaml"))
}

// removeManifest removes a manifest and returns when it was first removed
// (recorded before the removal, so a crash between the two keeps the
// earlier time).
func (a *StaticPodActuator) removeManifest(name string) (time.Time, error) {
	rec := a.removedAtFile(name)
	var since time.Time
	if b, err := os.ReadFile(rec); err == nil {
		since, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
		if err != nil {
			return since, fmt.Errorf("%s: %w", rec, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return since, err
	} else {
		since = a.cfg.Clock.Now()
		if err := os.MkdirAll(a.cfg.State.Dir, 0o755); err != nil {
			return since, err
		}
		if err := atomicfile.Write(a.cfg.State.Dir, filepath.Base(rec), []byte(since.UTC().Format(time.RFC3339Nano)+"\n"), 0o644); err != nil {
			return since, err
		}
	}
	return since, removeFile(a.manifest(name))
}

func (a *StaticPodActuator) clearRemovedAt(name string) error {
	return removeFile(a.removedAtFile(name))
}
