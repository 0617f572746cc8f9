package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A node that can hold an etcd member keeps its member data on a block
// device of its own: an ext4 file system on a loop device backed by a file
// in the cluster's directory, mounted at the node's db directory before the
// node starts (its mount namespace takes it with /var/lib). A drill slows
// that device for the node's pods with the blkio controller's write limit,
// so holdfast-node's fsync probe measures a slow disk.

// memberDiskSize is each member disk's size: etcd's data here is a few MB.
const memberDiskSize = 256 << 20

// blkioRoot is the cgroup v1 blkio hierarchy. Its write IOPS limits are
// per cgroup and not inherited: a limit holds for the bios a cgroup's own
// tasks submit.
const blkioRoot = "/sys/fs/cgroup/blkio"

// disk is a member disk: its loop device, where it is mounted, and the
// blkio cgroups that carry a write limit for it.
type disk struct {
	image, dev, mnt string
	limited         []string
}

// newDisk makes an ext4 file system in a sparse file image on a free loop
// device and mounts it at mnt.
func newDisk(image, mnt string) (*disk, error) {
	if err := os.MkdirAll(filepath.Dir(image), 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(image)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(memberDiskSize)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("losetup", "--find", "--show", image).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	d := &disk{image: image, dev: strings.TrimSpace(string(out)), mnt: mnt}
	for _, argv := range [][]string{{"mkfs.ext4", "-q", "-F", d.dev}, {"mount", d.dev, mnt}} {
		if err := run(argv...); err != nil {
			return nil, errors.Join(err, d.close())
		}
	}
	return d, nil
}

// devNum is the device's "major:minor".
func (d *disk) devNum() (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(d.dev, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

// throttle limits the writes to the device from every blkio cgroup in
// dirs to iops per second; 0 lifts the limits it set.
func (d *disk) throttle(iops int, dirs ...string) error {
	dev, err := d.devNum()
	if err != nil {
		return err
	}
	if iops == 0 {
		dirs, d.limited = d.limited, nil
	}
	var errs []error
	for _, dir := range dirs {
		err := os.WriteFile(filepath.Join(dir, "blkio.throttle.write_iops_device"), []byte(dev+" "+strconv.Itoa(iops)), 0o644)
		switch {
		case err == nil && iops > 0:
			d.limited = append(d.limited, dir)
		case err != nil && (iops > 0 || !errors.Is(err, os.ErrNotExist)):
			// A cgroup gone (its container ended) has no limit left.
			errs = append(errs, fmt.Errorf("limiting %s (%s) to %d write IOPS in %s: %w (needs the cgroup v1 blkio controller)", d.dev, dev, iops, dir, err))
		}
	}
	return errors.Join(errs...)
}

// blkioCgroups are the node's blkio cgroups: its root and every cgroup
// under it (its kubelet's pods: holdfast-node's fsync probe among them).
// The member itself runs in this process's cgroup and is left alone: a
// member whose writes stall holds the apiserver's requests on it for tens
// of seconds, which a drill that counts failed writes cannot tell from a
// fault of the swap.
func blkioCgroups(nodeRoot string) ([]string, error) {
	root := filepath.Join(blkioRoot, nodeRoot)
	if _, err := os.Stat(filepath.Join(root, "blkio.throttle.write_iops_device")); err != nil {
		return nil, fmt.Errorf("no cgroup v1 blkio controller with write limits for %s: %w", nodeRoot, err)
	}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	return dirs, err
}

// ownBlkioCgroup is this process's blkio cgroup path ("" when unknown).
func ownBlkioCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "blkio") {
			return f[2]
		}
	}
	return ""
}

// close lifts any throttle, unmounts the file system and frees the loop
// device (a throttle left on its number would slow its next user).
func (d *disk) close() error {
	var errs []error
	if err := d.throttle(0); err != nil {
		errs = append(errs, err)
	}
	if err := unix.Unmount(d.mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("unmounting %s: %w", d.mnt, err))
	}
	return errors.Join(append(errs, run("losetup", "--detach", d.dev))...)
}

// reapDisks frees what a dead cluster in dir left: its mounts under dir and
// the loop devices backed by files under dir, their throttles lifted.
func reapDisks(dir string) {
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		var mnts []string
		s := bufio.NewScanner(f)
		for s.Scan() {
			if fs := strings.Fields(s.Text()); len(fs) > 4 && strings.HasPrefix(fs[4], dir+"/") {
				mnts = append(mnts, fs[4])
			}
		}
		f.Close()
		for i := len(mnts) - 1; i >= 0; i-- {
			_ = unix.Unmount(mnts[i], unix.MNT_DETACH)
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, bf := range files {
		b, err := os.ReadFile(bf)
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			continue
		}
		loop := filepath.Base(filepath.Dir(filepath.Dir(bf)))
		d := &disk{dev: "/dev/" + loop}
		dirs := []string{blkioRoot}
		if own := ownBlkioCgroup(); own != "" && own != "/" {
			dirs = append(dirs, filepath.Join(blkioRoot, own))
		}
		_ = d.throttle(0, dirs...)
		_ = run("losetup", "--detach", d.dev)
	}
}
