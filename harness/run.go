package harness

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xpuinject/xpuinject/inject/outdir"
)

// Options configure one evaluation run.
type Options struct {
	Python     string // interpreter (FindPython)
	ModelDir   string // source checkpoint
	PackageDir string // xpuinject package
	PackedDir  string // xpuinject pack output
	OutDir     string // the eval folder: eval.json, report.md, plots (an outdir output)
	Tool       string // "xpuinject <version>", recorded in the folder's marker
	Device     string // auto|cuda|xpu|cpu
	// Stages is the number of devices the bf16 models are spread over as pipeline stages, one
	// driver process each under torchrun (torch.distributed); 0 and 1 run one process. On the
	// CPU the processes talk over gloo.
	Stages    int
	TextFile  string // "" = the shipped prose
	Tokens    int    // 0 = driver default
	GenTokens int    // 0 = driver default
	Latency   string // auto|eager|graph|both|off
	Repeats   int    // 0 = driver default
	// Autotune autotunes the kernel classes the GPU's tuned configs do not cover (the driver's
	// XPUINJECT_AUTOTUNE=1) instead of giving them a config derived from their shape.
	Autotune bool
	// DecodeSteps is how many decode steps each decode point times in a loop; 0 = driver default.
	DecodeSteps int
	// LatencyPoints is the driver's points preset, quick or full ("": quick); Prefill and
	// DecodeBatches, when given, replace its prompt lengths and decode batch sizes.
	LatencyPoints string
	Prefill       []int
	DecodeBatches []int
	// NoCompileAhead keeps the compiled paths' torch.compile in the latency stage instead of
	// helper processes beside the earlier stages (the driver's --compile-ahead off).
	NoCompileAhead bool
	// Before are the command's own stages before the eval (the pipeline's plan, pack and
	// package), and Start when the command started: the report's "Where the time went" then
	// covers the whole run. A zero Start is this eval's own start.
	Before []StageTime
	Start  time.Time
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

// ErrInjection is returned when the package could not inject itself (the message names
// the layer).
var ErrInjection = errors.New("harness: injection failed")

// Run evaluates and writes the eval folder OutDir: the driver and text under
// .eval/, the driver's eval.json, report.md and the plots. The folder is assembled aside
// and put in place only when all of it is written (package outdir); an earlier eval
// there is replaced, any other folder refused. The driver runs in its own process group
// and dies with this process, also when this process is killed.
func Run(ctx context.Context, o Options) (*Result, *ReportFiles, error) {
	began := time.Now()
	for _, d := range []struct{ flag, path string }{{"model", o.ModelDir}, {"package", o.PackageDir}, {"packed", o.PackedDir}} {
		if st, err := os.Stat(d.path); err != nil || !st.IsDir() {
			return nil, nil, fmt.Errorf("harness: %s folder %q does not exist", d.flag, d.path)
		}
	}
	tx, err := outdir.Begin(o.OutDir, outdir.Options{Kind: outdir.KindEval, Tool: o.Tool, Replace: true, Inputs: []outdir.Input{
		{Path: o.ModelDir, What: "the model"}, {Path: o.PackageDir, What: "the package"},
		{Path: o.PackedDir, What: "the packed checkpoint"}, {Path: o.TextFile, What: "the --text file"},
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("harness: %w", err)
	}
	defer tx.Abort() // nothing once committed
	for _, name := range append(slices.Clone(driverModules), "prose.txt") {
		b, err := Python.ReadFile("python/" + name)
		if err != nil {
			return nil, nil, fmt.Errorf("harness: embedded %s: %w", name, err)
		}
		if err := tx.WriteFile(".eval/"+name, b); err != nil {
			return nil, nil, fmt.Errorf("harness: %w", err)
		}
	}
	out := tx.Path("eval.json")
	var args []string
	if o.Stages > 1 {
		// torchrun on this host: a free rendezvous port, one worker per stage, and the other
		// workers stopped when one fails
		args = append(args, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
			"--nproc-per-node", strconv.Itoa(o.Stages))
	}
	args = append(args, tx.Path(".eval/eval_driver.py"),
		"--model", o.ModelDir, "--package", o.PackageDir, "--packed", o.PackedDir,
		"--out", out, "--device", cmp.Or(o.Device, "auto"),
		"--latency", cmp.Or(o.Latency, "auto"), "--latency-points", cmp.Or(o.LatencyPoints, "quick"))
	if o.NoCompileAhead {
		args = append(args, "--compile-ahead", "off")
	}
	if o.TextFile != "" {
		args = append(args, "--text", o.TextFile)
	}
	if o.Tokens > 0 {
		args = append(args, "--tokens", strconv.Itoa(o.Tokens))
	}
	if o.GenTokens > 0 {
		args = append(args, "--gen-tokens", strconv.Itoa(o.GenTokens))
	}
	if len(o.Prefill) > 0 {
		args = append(args, "--prefill", joinInts(o.Prefill))
	}
	if len(o.DecodeBatches) > 0 {
		args = append(args, "--decode-batches", joinInts(o.DecodeBatches))
	}
	if o.Repeats > 0 {
		args = append(args, "--repeats", strconv.Itoa(o.Repeats))
	}
	if o.DecodeSteps > 0 {
		args = append(args, "--decode-steps", strconv.Itoa(o.DecodeSteps))
	}
	cmd := exec.CommandContext(ctx, o.Python, args...)
	env := driverEnv(o.Env, o.Device)
	if o.Autotune {
		env = append(env, "XPUINJECT_AUTOTUNE=1")
	}
	if o.Stages > 1 {
		env = append(env, stageEnv(env, o.Device, o.Stages)...)
	}
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	// The driver's stdout goes to Progress: a file is handed to the child; any other writer is
	// fed by exec's own goroutine while the loop below writes progress lines to it, so both go
	// through one lock.
	var progress io.Writer = io.Discard
	switch w := o.Progress.(type) {
	case nil:
	case *os.File:
		progress = w
	default:
		progress = &lockedWriter{w: w}
	}
	cmd.Stdout = progress
	child := startChild(cmd)
	defer child.done()
	spawned := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("harness: starting %s: %w", o.Python, err)
	}
	var lastErr string
	exitCode := -1 // a worker's own exit code, which torchrun replaces with 1
	var tail []string
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "xpuinject-eval: error: ") && lastErr == "" {
			// the first error: under torchrun the other workers' follow from it
			lastErr = strings.TrimPrefix(line, "xpuinject-eval: error: ")
		}
		if c, ok := strings.CutPrefix(line, "xpuinject-eval: exit-code: "); ok {
			if n, err := strconv.Atoi(c); err == nil && exitCode < 0 {
				exitCode = n
			}
			continue
		}
		tail = append(tail, line)
		if len(tail) > 30 {
			tail = tail[1:]
		}
		if o.Progress != nil && strings.HasPrefix(line, "xpuinject-eval: ") {
			fmt.Fprintln(progress, "  "+strings.TrimPrefix(line, "xpuinject-eval: "))
		}
	}
	werr := cmd.Wait()
	exited := time.Now()
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if werr != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitCode()
		}
		if exitCode >= 0 {
			code = exitCode
		}
		msg := lastErr
		if msg == "" {
			msg = strings.Join(tail, "\n")
		}
		switch code {
		case driverMissing:
			return nil, nil, fmt.Errorf("%w: %s", ErrMissing, msg)
		case driverInjection:
			return nil, nil, fmt.Errorf("%w: %s", ErrInjection, msg)
		case driverBadArgs:
			return nil, nil, fmt.Errorf("harness: bad input: %s", msg)
		default:
			return nil, nil, fmt.Errorf("harness: eval driver failed (exit %d): %s", code, msg)
		}
	}
	res, err := ReadResult(out)
	if err != nil {
		return nil, nil, err
	}
	if err := addTimings(res, out, o, began, spawned, exited); err != nil {
		return nil, nil, err
	}
	files, err := WriteReport(res, tx)
	if err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("harness: %w", err)
	}
	files.Markdown = filepath.Join(o.OutDir, files.Markdown)
	for i, p := range files.Plots {
		files.Plots[i] = filepath.Join(o.OutDir, p)
	}
	return res, files, nil
}

// addTimings completes the driver's timings with the command's: its stages before the eval,
// the eval's set-up until the driver started, the driver's end after its timings (writing
// eval.json, the interpreter's exit), and the wall from the command's start; eval.json gets the
// same object.
func addTimings(res *Result, path string, o Options, began, spawned, exited time.Time) error {
	t := res.Timings
	if t == nil {
		return nil // a driver that records none
	}
	start := o.Start
	if start.IsZero() {
		start = began
	}
	up := time.Unix(0, int64(t.StartedAt*1e9)).Sub(spawned).Seconds()
	stages := append(slices.Clone(o.Before), StageTime{Stage: "eval set-up (checks, driver files)", S: Num(spawned.Sub(began).Seconds())})
	if up > 0 {
		stages = append(stages, StageTime{Stage: "python interpreter start", S: Num(up)})
	}
	t.Stages = append(stages, t.Stages...)
	ended := time.Unix(0, int64((t.StartedAt+float64(t.DriverS))*1e9))
	if down := exited.Sub(ended).Seconds(); down > 0 {
		t.Stages = append(t.Stages, StageTime{Stage: "eval driver: write eval.json and exit", S: Num(down)})
	}
	t.WallS = Num(time.Since(start).Seconds())
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("harness: %s: %w", path, err)
	}
	if doc["timings"], err = json.Marshal(t); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if b, err = json.MarshalIndent(doc, "", "  "); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// stageEnv is what the torchrun workers of a pipeline need beyond env: CPU threads shared among
// the workers (torchrun would give each one), and on the CPU no visible GPU (transformers puts
// pipeline stages on the accelerator it finds).
func stageEnv(env []string, device string, stages int) []string {
	var add []string
	if !hasEnv(env, "OMP_NUM_THREADS") {
		add = append(add, "OMP_NUM_THREADS="+strconv.Itoa(max(1, runtime.NumCPU()/stages)))
	}
	if device == "cpu" {
		add = append(add, "CUDA_VISIBLE_DEVICES=")
	}
	return add
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// driverEnv is the environment of a Python driver: base (nil: this process's), unbuffered output,
// and on the CPU Triton's interpreter, which must be set before triton is imported.
func driverEnv(base []string, device string) []string {
	env := base
	if env == nil {
		env = os.Environ()
	}
	env = append(env[:len(env):len(env)], "PYTHONUNBUFFERED=1")
	if device == "cpu" {
		env = append(env, "TRITON_INTERPRET=1")
	}
	return env
}
