// Package holdfastclient gives the plugins of one scheduler their view of
// holdfast's kinds: reads from one shared informer cache (Units,
// VoterPolicies), writes and the reads that precede them straight to the
// apiserver.
package holdfastclient

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Clients are one scheduler's clients for holdfast's kinds.
type Clients struct {
	// Cached reads from informers: what Filter and Score see.
	Cached client.Reader
	// Live reads from and writes to the apiserver: what Bind uses, so
	// that its optimistic-concurrency write starts from the current object.
	Live client.Client

	cache cache.Cache
}

var (
	mu sync.Mutex
	// shared holds one Clients per scheduler: every plugin of every profile
	// gets the same *rest.Config from its handle.
	shared = map[*rest.Config]*Clients{}
)

// Scheme holds the built-in and holdfast kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(holdfastv1.AddToScheme(s))
	return s
}

// For returns the clients of the scheduler h belongs to, starting its cache
// on first use and stopping it with ctx, and waits until the informers of
// objs have synced. A kind whose CRD is not installed is an error, so a
// scheduler without holdfast's CRDs refuses to start.
func For(ctx context.Context, h fwk.Handle, objs ...client.Object) (*Clients, error) {
	kubeConfig := h.KubeConfig()
	if kubeConfig == nil {
		return nil, fmt.Errorf("the scheduler handle has no kubeconfig")
	}
	c, err := clientsFor(ctx, kubeConfig)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if _, err := c.cache.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	if !c.cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("waiting for the holdfast informers to sync: %w", ctx.Err())
	}
	return c, nil
}

// OnChange calls fn with every object of example's kind that is added or
// updated, once the cache holds it (and at once for every object it holds).
func (c *Clients) OnChange(ctx context.Context, example client.Object, fn func(client.Object)) error {
	informer, err := c.cache.GetInformer(ctx, example)
	if err != nil {
		return fmt.Errorf("watching %T: %w", example, err)
	}
	call := func(obj any) {
		if o, ok := obj.(client.Object); ok {
			fn(o)
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
	})
	return err
}

func clientsFor(ctx context.Context, kubeConfig *rest.Config) (*Clients, error) {
	mu.Lock()
	defer mu.Unlock()
	if c, ok := shared[kubeConfig]; ok {
		return c, nil
	}
	// CRDs speak JSON only; the scheduler's own config asks for protobuf.
	cfg := rest.CopyConfig(kubeConfig)
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	scheme := Scheme()
	// The plugins never read managedFields. Without them the cache holds
	// about half as much per Unit, and Bind's update from a cached Unit
	// sends none: the apiserver then keeps the ones it holds, so no
	// manager's ownership is lost.
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	c := &Clients{Cached: informers, Live: live, cache: informers}
	shared[kubeConfig] = c
	go func() {
		if err := informers.Start(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Holdfast informers stopped")
		}
		mu.Lock()
		delete(shared, kubeConfig)
		mu.Unlock()
	}()
	return c, nil
}
