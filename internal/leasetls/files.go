package leasetls

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// ReloadInterval is how often credential files are read again. A mounted
// Secret or projected volume is swapped whole by the kubelet; a few seconds
// after that, both ends use the new credentials, without a restart.
const ReloadInterval = 2 * time.Second

// Files holds credentials read from a set of files together, and reloads
// them when any file changes. A set that does not parse (a half-written
// update, a key that does not match its certificate) never replaces the
// one in use: the error is logged and the next read tries again.
type Files[T any] struct {
	paths []string
	parse func(data [][]byte) (T, error)
	log   klog.Logger

	cur atomic.Pointer[T]

	mu       sync.Mutex
	sum      [sha256.Size]byte
	lastErr  string
	onChange []func(T)
}

// Watch reads paths and parses them with parse, which gets their contents
// in the same order. The first read must succeed.
func Watch[T any](parse func(data [][]byte) (T, error), log klog.Logger, paths ...string) (*Files[T], error) {
	f := &Files[T]{paths: paths, parse: parse, log: log}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Current is the credentials in use.
func (f *Files[T]) Current() T { return *f.cur.Load() }

// OnChange calls fn with the new credentials after every reload that
// changed them.
func (f *Files[T]) OnChange(fn func(T)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onChange = append(f.onChange, fn)
}

// Reload reads the files again and reports whether the credentials changed.
func (f *Files[T]) Reload() (bool, error) {
	data := make([][]byte, len(f.paths))
	h := sha256.New()
	for i, p := range f.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return false, f.failed(fmt.Errorf("reading %s: %w", p, err))
		}
		data[i] = b
		_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	f.mu.Lock()
	same := f.cur.Load() != nil && sum == f.sum
	f.mu.Unlock()
	if same {
		return false, nil
	}
	v, err := f.parse(data)
	if err != nil {
		return false, f.failed(err)
	}
	f.mu.Lock()
	first := f.cur.Load() == nil
	f.sum, f.lastErr = sum, ""
	f.cur.Store(&v)
	hooks := append([]func(T){}, f.onChange...)
	f.mu.Unlock()
	if !first {
		f.log.Info("Reloaded lease credentials", "files", f.paths)
		for _, fn := range hooks {
			fn(v)
		}
	}
	return !first, nil
}

func (f *Files[T]) failed(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur.Load() != nil && err.Error() != f.lastErr {
		f.log.Error(err, "Lease credentials not reloaded; the ones in use stay", "files", f.paths)
	}
	f.lastErr = err.Error()
	return err
}

// Run reloads every interval until ctx ends.
func (f *Files[T]) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = f.Reload()
		}
	}
}
