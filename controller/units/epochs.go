package units

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// EpochRecord is the cluster's record of the highest epoch any grantor has
// reserved (docs/design.md §3 L13): the annotation holdfast.io/last-epoch
// on the Lease holdfast-epochs in the grantor's namespace. Every epoch is
// reserved there, with a compare-and-swap, before a binding names it, and
// the record outlives every Unit: a Unit deleted and created again, or
// renamed, binds above every epoch an earlier one held, whatever the
// leaders' clocks say.
type EpochRecord struct {
	// Reader reads past the cache; Writer creates and updates the Lease.
	Reader    client.Reader
	Writer    client.Writer
	Namespace string

	mu sync.Mutex
	// lease is the record as last read or written; nil until then.
	lease *coordinationv1.Lease
}

// EpochRecordName is the Lease that carries the record.
const EpochRecordName = "holdfast-epochs"

// Last is the highest epoch reserved, as last read or written by this
// process (read from the apiserver the first time, and after a lost race).
func (r *EpochRecord) Last(ctx context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease == nil {
		if err := r.readLocked(ctx); err != nil {
			return 0, err
		}
	}
	return recorded(r.lease)
}

func (r *EpochRecord) readLocked(ctx context.Context) error {
	var l coordinationv1.Lease
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: EpochRecordName}, &l)
	switch {
	case apierrors.IsNotFound(err):
		r.lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: EpochRecordName}}
	case err != nil:
		return fmt.Errorf("reading the epoch record %s/%s: %w", r.Namespace, EpochRecordName, err)
	default:
		r.lease = &l
	}
	return nil
}

func recorded(l *coordinationv1.Lease) (int64, error) {
	v, ok := l.Annotations[holdfastv1.AnnotationLastEpoch]
	if !ok {
		return 0, nil
	}
	e, err := strconv.ParseInt(v, 10, 64)
	if err != nil || e < 0 {
		return 0, fmt.Errorf("the epoch record %s/%s holds %s=%q, not an epoch: set it to the highest epoch any unit holds",
			l.Namespace, l.Name, holdfastv1.AnnotationLastEpoch, v)
	}
	return e, nil
}

// Reserve records e as the highest epoch reserved. It succeeds only over
// the record Last returned: after another writer moved it the write
// conflicts, the record is read again, and the caller decides again.
func (r *EpochRecord) Reserve(ctx context.Context, e int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease == nil {
		if err := r.readLocked(ctx); err != nil {
			return err
		}
	}
	last, err := recorded(r.lease)
	if err != nil {
		return err
	}
	if e <= last {
		return fmt.Errorf("epoch %d is not above the record's %d: decide again", e, last)
	}
	l := r.lease.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[holdfastv1.AnnotationLastEpoch] = strconv.FormatInt(e, 10)
	if l.ResourceVersion == "" {
		err = r.Writer.Create(ctx, l)
	} else {
		err = r.Writer.Update(ctx, l)
	}
	if err != nil {
		r.lease = nil // read again: another writer may have moved it
		return fmt.Errorf("reserving epoch %d in %s/%s: %w", e, r.Namespace, EpochRecordName, err)
	}
	r.lease = l
	return nil
}
