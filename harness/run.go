package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Options configure one evaluation run.
type Options struct {
	Python     string // interpreter (FindPython)
	ModelDir   string // source checkpoint
	PackageDir string // xpuinject package
	PackedDir  string // xpuinject pack output
	OutDir     string // where eval.json (and the report) go
	Device     string // auto|cuda|xpu|cpu
	TextFile   string // "" = the shipped prose
	Tokens     int    // 0 = driver default
	GenTokens  int    // 0 = driver default
	Latency    string // auto|eager|graph|both|off
	Repeats    int    // 0 = driver default
	// Progress receives the driver's progress lines (stderr of the run).
	Progress io.Writer
	// Env is the process environment (os.Environ() in production).
	Env []string
}

// Driver exit codes (eval_driver.py).
const (
	driverBadArgs   = 2
	driverMissing   = 3
	driverInjection = 4
	driverEval      = 5
)

// ErrInjection is returned when the shim could not inject the package (the message
// names the layer).
var ErrInjection = errors.New("harness: injection failed")

// Run writes the driver, shim and text into OutDir/.eval, runs the driver and reads
// OutDir/eval.json back.
func Run(ctx context.Context, o Options) (*Result, error) {
	for _, d := range []struct{ flag, path string }{{"model", o.ModelDir}, {"package", o.PackageDir}, {"packed", o.PackedDir}} {
		if st, err := os.Stat(d.path); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("harness: %s folder %q does not exist", d.flag, d.path)
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	work := filepath.Join(o.OutDir, ".eval")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	for _, name := range []string{"eval_driver.py", "xpuinject_shim.py", "prose.txt"} {
		b, err := Python.ReadFile("python/" + name)
		if err != nil {
			return nil, fmt.Errorf("harness: embedded %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
	}
	out := filepath.Join(o.OutDir, "eval.json")
	os.Remove(out) // never read a stale result
	text := o.TextFile
	if text == "" {
		text = filepath.Join(work, "prose.txt")
	}
	args := []string{filepath.Join(work, "eval_driver.py"),
		"--model", o.ModelDir, "--package", o.PackageDir, "--packed", o.PackedDir,
		"--out", out, "--device", firstNonEmpty(o.Device, "auto"), "--text", text,
		"--latency", firstNonEmpty(o.Latency, "auto")}
	if o.Tokens > 0 {
		args = append(args, "--tokens", strconv.Itoa(o.Tokens))
	}
	if o.GenTokens > 0 {
		args = append(args, "--gen-tokens", strconv.Itoa(o.GenTokens))
	}
	if o.Repeats > 0 {
		args = append(args, "--repeats", strconv.Itoa(o.Repeats))
	}
	cmd := exec.CommandContext(ctx, o.Python, args...)
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(env, "PYTHONUNBUFFERED=1")
	if o.Device == "cpu" {
		// The kernels run on the CPU only under Triton's interpreter; it must be set
		// before triton is imported, so it goes in the environment.
		env = append(env, "TRITON_INTERPRET=1")
	}
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = o.Progress
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("harness: starting %s: %w", o.Python, err)
	}
	var lastErr string
	var tail []string
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "xpuinject-eval: error: ") {
			lastErr = strings.TrimPrefix(line, "xpuinject-eval: error: ")
		}
		tail = append(tail, line)
		if len(tail) > 30 {
			tail = tail[1:]
		}
		if o.Progress != nil && strings.HasPrefix(line, "xpuinject-eval: ") {
			fmt.Fprintln(o.Progress, "  "+strings.TrimPrefix(line, "xpuinject-eval: "))
		}
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if werr != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitCode()
		}
		msg := lastErr
		if msg == "" {
			msg = strings.Join(tail, "\n")
		}
		switch code {
		case driverMissing:
			return nil, fmt.Errorf("%w: %s", ErrMissing, msg)
		case driverInjection:
			return nil, fmt.Errorf("%w: %s", ErrInjection, msg)
		case driverBadArgs:
			return nil, fmt.Errorf("harness: bad input: %s", msg)
		default:
			return nil, fmt.Errorf("harness: eval driver failed (exit %d): %s", code, msg)
		}
	}
	return ReadResult(out)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
