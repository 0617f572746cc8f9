package app

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
)

func TestHelpDocumentsEveryFlagWithItsDefaultAndItsInequality(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help exited %d: %s", code, errOut.String())
	}
	help := out.String()
	fs := NewFlagSet()
	if missing := Documented(fs); len(missing) > 0 {
		t.Fatalf("flags without a usage or an inequality: %v", missing)
	}
	fs.VisitAll(func(f *flag.Flag) {
		i := strings.Index(help, "\n  --"+f.Name+" ")
		if i < 0 {
			t.Errorf("--help does not list --%s", f.Name)
			return
		}
		entry := help[i+1:]
		if next := strings.Index(entry, "\n  --"); next >= 0 {
			entry = entry[:next]
		}
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		if !strings.Contains(entry, "(default "+def+")") {
			t.Errorf("--%s: no default %q in %q", f.Name, def, entry)
		}
		if !strings.Contains(entry, "Inequality: ") {
			t.Errorf("--%s: no inequality in %q", f.Name, entry)
		}
	})
	for _, want := range []string{"--leader-election-lease-duration duration (default 6s)", "--leader-election-renew-deadline duration (default 4s)",
		"--leader-election-retry-period duration (default 1s)", "--apiserver-read-idle-timeout duration (default 2s)",
		"--apiserver-ping-timeout duration (default 2s)", "--lease-stand-down duration (default 1m30s)",
		"2s + 2s + 2 x 2.2s + 6s + 500ms + 5s = 19.9s <= 20s"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestBadFlagsAreRefusedWithTheFlagNameAndNothingStarts(t *testing.T) {
	wantRefused(t, []refusal{
		{[]string{"--role=nope"}, `--role: "nope": must be one of uninstall-guard, units, voters`},
		{[]string{"--role=units", "--apiserver-read-idle-timeout=0s"}, "--apiserver-read-idle-timeout"},
		{[]string{"--role=units", "--leader-election-lease-duration=3s"}, "--leader-election-lease-duration"},
		{[]string{"--role=units", "--lease-stand-down=-1s"}, "--lease-stand-down (-1s) must be between 0 and 10m0s"},
		{[]string{"--role=units", "--lease-stand-down=90m"}, "--lease-stand-down (1h30m0s) must be between 0 and 10m0s"},
		{[]string{"--role=units"}, "--lease-ca-dir is required: the lease channel is mutual TLS (--insecure-plaintext-lease turns it off and lets anyone grant; unsafe)"},
		{[]string{"--role=units", "--lease-ca-dir=/etc/holdfast/lease-ca", "--insecure-plaintext-lease"}, "--insecure-plaintext-lease must not be given with --lease-ca-dir"},
	})
}

// refusal is a command line and what its refusal must say.
type refusal struct {
	args []string
	want string
}

// wantRefused runs each command line: exit 2, its output saying want.
func wantRefused(t *testing.T, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		stderr := captureStderr(t, func() {
			if code := Main(context.Background(), tc.args, &out, &errOut); code != 2 {
				t.Errorf("%v: exit %d, want 2", tc.args, code)
			}
		})
		if got := errOut.String() + stderr; !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q does not say %q", tc.args, got, tc.want)
		}
	}
}

func TestHelpListsTheUninstallGuardRole(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	for _, want := range []string{"  uninstall-guard  the chart's pre-delete hook", "--release string (default holdfast)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}
