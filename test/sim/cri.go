package sim

import (
	"context"
	"fmt"
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// nodeCRI is the node's container runtime as the fence agent sees it over
// CRI: one sandbox per runtime pod, labelled as the kubelet labels it, and
// one container in it. It is the protocol boundary the fence agent is
// tested at; what it stops, stops.
type nodeCRI struct{ n *node }

var _ fence.Runtime = nodeCRI{}

func (c nodeCRI) sandboxes() []*container {
	var out []*container
	for _, uid := range sortedKeys(c.n.containers) {
		if ct := c.n.containers[uid]; !ct.sandboxGone {
			out = append(out, ct)
		}
	}
	return out
}

func (c nodeCRI) find(id string) *container {
	for _, ct := range c.sandboxes() {
		if ct.sandbox == id || ct.id == id {
			return ct
		}
	}
	return nil
}

func (c nodeCRI) ListPodSandbox(_ context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	var out []*runtimeapi.PodSandbox
	for _, ct := range c.sandboxes() {
		labels := map[string]string{
			holdfastv1.LabelUnit:          ct.unitName(),
			holdfastv1.LabelEpoch:         strconv.FormatInt(ct.epoch, 10),
			"io.kubernetes.pod.name":      ct.podName,
			"io.kubernetes.pod.namespace": ct.podNS,
		}
		match := true
		if f != nil {
			for k, v := range f.LabelSelector {
				if labels[k] != v {
					match = false
				}
			}
		}
		if match {
			out = append(out, &runtimeapi.PodSandbox{Id: ct.sandbox, Labels: labels, State: runtimeapi.PodSandboxState_SANDBOX_READY,
				Metadata: &runtimeapi.PodSandboxMetadata{Name: ct.podName, Namespace: ct.podNS, Uid: ct.podUID}})
		}
	}
	return out, nil
}

func (ct *container) unitName() string {
	for i := range ct.unit {
		if ct.unit[i] == '/' {
			return ct.unit[i+1:]
		}
	}
	return ct.unit
}

func (c nodeCRI) PodSandboxStatus(_ context.Context, id string, _ bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	if c.find(id) == nil {
		return nil, fmt.Errorf("sandbox %s not found", id)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: id,
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: c.n.host.ip}}}, nil
}

func (c nodeCRI) ListContainers(_ context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var out []*runtimeapi.Container
	for _, ct := range c.sandboxes() {
		if f != nil && f.PodSandboxId != "" && f.PodSandboxId != ct.sandbox || ct.id == "" {
			continue
		}
		state := runtimeapi.ContainerState_CONTAINER_EXITED
		if ct.rp != nil {
			state = runtimeapi.ContainerState_CONTAINER_RUNNING
		}
		out = append(out, &runtimeapi.Container{Id: ct.id, PodSandboxId: ct.sandbox, State: state})
	}
	return out, nil
}

func (c nodeCRI) StopContainer(_ context.Context, id string, _ int64) error {
	if ct := c.find(id); ct != nil {
		c.n.stopContainer(ct, "stopped by the fence agent through CRI")
	}
	return nil
}

func (c nodeCRI) StopPodSandbox(_ context.Context, id string) error {
	if ct := c.find(id); ct != nil {
		c.n.stopContainer(ct, "sandbox stopped")
	}
	return nil
}

func (c nodeCRI) RemovePodSandbox(_ context.Context, id string) error {
	if ct := c.find(id); ct != nil {
		ct.sandboxGone = true
	}
	return nil
}

// nodeLease reads a local runtime's GET /v1/lease through its Handler; a
// paused or absent runtime does not answer.
type nodeLease struct{ n *node }

func (l nodeLease) Status(_ context.Context, _ string, port int32) (*leaseapi.Status, error) {
	rp := l.n.host.ports[port]
	if rp == nil || !rp.p.running() {
		return nil, fmt.Errorf("GET %s: no answer", leaseapi.Path)
	}
	return rp.status()
}
