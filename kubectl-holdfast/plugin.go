// Package plugin is kubectl-holdfast, the kubectl plugin an operator uses to
// see and steer holdfast: status, swap, failover, confirm-fenced and
// restart. It asks; the
// webhook and the controller decide. Every command exits with one of the
// codes below, so a script can tell a refusal from a typo from an outage.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/version"
)

// Exit codes. They are part of the plugin's interface: scripts branch on them.
const (
	// ExitOK: the request was accepted (and, with --wait, carried out).
	ExitOK = 0
	// ExitRefused: the cluster refused the request (webhook, validation or
	// RBAC, each reason printed), a swap gate fails now (each gate printed,
	// nothing created), or with --wait the controller's outcome was a
	// refusal, a rollback or an abandon.
	ExitRefused = 1
	// ExitUsage: a usage error, or a unit or node that does not exist or
	// cannot take the role asked of it. Nothing was sent.
	ExitUsage = 2
	// ExitUnavailable: the cluster could not be reached or answered with an
	// error that is neither a refusal nor a usage error. Retry later.
	ExitUnavailable = 3
	// ExitTimeout: --wait ran out of --timeout before an outcome. The request
	// stands and may still be carried out.
	ExitTimeout = 4
)

const exitCodesHelp = `Exit codes:
  0  accepted (with --wait: carried out)
  1  refused by the cluster (webhook, validation or RBAC; each reason printed),
     swap: a gate fails now (each gate printed with its field; nothing created),
     or with --wait refused, rolled back or abandoned by the controller
  2  usage error, unknown unit or node, or a node that cannot take the role
  3  the cluster could not be reached, or answered with another error
  4  --wait timed out before an outcome (the request stands)`

// Streams are where a command reads and writes.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// exitError carries an exit code and the message printed for it.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, a...)}
}

func refusedErr(format string, a ...any) error {
	return &exitError{code: ExitRefused, msg: fmt.Sprintf(format, a...)}
}

// apiErr turns an apiserver error into the exit code a script relies on:
// refusals (403, 422, 409 on create) are 1, everything else 3. what says what
// was being done, for the message.
func apiErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		switch {
		case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsAlreadyExists(err), apierrors.IsBadRequest(err):
			return &exitError{code: ExitRefused, msg: fmt.Sprintf("%s: refused:\n%s", what, reasons(st))}
		}
	}
	return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("%s: %v", what, err)}
}

// reasons prints the server's message and each cause on its own line.
func reasons(st apierrors.APIStatus) string {
	s := st.Status()
	lines := []string{"  " + s.Message}
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			if c.Field != "" {
				lines = append(lines, fmt.Sprintf("  - %s: %s", c.Field, c.Message))
			} else {
				lines = append(lines, "  - "+c.Message)
			}
		}
	}
	return strings.Join(lines, "\n")
}

// options are what every command shares.
type options struct {
	config  *genericclioptions.ConfigFlags
	streams Streams
	// now is the clock of request times (restart) and waits.
	now func() time.Time
	// poll is how often --wait reads the object.
	poll time.Duration

	client client.Client
}

func (o *options) connect() error {
	if o.client != nil {
		return nil
	}
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return usageErr("loading the kubeconfig: %v", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := holdfastv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("reaching the cluster: %v", err)}
	}
	o.client = c
	return nil
}

// namespace is the namespace of -n, else the kubeconfig context's.
func (o *options) namespace() (ns string, explicit bool, err error) {
	ns, explicit, err = o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, usageErr("reading the namespace from the kubeconfig: %v", err)
	}
	return ns, explicit, nil
}

// NewCommand builds `kubectl holdfast` and its subcommands.
func NewCommand(streams Streams) *cobra.Command {
	o := &options{
		config:  genericclioptions.NewConfigFlags(true),
		streams: streams,
		now:     time.Now,
		poll:    time.Second,
	}
	root := &cobra.Command{
		// kubectl runs the plugin as "kubectl holdfast": help and
		// completion say so through the display name.
		Use:         "holdfast",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl holdfast"},
		Version:     version.Get().String(),
		Short:       "See and steer holdfast: units, their control leases, and etcd voter swaps",
		Long: `kubectl holdfast shows what holdfast holds and asks it to move a role.

It asks; holdfast's webhook and controller decide. A refusal is printed with
every reason the cluster gave and exits 1.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Example: `  # What holds what: units, their bindings and leases; voters by etcd's vote; the swap in progress
  kubectl holdfast status

  # Replace the etcd voter on cp-3 with edge-7, and wait for the outcome
  kubectl holdfast swap cp-3 edge-7 --reason "disk latency" --wait

  # Move unit kiln-1 to node edge-2 after powering off its node
  kubectl holdfast failover kiln-1 --to edge-2 --confirm-fenced "powered off at the breaker"

  # Certify that kiln-1's runtime has stopped (its node powered off), where a wait needs it
  kubectl holdfast confirm-fenced kiln-1 --how "powered off at the breaker"

  # Resume kiln-1 after a Hold, once its runtime is ready
  kubectl holdfast restart kiln-1`,
	}
	// A plugin's completion reaches kubectl through the
	// kubectl_complete-holdfast script that calls __complete; a completion
	// command of its own would print a script that replaces kubectl's.
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetVersionTemplate("kubectl-holdfast {{.Version}}\n")
	// Without -v: kubectl's -v is log verbosity.
	root.Flags().Bool("version", false, "print the version of kubectl-holdfast")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.config.AddFlags(root.PersistentFlags())
	root.AddCommand(newStatusCommand(o), newSwapCommand(o), newFailoverCommand(o), newConfirmFencedCommand(o), newRestartCommand(o), newVersionCommand(o))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	return root
}

// Main runs the plugin and returns its exit code.
func Main(ctx context.Context, args []string, streams Streams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// cobra's own errors: unknown commands and argument counts.
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "arg(s)") ||
		strings.Contains(err.Error(), "flag") {
		return ExitUsage
	}
	return ExitUnavailable
}

// printObject prints v as JSON or YAML, as kubectl's -o does.
func printObject(w io.Writer, format string, v any) error {
	if format == "yaml" {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// VersionReport is what `version -o json|yaml` prints.
type VersionReport struct {
	APIVersion    string       `json:"apiVersion"`
	Kind          string       `json:"kind"`
	ClientVersion version.Info `json:"clientVersion"`
}

func newVersionCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl-holdfast",
		Long: `Print the version of kubectl-holdfast: its release, the commit it was built
from and its Go version. It reads nothing from the cluster.

` + exitCodesHelp,
		Example: `  kubectl holdfast version
  kubectl holdfast version -o json`,
		Args: exactArgs(0, 0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			in := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintf(o.streams.Out, "kubectl-holdfast %s\n", in)
				return err
			case "json", "yaml":
				return printObject(o.streams.Out, output, VersionReport{APIVersion: ReportAPIVersion, Kind: "VersionReport", ClientVersion: in})
			}
			return usageErr("--output: %q: must be json or yaml (or empty)", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	return cmd
}

// args validates positional arguments as usage errors (exit 2).
func exactArgs(min, max int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return usageErr("%s: want %s, got %d argument(s)\nSee '%s --help'.", cmd.Name(), names, len(args), cmd.CommandPath())
		}
		return nil
	}
}
