package fence

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// NewCRI connects to the container runtime's CRI socket
// (unix:///run/containerd/containerd.sock).
func NewCRI(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
}

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(v) }
