package crihost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/test/crihost"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
)

// TestRunsAHostNetworkPodServingLease starts the real containerd and runc,
// imports a locally built image, and runs it the way a kubelet would.
func TestRunsAHostNetworkPodServingLease(t *testing.T) {
	dir := t.TempDir()
	h, err := crihost.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	tar := filepath.Join(dir, "rt.tar")
	if err := crihost.BuildTestImage(tar, "holdfast.test/runtime:1", []string{"lease"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Import(tar); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := h.RuntimeService(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port := ports.Free(t, 1)[0]
	_, cid, err := crihost.RunPod(ctx, rt, filepath.Join(dir, "logs"), crihost.Pod{Namespace: "plant", Name: "u-runtime-e1", UID: "uid-1",
		Labels: map[string]string{"holdfast.io/unit": "u"}, Image: "holdfast.test/runtime:1",
		Args: []string{"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--unit", "plant/u"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rt.ContainerStatus(ctx, cid, false)
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container status %v, %v", st, err)
	}
	var got lease.Status
	poll.Until(t, 20*time.Second, "the lease endpoint in the container", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, lease.Path))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	if got.Unit != "plant/u" || got.State != lease.Held {
		t.Fatalf("status %+v", got)
	}
}
