package report

import (
	"os"
	"syscall"
	"time"
)

// FsyncLatencies times n O_DSYNC writes of WALWriteSize bytes to a scratch
// file in dir, removed afterwards.
func FsyncLatencies(dir string, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, ".holdfast-fsync-probe-")
	if err != nil {
		return nil, err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	f, err = os.OpenFile(name, os.O_WRONLY|syscall.O_DSYNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, WALWriteSize)
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
