//go:build e2e

package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/node-plugin/report"
)

// TestAThrottledMemberDiskIsSlowForTheFsyncProbe: a member disk (an ext4
// loop device) limited with SlowDisk's throttle makes holdfast-node's own
// fsync probe (report.FsyncLatencies) measure p99 latencies over the unfit
// drill's threshold, lifted it is fast again, and closed it leaves no loop
// device behind.
func TestAThrottledMemberDiskIsSlowForTheFsyncProbe(t *testing.T) {
	dir := t.TempDir()
	d, err := newDisk(filepath.Join(dir, "disk.img"), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = d.close()
		}
	})
	p99 := func() time.Duration {
		lat, err := report.FsyncLatencies(d.mnt, 20)
		if err != nil {
			t.Fatal(err)
		}
		return report.P99(lat)
	}
	fast := p99()
	dirs := []string{blkioRoot}
	if own := ownBlkioCgroup(); own != "" && own != "/" {
		dirs = append(dirs, filepath.Join(blkioRoot, own))
	}
	if err := d.throttle(20, dirs...); err != nil {
		t.Fatal(err)
	}
	slow := p99()
	if err := d.throttle(0); err != nil {
		t.Fatal(err)
	}
	again := p99()
	t.Logf("fsync p99: %v, throttled to 20 write IOPS %v, lifted %v", fast, slow, again)
	if slow < 100*time.Millisecond || slow < 5*fast {
		t.Errorf("throttled p99 %v (unthrottled %v): want over 100ms and 5x", slow, fast)
	}
	if again > slow/2 {
		t.Errorf("lifted p99 %v, throttled %v: the limit stayed", again, slow)
	}
	closed = true
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), dir) {
			t.Errorf("%s still backs %s", strings.TrimSpace(string(b)), f)
		}
	}
}
