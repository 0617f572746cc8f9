//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// every Linux the project runs on).
const clockTicks = 100

// cpuTimes is the CPU time, in seconds, that this test process (the
// scheduler in process, the benchmark's clients) and its child processes
// (envtest's kube-apiserver and etcd) have used, by command name. Wall time
// on a shared 2-core machine moves with the other engineers' load; CPU time
// spent per batch moves much less, so it is the evidence of where a
// profile costs more.
func cpuTimes() (map[string]float64, error) {
	self := os.Getpid()
	out := map[string]float64{}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // the process has gone
		}
		// pid (comm) state ppid ... utime stime: fields 14 and 15; comm may
		// hold spaces, so count from its closing parenthesis.
		s := string(data)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		comm := s[open+1 : closing]
		fields := strings.Fields(s[closing+1:])
		if len(fields) < 13 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
		ppid, _ := strconv.Atoi(fields[1])
		if pid != self && ppid != self {
			continue
		}
		utime, err1 := strconv.ParseFloat(fields[11], 64)
		stime, err2 := strconv.ParseFloat(fields[12], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("parsing %s: %q", path, s)
		}
		name := comm
		if pid == self {
			name = "test+scheduler"
		}
		out[name] += (utime + stime) / clockTicks
	}
	return out, nil
}

// apiserverWrites counts kube-apiserver's write requests so far, by verb and
// resource ("PATCH pods/status"), from its own apiserver_request_total.
// Unlike time, the count of writes a batch makes does not move with the
// machine's load: it says what a profile asks of the apiserver.
func apiserverWrites(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading kube-apiserver's metrics: %w", err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labelText, valueText, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		labels := map[string]string{}
		for pair := range strings.SplitSeq(labelText, ",") {
			if k, v, ok := strings.Cut(pair, "="); ok {
				labels[k] = strings.Trim(v, `"`)
			}
		}
		switch labels["verb"] {
		case "GET", "LIST", "WATCH", "CONNECT":
			continue
		}
		value, err := strconv.ParseFloat(strings.TrimSpace(valueText), 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		resource := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			resource += "/" + sub
		}
		out[labels["verb"]+" "+resource] += value
	}
	return out, nil
}

// settle waits, up to a minute, until the apiserver, etcd and this process
// together use less than a tenth of a core over half a second, and returns
// how long that took. Every batch then starts from a quiet control plane
// rather than on the tail of the previous batch's deletions and the new
// scheduler's initial lists, which would fall on whichever profile comes
// next.
func settle() (time.Duration, error) {
	const window, idle = 500 * time.Millisecond, 0.1
	start := time.Now()
	for time.Since(start) < time.Minute {
		before, err := cpuTimes()
		if err != nil {
			return 0, err
		}
		time.Sleep(window) // the sampling window itself: CPU time is measured across it
		after, err := cpuTimes()
		if err != nil {
			return 0, err
		}
		var used float64
		for k, v := range after {
			used += v - before[k]
		}
		if used/window.Seconds() < idle {
			break
		}
	}
	return time.Since(start), nil
}
