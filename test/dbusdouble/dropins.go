package dbusdouble

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// readDropIns reads the drop-ins' Environment= and ExecCondition= lines
// (a command line split at spaces, a double-quoted word unquoted).
func readDropIns(dir string) (map[string]string, [][]string) {
	env := map[string]string{}
	var conds [][]string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return env, nil
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".conf") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			line := strings.TrimSpace(s.Text())
			if c, ok := strings.CutPrefix(line, "ExecCondition="); ok {
				var argv []string
				for _, w := range strings.Fields(c) {
					if uq, err := strconv.Unquote(w); err == nil {
						w = uq
					}
					argv = append(argv, w)
				}
				if len(argv) > 0 {
					conds = append(conds, argv)
				}
				continue
			}
			v, ok := strings.CutPrefix(line, "Environment=")
			if !ok {
				continue
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			if k, val, ok := strings.Cut(v, "="); ok {
				env[k] = val
			}
		}
		f.Close()
	}
	return env, conds
}
