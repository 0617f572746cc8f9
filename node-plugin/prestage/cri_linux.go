package prestage

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// NewCRI connects to the container runtime's CRI image service.
func NewCRI(ctx context.Context, endpoint string) (internalapi.ImageManagerService, error) {
	return remote.NewRemoteImageService(ctx, endpoint, 5*time.Minute, noop.NewTracerProvider(), false)
}
