package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/reference.md is what the code says now: every label, annotation,
// condition, reason, metric and flag.
func TestReferenceIsUpToDate(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("docs/reference.md is stale (run make docs); first difference at line %d:\n have %q\n want %q", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("docs/reference.md is stale (run make docs): %d lines, want %d", len(gl), len(wl))
	}
	for _, must := range []string{"`holdfast.io/failover-confirm-fenced`", "`LeadershipHoldOff`", "### kubectl-holdfast", "--confirm-fenced"} {
		if !bytes.Contains(want, []byte(must)) {
			t.Errorf("the reference lacks %s", must)
		}
	}
}

func TestRedactHostReplacesWholeWordsOnly(t *testing.T) {
	in := "  --identity string (default vm)\n  -vmodule value\n  --peer (default vm.local)"
	want := "  --identity string (default <hostname>)\n  -vmodule value\n  --peer (default <hostname>.local)"
	if got := redactHost(in, "vm"); got != want {
		t.Errorf("redactHost:\n got %q\nwant %q", got, want)
	}
}
