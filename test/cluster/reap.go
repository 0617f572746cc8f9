package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// state is what a cluster records in its directory so that a later run can
// clean up after a process that died without calling Stop (a panic, a
// SIGKILL): its ID, its owner and the kernel settings it found.
type state struct {
	ID         string            `json:"id"`
	Owner      int               `json:"owner"`
	OwnerStart string            `json:"ownerStart"`
	Sysctls    map[string]string `json:"sysctls"`
}

const stateFile = "state.json"

// processStart is a process's start time in clock ticks since boot (field
// 22 of /proc/PID/stat), which tells a live owner from a reused PID.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name may hold spaces; fields count from after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func (c *Cluster) writeState() error {
	b, err := json.Marshal(state{ID: c.ID, Owner: os.Getpid(), OwnerStart: processStart(os.Getpid()), Sysctls: c.sysctls})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, stateFile), b, 0o644)
}

// ReapOrphans cleans up every cluster whose owning process is gone: it
// kills the processes in the cluster's network namespaces and cgroups, by
// PID, removes the namespaces, cgroups and directory, and puts back the
// kernel settings that cluster found. Start calls it first. It returns what
// it reaped.
func ReapOrphans() []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "hfe-*", stateFile))
	var out []string
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var st state
		if json.Unmarshal(b, &st) != nil || st.ID == "" {
			continue
		}
		if st.Owner > 0 && processStart(st.Owner) == st.OwnerStart && st.OwnerStart != "" {
			continue // its owner is alive
		}
		reap(st)
		reapDisks(filepath.Dir(f))
		// Helpers a harness started beside the cluster in the machine's
		// own namespaces (the nodes' dbus-daemons) are found by the
		// cluster's directory on their command line.
		for _, pid := range PIDsNaming(filepath.Dir(f)) {
			killPID(pid)
		}
		_ = os.RemoveAll(filepath.Dir(f))
		out = append(out, st.ID)
	}
	return out
}

func reap(st state) {
	prefix := "hfe-" + st.ID + "-"
	for ns := range existingNetns() {
		if !strings.HasPrefix(ns, prefix) {
			continue
		}
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, l := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(l); err == nil {
				killPID(pid)
			}
		}
	}
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		roots, _ := filepath.Glob(filepath.Join(m, prefix+"*"))
		for _, r := range roots {
			_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
					for _, l := range strings.Fields(string(b)) {
						if pid, err := strconv.Atoi(l); err == nil {
							killPID(pid)
						}
					}
				}
				return nil
			})
		}
	}
	for _, m := range mounts {
		roots, _ := filepath.Glob(filepath.Join(m, prefix+"*"))
		for _, r := range roots {
			_ = removeCgroupTree(r)
		}
	}
	for ns := range existingNetns() {
		if strings.HasPrefix(ns, prefix) {
			_ = run("ip", "netns", "delete", ns)
		}
	}
	for s, v := range st.Sysctls {
		_ = os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644)
	}
}

// PIDsNaming lists the processes whose command line names a path under dir.
func PIDsNaming(dir string) []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// removeCgroupTree removes a cgroup directory tree, deepest first (cgroupfs
// directories go with rmdir only), retrying while the kernel lets go of
// exiting tasks.
func removeCgroupTree(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for try := 0; try < 50; try++ {
			if err = os.Remove(dirs[i]); err == nil || os.IsNotExist(err) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}
