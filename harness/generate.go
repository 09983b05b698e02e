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
	"strconv"
	"strings"
)

// GenerateOptions configure one `xpuinject generate` run of the generate driver.
type GenerateOptions struct {
	Python       string
	ModelDir     string // source checkpoint (with its tokenizer)
	PackageDir   string
	PackedDir    string
	Prompt       string
	MaxNewTokens int
	Stock        bool   // also generate with the stock model
	Device       string // auto|cuda|xpu|cpu
	DoSample     bool
	Temperature  float64 // 0: the model's generation config
	TopK         int     // -1: the model's generation config
	TopP         float64 // 0: the model's generation config
	Seed         int
	// Text receives the generated text as it comes (the driver's stdout).
	Text io.Writer
	// Progress receives the driver's progress lines.
	Progress io.Writer
	Env      []string
}

// Generation is one model's result.
type Generation struct {
	Tokens     []int   `json:"tokens"`
	NewTokens  int     `json:"new_tokens"`
	Text       string  `json:"text"`
	MSPerToken *Num    `json:"ms_per_token"` // median decode step, device time
	TokensPerS *Num    `json:"tokens_per_s"` // 1000 / ms_per_token
	PrefillMS  *Num    `json:"prefill_ms"`
	WallS      Num     `json:"wall_s"` // the whole call, streaming and capture included
	Graphs     bool    `json:"graphs"`
	Reason     *string `json:"reason"` // why not graphs
	CaptureS   Num     `json:"capture_s"`
	CacheLen   int     `json:"cache_len"`
}

// GenerateResult is the driver's result file.
type GenerateResult struct {
	Device       string      `json:"device"`
	PromptTokens int         `json:"prompt_tokens"`
	Injected     *Generation `json:"injected"`
	Stock        *Generation `json:"stock,omitempty"`
}

// Generate runs the generate driver: the text streams to o.Text while it is generated, the
// numbers come back in the result.
func Generate(ctx context.Context, o GenerateOptions) (*GenerateResult, error) {
	work, err := os.MkdirTemp("", "xpuinject-generate-")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	defer os.RemoveAll(work)
	for _, name := range append([]string{"generate_driver.py"}, driverModules...) {
		b, err := Python.ReadFile("python/" + name)
		if err != nil {
			return nil, fmt.Errorf("harness: embedded %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
	}
	out := filepath.Join(work, "result.json")
	args := []string{filepath.Join(work, "generate_driver.py"),
		"--model", o.ModelDir, "--package", o.PackageDir, "--packed", o.PackedDir,
		"--prompt", o.Prompt, "--max-new-tokens", strconv.Itoa(o.MaxNewTokens),
		"--device", cmp.Or(o.Device, "auto"), "--seed", strconv.Itoa(o.Seed), "--out", out}
	if o.Stock {
		args = append(args, "--stock")
	}
	if o.DoSample {
		args = append(args, "--do-sample")
	}
	if o.Temperature > 0 {
		args = append(args, "--temperature", strconv.FormatFloat(o.Temperature, 'g', -1, 64))
	}
	if o.TopK >= 0 {
		args = append(args, "--top-k", strconv.Itoa(o.TopK))
	}
	if o.TopP > 0 {
		args = append(args, "--top-p", strconv.FormatFloat(o.TopP, 'g', -1, 64))
	}
	cmd := exec.CommandContext(ctx, o.Python, args...)
	cmd.Env = driverEnv(o.Env, o.Device)
	cmd.Stdout = o.Text
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
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
		if strings.HasPrefix(line, "xpuinject-generate: error: ") {
			lastErr = strings.TrimPrefix(line, "xpuinject-generate: error: ")
		}
		tail = append(tail, line)
		if len(tail) > 30 {
			tail = tail[1:]
		}
		if o.Progress != nil && strings.HasPrefix(line, "xpuinject-generate: ") {
			fmt.Fprintln(o.Progress, strings.TrimPrefix(line, "xpuinject-generate: "))
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
			return nil, fmt.Errorf("%w: %s", ErrBadInput, msg)
		default:
			return nil, fmt.Errorf("harness: generate driver failed (exit %d): %s", code, msg)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("harness: generate driver wrote no result: %w", err)
	}
	var r GenerateResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("harness: generate result: %w", err)
	}
	if r.Injected == nil {
		return nil, fmt.Errorf("harness: generate result has no injected run")
	}
	return &r, nil
}

// ErrBadInput is returned when the driver refused its input (a prompt, a count).
var ErrBadInput = errors.New("harness: bad input")
