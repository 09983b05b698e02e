package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/outdir"
)

// Version is the xpuinject version, recorded in plans, packed checkpoints and packages.
var Version = "0.1.0"

// Factory holds what commands need from the outside world, so tests can replace it.
// Fields are set by NewFactory; tests build their own.
type Factory struct {
	In     io.Reader
	Out    io.Writer // results
	ErrOut io.Writer // progress, warnings
	// Getenv reads the environment (tests substitute a map).
	Getenv func(string) string
	// IsTerminal reports whether ErrOut is a terminal (progress bars only then).
	IsTerminal bool
	// Term is that terminal, for its width; nil when ErrOut is none.
	Term *os.File
}

// NewFactory returns the Factory of a real process.
func NewFactory(in io.Reader, out, errOut io.Writer) *Factory {
	f := &Factory{In: in, Out: out, ErrOut: errOut, Getenv: os.Getenv}
	if fi, ok := errOut.(*os.File); ok && isTerminal(fi) {
		f.IsTerminal, f.Term = true, fi
	}
	return f
}

// redacting hides the Hub token in what a command prints. The Hub client redacts every
// answer as it arrives; this also covers what came in as file content (a config value)
// or from a child process, written in one piece.
type redacting struct {
	w     io.Writer
	token string
}

func (r redacting) Write(p []byte) (int, error) {
	s := hub.Redact(r.token, string(p))
	if len(s) == len(p) && s == string(p) {
		return r.w.Write(p)
	}
	if _, err := io.WriteString(r.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// maxColumns is the widest line of any help text or message.
const maxColumns = 100

// Exit codes, decided here only.
const (
	exitOK          = 0
	exitError1      = 1 // any failure
	exitUsage       = 2 // bad flags or arguments, an unknown command, an --out that may not be written
	exitInterrupted = 130
)

// runContextHook, when set, is given the run's context (tests that pause a run until a
// signal has cancelled it).
var runContextHook func(context.Context)

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, f *Factory) int {
	// SIGTERM too: a cancelled run removes its temporaries and stops its Python child.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if runContextHook != nil {
		runContextHook(ctx)
	}
	if tok := hub.NewClient(f.Getenv).Token; tok != "" {
		g := *f
		g.Out, g.ErrOut = redacting{f.Out, tok}, redacting{f.ErrOut, tok}
		f = &g
	}
	root := NewRootCmd(f)
	root.SetArgs(args)
	root.SetIn(f.In)
	root.SetOut(f.Out)
	root.SetErr(f.ErrOut)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	msg := "xpuinject: " + err.Error()
	if f.IsTerminal {
		// On a terminal every line fits maxColumns; logs keep one line per message for grep.
		msg = wrapLines(msg, maxColumns)
	}
	fmt.Fprintln(f.ErrOut, msg)
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case isUsageError(err), errors.Is(err, outdir.ErrRefused), errors.Is(err, outdir.ErrExists):
		// An --out that may not be written is a bad argument, like a bad flag value.
		return exitUsage
	}
	return exitError1
}

// NewRootCmd builds the command tree. One file per command: each adds itself here.
func NewRootCmd(f *Factory) *cobra.Command {
	root := newPipelineCmd(f)
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.Version = Version
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err} })
	root.SuggestionsMinimumDistance = 2
	root.AddCommand(
		newFetchCmd(f),
		newPlanCmd(f),
		newPackCmd(f),
		newPackageCmd(f),
		newEvalCmd(f),
		newReportCmd(f),
		newGenerateCmd(f),
		newPushCmd(f),
		newKernelsCmd(f),
	)
	root.SetHelpCommand(newHelpCmd(root))
	// Flag descriptions wrap to fit maxColumns (cobra's template, pflag's wrapping).
	root.SetUsageTemplate(strings.ReplaceAll(root.UsageTemplate(), ".FlagUsages |",
		fmt.Sprintf(".FlagUsagesWrapped %d |", maxColumns)))
	return root
}

// newHelpCmd is cobra's help command, but an unknown topic is a usage error (cobra prints the
// root's help and exits 0).
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if len(args) > 0 && (err != nil || len(rest) > 0 || cmd == root) {
				msg := fmt.Sprintf("unknown help topic %q", strings.Join(args, " "))
				if sugg := root.SuggestionsFor(args[0]); len(sugg) > 0 {
					msg += "\n\nDid you mean this?\n\t" + strings.Join(sugg, "\n\t")
				}
				return &usageError{errors.New(msg)}
			}
			return cmd.Help()
		},
	}
}

type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func isUsageError(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// argHelp says what each positional argument of the commands' Use lines is, so that a
// missing one is named with what to give.
var argHelp = map[string]string{
	"MODEL":          "a model folder, a preset or org/name[@revision]",
	"DIR":            "a run folder (out/<name>) or the package folder in it",
	"PKG_OR_RUN_DIR": "a run folder (out/<name>) or the package folder in it",
}

// exactArgs is cobra.ExactArgs with a usage error that names the arguments (the upper-case
// words of the command's Use line) and what each is.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		var names []string
		for _, w := range strings.Fields(cmd.Use)[1:] {
			if strings.HasPrefix(w, "-") {
				break
			}
			names = append(names, w)
		}
		usage := fmt.Sprintf("(usage: %s; see '%s --help')", cmd.UseLine(), cmd.CommandPath())
		switch {
		case len(args) < n && len(args) < len(names):
			missing := names[len(args)]
			what := ""
			if h, ok := argHelp[missing]; ok {
				what = ": " + h
			}
			return &usageError{fmt.Errorf("%s: missing %s%s\n%s", cmd.Name(), missing, what, usage)}
		case n == 0:
			return &usageError{fmt.Errorf("%s takes no arguments; got %q\n%s", cmd.Name(), args, usage)}
		default:
			return &usageError{fmt.Errorf("%s takes %d argument(s), %s; got %d: %q\n%s",
				cmd.Name(), n, strings.Join(names, " "), len(args), args, usage)}
		}
	}
}

// wrapLines breaks every line of s longer than width at its last space within width,
// continuing two spaces in; a word longer than width (a long path) stays whole on its line.
func wrapLines(s string, width int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for utf8.RuneCountInString(line) > width {
			r := []rune(line)
			cut := strings.LastIndex(string(r[:width+1]), " ")
			if cut <= 2 { // the first word alone is too long: it gets a line of its own
				next := strings.Index(string(r[width+1:]), " ")
				if next < 0 {
					break
				}
				cut = len(string(r[:width+1])) + next
			}
			out = append(out, line[:cut])
			line = "  " + strings.TrimLeft(line[cut:], " ")
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}
