package atomicfile_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast-io/holdfast/internal/atomicfile"
)

// names lists dir, so a test sees every temporary file left behind.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteLeavesTheContentWithItsModeAndNoTemporaryFile(t *testing.T) {
	for name, tc := range map[string]struct {
		old  *string // content of the target before the write, nil for none
		perm os.FileMode
		data string
	}{
		"new host file":              {perm: 0o644, data: "server\n"},
		"new runtime state file":     {perm: 0o600, data: `{"unit":"press"}`},
		"mode not masked by umask":   {perm: 0o666, data: "x"},
		"overwrite a longer file":    {old: ptr("a much longer old content\n"), perm: 0o644, data: "agent\n"},
		"overwrite with a new mode":  {old: ptr("old"), perm: 0o600, data: "new"},
		"empty content is a content": {old: ptr("old"), perm: 0o644, data: ""},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "role")
			if tc.old != nil {
				if err := os.WriteFile(target, []byte(*tc.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := atomicfile.Write(dir, "role", []byte(tc.data), tc.perm); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.data {
				t.Fatalf("target holds %q, want %q", got, tc.data)
			}
			info, err := os.Stat(target)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode() != tc.perm {
				t.Fatalf("target mode %v, want %v", info.Mode(), tc.perm)
			}
			if n := names(t, dir); !slices.Equal(n, []string{"role"}) {
				t.Fatalf("directory holds %v, want only the target", n)
			}
		})
	}
}

// TestOverwriteReplacesTheFileWhole checks the replacement is a rename, not
// a write in place: a reader that opened the old file before the write reads
// the old content whole after it, never a truncated or mixed one.
func TestOverwriteReplacesTheFileWhole(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "state.json")
	old := strings.Repeat("old ", 1024)
	if err := atomicfile.Write(dir, "state.json", []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := atomicfile.Write(dir, "state.json", []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(reader)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != old {
		t.Fatalf("a reader of the old file got %d bytes starting %q, want the old content whole", len(got), got[:min(len(got), 8)])
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("target holds %q, want the new content", b)
	}
}

// TestFailedWriteNamesThePathAndLeavesTheOldContent makes the write fail at
// each step it can fail at here (we run as root, so a read-only directory
// does not refuse us) and checks the error names the target, the target is
// untouched and no temporary file is left.
func TestFailedWriteNamesThePathAndLeavesTheOldContent(t *testing.T) {
	for name, tc := range map[string]struct {
		// setup prepares dir and returns the directory Write is given.
		setup func(t *testing.T, dir string) string
		// write runs Write, with any process limit it needs around it.
		write func(dir string) error
		// check asserts the target is as it was.
		check func(t *testing.T, dir string)
	}{
		"missing directory": {
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "absent") },
			write: func(dir string) error { return atomicfile.Write(dir, "role", []byte("agent\n"), 0o644) },
			check: func(t *testing.T, dir string) {
				if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the missing directory was created (stat: %v)", err)
				}
			},
		},
		"target is a directory (rename fails)": {
			setup: func(t *testing.T, dir string) string {
				if err := os.Mkdir(filepath.Join(dir, "role"), 0o755); err != nil {
					t.Fatal(err)
				}
				return oldFile(t, dir, filepath.Join("role", "keep"), "kept")
			},
			write: func(dir string) error { return atomicfile.Write(dir, "role", []byte("agent\n"), 0o644) },
			check: func(t *testing.T, dir string) {
				if got, err := os.ReadFile(filepath.Join(dir, "role", "keep")); string(got) != "kept" {
					t.Fatalf("the directory's file holds %q (%v)", got, err)
				}
				if n := names(t, dir); !slices.Equal(n, []string{"role"}) {
					t.Fatalf("directory holds %v, want only the target: the temporary file must be removed", n)
				}
			},
		},
		"file size limit (write fails partway)": {
			setup: func(t *testing.T, dir string) string { return oldFile(t, dir, "role", "server\n") },
			write: func(dir string) error {
				// The soft limit only, so the test can raise it again; Go
				// ignores SIGXFSZ, so the write returns EFBIG.
				var lim syscall.Rlimit
				if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
					return err
				}
				low := lim
				low.Cur = 1024
				if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &low); err != nil {
					return err
				}
				defer func() { _ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim) }()
				return atomicfile.Write(dir, "role", []byte(strings.Repeat("x", 4096)), 0o644)
			},
			check: func(t *testing.T, dir string) {
				if got, err := os.ReadFile(filepath.Join(dir, "role")); string(got) != "server\n" {
					t.Fatalf("target holds %d bytes starting %q (%v), want the old content", len(got), got[:min(len(got), 8)], err)
				}
				if n := names(t, dir); !slices.Equal(n, []string{"role"}) {
					t.Fatalf("directory holds %v, want only the target: the temporary file must be removed", n)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := tc.setup(t, t.TempDir())
			err := tc.write(dir)
			if err == nil {
				t.Fatal("write succeeded, want an error")
			}
			t.Log(err)
			if want := filepath.Join(dir, "role"); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %s", err, want)
			}
			tc.check(t, dir)
		})
	}
}

func ptr(s string) *string { return &s }

// oldFile writes dir/name as the content a failed write must leave, and
// returns dir.
func oldFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
