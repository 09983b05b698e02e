package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xpuinject/xpuinject/hub/hubtest"
	"github.com/xpuinject/xpuinject/inject/outdir"
)

// The fault matrix: bad inputs and failures of the world, each run through the CLI.
// Every case asserts the exit code, the message, and that every file that existed
// before the run is byte-identical afterwards and nothing was added (the whole test
// folder is hashed before and after).

type faultCase struct {
	name  string
	setup func(t *testing.T, root string) []string // prepares root, returns the CLI args
	env   map[string]string
	code  int
	want  []string // in stderr
	// sub runs the built binary under `ulimit -f blocks` instead of in-process.
	ulimitBlocks int
	// readOnly names a folder (relative to root) made read-only before the run.
	readOnly string
	maxTime  time.Duration
	// cacheOutside puts the Hub cache outside the checked folder (a failed fetch may
	// leave files there that the next fetch resumes or reuses).
	cacheOutside bool
}

// faultToken is the token of the matrix's Hub cases; no 8-character piece of it may be
// printed by any case.
const faultToken = "hf_Zq9XvB2kLw7RtYp4Nc8Ud3JmQ"

func tokenPiece(s string) string {
	for i := 0; i+8 <= len(faultToken); i++ {
		if strings.Contains(s, faultToken[i:i+8]) {
			return faultToken[i : i+8]
		}
	}
	return ""
}

func copyFixture(t *testing.T, name, to string) string {
	t.Helper()
	copyDir(t, filepath.Join(fixtures, name), to)
	return to
}

// prepared makes root/m (llama-tiny), root/pkg and root/packed (written by the CLI)
// and returns their paths.
func prepared(t *testing.T, root string, packArgs ...string) (m, pkg, packed string) {
	t.Helper()
	m = copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
	pkg, packed = filepath.Join(root, "pkg"), filepath.Join(root, "packed")
	if code, _, errOut := runCLI(t, nil, "package", m, "--out", pkg); code != 0 {
		t.Fatalf("package: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, append([]string{"pack", m, "--out", packed}, packArgs...)...); code != 0 {
		t.Fatalf("pack: exit %d: %s", code, errOut)
	}
	return m, pkg, packed
}

// editFile replaces the first from in p with to.
func editFile(t *testing.T, p, from, to string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(from)) {
		t.Fatalf("%s has no %q", p, from)
	}
	if err := os.WriteFile(p, bytes.Replace(b, []byte(from), []byte(to), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func evalArgs(m, pkg, packed, out string) []string {
	// a Python that does not exist: the checks must fail before one is looked for
	return []string{"eval", m, "--package", pkg, "--packed", packed, "--out", out, "--python", "/nonexistent/python", "--device", "cpu"}
}

func TestFaultMatrix(t *testing.T) {
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer silent.Close()
	// Misbehaving Hubs on 127.0.0.1, each with its fault for every request.
	hubWith := func(faults ...hubtest.Fault) string {
		store := hubtest.NewStore()
		store.Put("model", "org/tiny", "main", map[string]hubtest.File{
			"config.json":       {Data: []byte(`{"model_type":"llama"}`)},
			"model.safetensors": {Data: bytes.Repeat([]byte{7}, 300_000), LFS: true}})
		srv := hubtest.New(store)
		for _, f := range faults {
			f.Count = -1
			srv.Inject(f)
		}
		ts := srv.Start()
		t.Cleanup(ts.Close)
		return ts.URL
	}
	shortWhole := hubWith(hubtest.Fault{Kind: hubtest.FaultShortWhole, Path: "model.safetensors", After: 4096})
	huge := hubWith(hubtest.Fault{Kind: hubtest.FaultStatedSize, Route: hubtest.RouteHEAD, Path: "model.safetensors", Size: 10e12},
		hubtest.Fault{Kind: hubtest.FaultStatedSize, Route: hubtest.RouteAPI, Path: "model.safetensors", Size: 10e12})
	echo := map[string]string{}
	for _, w := range []string{"sha", "path", "body", "message"} {
		echo[w] = hubWith(hubtest.Fault{Kind: hubtest.FaultEcho, Route: hubtest.RouteAPI, Where: w})
	}
	for _, w := range []string{"etag", "commit"} {
		echo[w] = hubWith(hubtest.Fault{Kind: hubtest.FaultEcho, Route: hubtest.RouteHEAD, Path: "model.safetensors", Where: w})
	}
	refused := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // nothing listens there once closed: connections are refused
		return "http://" + l.Addr().String()
	}()
	fetchTiny := func(t *testing.T, root string) []string { return []string{"fetch", "org/tiny"} }

	cases := []faultCase{
		{name: "pack into another model's folder", code: exitUsage,
			want: []string{"other holds files xpuinject did not write", "choose another --out"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				other := copyFixture(t, "llama-sharded", filepath.Join(root, "other"))
				return []string{"pack", m, "--out", other}
			}},
		{name: "package over its own source with --force", code: exitUsage,
			want: []string{"m is the source checkpoint, which this run reads"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{"package", m, "--out", m, "--force"}
			}},
		{name: "package over a regular file", code: exitUsage,
			want: []string{"notes.txt is a regular file"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.WriteFile(filepath.Join(root, "notes.txt"), []byte("mine"), 0o644)
				return []string{"package", m, "--out", filepath.Join(root, "notes.txt")}
			}},
		{name: "package over a symlink to a folder", code: exitUsage,
			want: []string{"link is a symlink"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.Mkdir(filepath.Join(root, "target"), 0o755)
				os.Symlink("target", filepath.Join(root, "link"))
				return []string{"package", m, "--out", filepath.Join(root, "link"), "--force"}
			}},
		{name: "pack inside the source", code: exitUsage,
			want: []string{"is inside the source checkpoint"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{"pack", m, "--out", filepath.Join(m, "packed")}
			}},
		{name: "pipeline into a folder holding the source", code: exitUsage,
			want: []string{"contains the source checkpoint"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{m, "--out", root, "--force", "--skip-eval"}
			}},
		{name: "pipeline over a folder of user files with --force", code: exitUsage,
			want: []string{"run holds files xpuinject did not write"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.MkdirAll(filepath.Join(root, "run", "package"), 0o755)
				os.WriteFile(filepath.Join(root, "run", "package", "mine.txt"), []byte("user data"), 0o644)
				return []string{m, "--out", filepath.Join(root, "run"), "--force", "--skip-eval"}
			}},
		{name: "eval into the package", code: exitUsage,
			want: []string{"pkg is the package, which this run reads"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				return evalArgs(m, pkg, packed, pkg)
			}},
		{name: "a shard that is a named pipe", code: exitError1, maxTime: 10 * time.Second,
			want: []string{"model.safetensors is a named pipe (FIFO), not a regular file"},
			setup: func(t *testing.T, root string) []string {
				m := filepath.Join(root, "m")
				os.Mkdir(m, 0o755)
				b, _ := os.ReadFile(filepath.Join(fixtures, "llama-tiny", "config.json"))
				os.WriteFile(filepath.Join(m, "config.json"), b, 0o644)
				if err := syscall.Mkfifo(filepath.Join(m, "model.safetensors"), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"plan", m}
			}},
		{name: "a Hub that never answers", code: exitError1, maxTime: 10 * time.Second,
			env: map[string]string{"HF_ENDPOINT": silent.URL, "HF_HUB_ETAG_TIMEOUT": "1"},
			want: []string{"hub: waiting for " + strings.TrimPrefix(silent.URL, "http://") + " to answer GET",
				"no answer within 1s (HF_HUB_ETAG_TIMEOUT), 3 attempts"},
			setup: func(t *testing.T, root string) []string {
				return []string{"fetch", "org/name"}
			}},
		{name: "a Hub that answers 200 to every Range and cuts each answer short", code: exitError1, maxTime: 60 * time.Second,
			env: map[string]string{"HF_ENDPOINT": shortWhole}, cacheOutside: true, setup: fetchTiny,
			want: []string{"hub: model.safetensors: the server ignored Range", "3 restarts from byte 0, giving up"}},
		{name: "a Hub that states 10 TB for a file", code: exitError1, maxTime: 10 * time.Second,
			env: map[string]string{"HF_ENDPOINT": huge}, cacheOutside: true, setup: fetchTiny,
			want: []string{"hub: model.safetensors: the server states 10.0 TB", "refused before downloading"}},
		{name: "the Hub unreachable: a refused port", code: exitError1, maxTime: 2 * time.Second,
			env: map[string]string{"HF_ENDPOINT": refused},
			want: []string{"model meta-llama/Llama-3.2-1B: hub: 127.0.0.1:", "cannot be reached (connection refused)",
				"HF_HUB_OFFLINE=1 uses the cache"},
			setup: func(t *testing.T, root string) []string { return []string{"plan", "meta-llama/Llama-3.2-1B"} }},
		{name: "plan edited: unknown kernel", code: exitError1,
			want: []string{`plan.yaml: layers[1] (model.layers.0.input_layernorm): kernel "fancynorm" is not a known kernel`},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				editFile(t, filepath.Join(pkg, "plan.yaml"), "kernel: rmsnorm\n", "kernel: fancynorm\n")
				return evalArgs(m, pkg, packed, filepath.Join(root, "eval"))
			}},
		{name: "plan edited: k-major to row-major", code: exitError1,
			want: []string{`(model.layers.0.mlp.gate_up_proj.weight): layout "row-major", re-planning the model gives "k-major"`},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				editFile(t, filepath.Join(pkg, "plan.yaml"), "layout: k-major\n", "layout: row-major\n")
				return evalArgs(m, pkg, packed, filepath.Join(root, "eval"))
			}},
		{name: "plan edited: eps", code: exitError1,
			want: []string{`layers[1] (model.layers.0.input_layernorm): eps 0.5, re-planning the model gives 1e-06`},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				editFile(t, filepath.Join(pkg, "plan.yaml"), "eps: 1e-06\n", "eps: 0.5\n")
				return evalArgs(m, pkg, packed, filepath.Join(root, "eval"))
			}},
		{name: "plan edited: a reason only", code: exitError1,
			want: []string{"plan.yaml was changed after the package was written", "build/torch-cuda/metadata.json records"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				editFile(t, filepath.Join(pkg, "plan.yaml"), "reason: a gather", "reason: my gather")
				return evalArgs(m, pkg, packed, filepath.Join(root, "eval"))
			}},
		{name: "packed from another plan", code: exitError1,
			want: []string{"was packed from another plan", "re-run 'xpuinject pack'"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root, "--disable", "add-rmsnorm")
				return evalArgs(m, pkg, packed, filepath.Join(root, "eval"))
			}},
		{name: "config.json is an array", code: exitError1,
			want: []string{"config.json: expected a JSON object, got an array"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.WriteFile(filepath.Join(m, "config.json"), []byte("[1,2]"), 0o644)
				return []string{"plan", m}
			}},
		{name: "mistyped command", code: exitUsage,
			want: []string{`unknown command "pakc" for "xpuinject"`, "Did you mean this?\n\tpack\n"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{"pakc", m, "--out", filepath.Join(root, "x")}
			}},
		{name: "help on a mistyped command", code: exitUsage,
			want: []string{`unknown help topic "pakc"`, "Did you mean this?\n\tpack\n"},
			setup: func(t *testing.T, root string) []string {
				return []string{"help", "pakc"}
			}},
		{name: "malformed repo id", code: exitUsage,
			want: []string{`--repo-id "notvalid": want ORG/NAME`},
			setup: func(t *testing.T, root string) []string {
				_, pkg, _ := prepared(t, root)
				return []string{"push", pkg, "--repo-id", "notvalid"}
			}},
		{name: "negative token count", code: exitUsage,
			want: []string{"--tokens -5: want a positive number"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				return append(evalArgs(m, pkg, packed, filepath.Join(root, "eval")), "--tokens", "-5")
			}},
		{name: "zero prefill length", code: exitUsage,
			want: []string{"--prefill 0: want whole numbers of at least 1"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				return append(evalArgs(m, pkg, packed, filepath.Join(root, "eval")), "--prefill", "512,0")
			}},
		{name: "empty text file", code: exitUsage,
			want: []string{"empty.txt is empty"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				os.WriteFile(filepath.Join(root, "empty.txt"), nil, 0o644)
				return append(evalArgs(m, pkg, packed, filepath.Join(root, "eval")), "--text", filepath.Join(root, "empty.txt"))
			}},
		{name: "missing text file", code: exitUsage,
			want: []string{"nope.txt: no such file or directory"},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				return append(evalArgs(m, pkg, packed, filepath.Join(root, "eval")), "--text", filepath.Join(root, "nope.txt"))
			}},
		{name: "disk full during pack", code: exitError1, ulimitBlocks: 16,
			want: []string{"write tensor", ".safetensors: file too large"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{"pack", m, "--out", filepath.Join(root, "packed")}
			}},
		{name: "disk full during package", code: exitError1, ulimitBlocks: 1,
			want: []string{"file too large"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{"package", m, "--out", filepath.Join(root, "pkg")}
			}},
		{name: "disk full during the pipeline", code: exitError1, ulimitBlocks: 16,
			want: []string{"file too large"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				return []string{m, "--out", filepath.Join(root, "run"), "--skip-eval"}
			}},
		{name: "pack into a read-only folder", code: exitError1, readOnly: "ro",
			want: []string{"cannot write in", "permission denied"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.Mkdir(filepath.Join(root, "ro"), 0o755)
				return []string{"pack", m, "--out", filepath.Join(root, "ro", "packed")}
			}},
		{name: "package over a read-only empty folder", code: exitUsage, readOnly: "ro",
			want: []string{"ro is not writable", "permission denied"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.Mkdir(filepath.Join(root, "ro"), 0o755)
				return []string{"package", m, "--out", filepath.Join(root, "ro")}
			}},
		{name: "pipeline into a read-only folder", code: exitError1, readOnly: "ro",
			want: []string{"cannot write in", "permission denied"},
			setup: func(t *testing.T, root string) []string {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				os.Mkdir(filepath.Join(root, "ro"), 0o755)
				return []string{m, "--out", filepath.Join(root, "ro", "run"), "--skip-eval"}
			}},
	}
	cases = append(cases, packedContractCases(t)...)
	// A Hub that echoes the token back, in each place an answer has for it.
	for _, w := range []string{"sha", "path", "body", "message", "etag", "commit"} {
		cases = append(cases, faultCase{name: "a Hub that echoes the token in the " + w, code: exitError1,
			env: map[string]string{"HF_ENDPOINT": echo[w], "HF_TOKEN": faultToken}, cacheOutside: true,
			setup: func(t *testing.T, root string) []string { return []string{"fetch", "org/tiny", "--include", "*"} },
			want:  []string{"***"}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			args := c.setup(t, root)
			if c.readOnly != "" {
				defer readOnly(t, filepath.Join(root, c.readOnly))()
			}
			before := treeState(t, root)
			start := time.Now()
			var code int
			var stderr string
			if c.ulimitBlocks > 0 {
				code, stderr = runLimited(t, c.ulimitBlocks, args...)
			} else {
				env := map[string]string{"HF_HOME": filepath.Join(root, "hf")} // a cache inside the hashed tree
				if c.cacheOutside {
					env["HF_HOME"] = t.TempDir()
				}
				for k, v := range c.env {
					env[k] = v
				}
				var stdout string
				code, stdout, stderr = runCLI(t, env, args...)
				if l := tokenPiece(stdout + stderr); l != "" {
					t.Errorf("%q of the token printed:\n%s%s", l, stdout, stderr)
				}
			}
			took := time.Since(start)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, gotype := range []string{"interface {}", "map[string]", "Go value", "Go struct"} {
				if strings.Contains(stderr, gotype) {
					t.Errorf("stderr shows a Go type (%s):\n%s", gotype, stderr)
				}
			}
			if c.maxTime > 0 && took > c.maxTime {
				t.Errorf("took %s, want under %s", took, c.maxTime)
			}
			if d := diffTrees(before, treeState(t, root)); d != "" {
				t.Errorf("the run changed the folder:\n%s", d)
			}
		})
	}
}

// readOnly makes dir read-only and returns the undo. Root writes through file modes, so
// as root the same refusal is made by outdir's fault hook: every change inside dir, and
// the writability check of dir itself, fail with EACCES as the kernel would answer.
func readOnly(t *testing.T, dir string) func() {
	t.Helper()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	undo := func() { os.Chmod(dir, 0o755) }
	if os.Geteuid() != 0 {
		return undo
	}
	t.Logf("running as root, where modes do not stop writes: %s is made read-only through outdir's fault hook", dir)
	restore := outdir.SetFault(func(op, path string) error {
		inside := strings.HasPrefix(path, dir+string(filepath.Separator))
		if inside || (op == "access" && path == dir) {
			return &fs.PathError{Op: op, Path: path, Err: syscall.EACCES}
		}
		return nil
	})
	return func() { restore(); undo() }
}

// runLimited runs the built CLI with the file-size limit at blocks of 512 bytes: a
// write past it fails with EFBIG, as a full disk fails one with ENOSPC.
func runLimited(t *testing.T, blocks int, args ...string) (int, string) {
	t.Helper()
	bin := cliBinary(t)
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -f "$0" && exec "$@"`, strconv.Itoa(blocks), bin}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stderr.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// The signal part of the matrix: every command that writes, stopped by SIGINT and by
// SIGTERM in the middle of its work, exits 130, says it was interrupted, removes its
// temporaries and leaves every earlier output as it was. The CLI runs as a child (this
// test binary, asCLI); it is stopped at a known point, never at a guessed moment: the
// child pauses at an outdir operation until the signal has cancelled its run, or the
// test Hub holds a request until the signal ends it.

const (
	asCLI      = "XPUINJECT_TEST_AS_CLI" // run Main on the arguments instead of the tests
	pauseAt    = "XPUINJECT_TEST_PAUSE"  // "op path-substring [kill]": pause (or SIGKILL itself) there
	pauseReady = "XPUINJECT_TEST_READY"  // file the paused child creates
)

// runAsCLI is the child: Main, with the pause installed.
func runAsCLI() int {
	if p := os.Getenv(pauseAt); p != "" {
		op, sub, _ := strings.Cut(p, " ")
		sub, kill := strings.CutSuffix(sub, " kill")
		var ctx context.Context
		runContextHook = func(c context.Context) { ctx = c }
		var once sync.Once
		outdir.SetFault(func(o, path string) error {
			if o == op && strings.Contains(path, sub) && kill {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) // kill -9 at this very step
				time.Sleep(time.Minute)
			}
			if o == op && strings.Contains(path, sub) && ctx != nil {
				once.Do(func() {
					os.WriteFile(os.Getenv(pauseReady), nil, 0o644)
					select {
					case <-ctx.Done():
					case <-time.After(time.Minute):
					}
				})
			}
			return nil
		})
	}
	return Main(os.Args[1:], NewFactory(os.Stdin, os.Stdout, os.Stderr))
}

type signalCase struct {
	name string
	// setup prepares root and returns the arguments, the child's environment, and a
	// channel that says when to send the signal (nil: the child's pause file).
	setup func(t *testing.T, root string) (args, env []string, ready <-chan struct{})
	pause string // the child's pause point (pauseAt)
	want  []string
	// check looks at what the run left beyond root's files (the test Hub), when set.
	check func(t *testing.T)
	// adds says which paths under root the run may add (a fetch's cache), when set.
	adds func(path string) bool
}

func TestSignalMatrix(t *testing.T) {
	cases := []signalCase{
		{name: "pack", pause: "create .safetensors", want: []string{"interrupted"},
			setup: func(t *testing.T, root string) ([]string, []string, <-chan struct{}) {
				m, _, packed := prepared(t, root)
				return []string{"pack", m, "--out", packed}, nil, nil
			}},
		{name: "package", pause: "write build/torch-cuda/", want: []string{"inject: emit: interrupted before"},
			setup: func(t *testing.T, root string) ([]string, []string, <-chan struct{}) {
				m, pkg, _ := prepared(t, root)
				return []string{"package", m, "--out", pkg, "--force", "--name", "other-kernel"}, nil, nil
			}},
		{name: "the pipeline's package step", pause: "write build/torch-cuda/", want: []string{"inject: emit: interrupted before"},
			setup: func(t *testing.T, root string) ([]string, []string, <-chan struct{}) {
				m := copyFixture(t, "llama-tiny", filepath.Join(root, "m"))
				run := filepath.Join(root, "run")
				if code, _, errOut := runCLI(t, nil, m, "--out", run, "--skip-eval"); code != 0 {
					t.Fatalf("pipeline: exit %d: %s", code, errOut)
				}
				return []string{m, "--out", run, "--skip-eval", "--force"}, nil, nil
			}},
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		for _, c := range append(cases, hubSignalCases()...) {
			t.Run(c.name+" "+sig.String(), func(t *testing.T) { runSignalCase(t, c, sig) })
		}
	}
}

func runSignalCase(t *testing.T, c signalCase, sig syscall.Signal) {
	root := t.TempDir()
	args, env, ready := c.setup(t, root)
	before := treeState(t, root)
	readyFile := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append([]string{asCLI + "=1", pauseAt + "=" + c.pause, pauseReady + "=" + readyFile,
		"HF_HOME=" + filepath.Join(root, "hf")}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if ready == nil {
		r := make(chan struct{})
		go func() {
			for {
				if _, err := os.Stat(readyFile); err == nil {
					close(r)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		ready = r
	}
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the run ended (%v) before its pause point:\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the run never reached its pause point:\n%s", stderr.String())
	}
	cmd.Process.Signal(sig)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("still running 30 s after %s:\n%s", sig, stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Errorf("exit %v, want %d:\n%s", err, exitInterrupted, stderr.String())
	}
	for _, w := range c.want {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
		}
	}
	t.Logf("%s: exit %v:\n%s", sig, err, stderr.String())
	after := treeState(t, root)
	for k := range after {
		if _, was := before[k]; !was && c.adds != nil && c.adds(k) {
			delete(after, k)
		}
	}
	if d := diffTrees(before, after); d != "" {
		t.Errorf("the interrupted run changed the folder:\n%s", d)
	}
	if c.check != nil {
		c.check(t)
	}
}

// hubSignalCases are the signal cases against the test Hub on 127.0.0.1, which holds a
// request until the client goes away: a fetch in the middle of a file, a push at its commit.
func hubSignalCases() []signalCase {
	var srv *hubtest.Server
	var newCommit string
	fetch := signalCase{name: "fetch", want: []string{"interrupted (partial downloads are kept and resume next time)"},
		setup: func(t *testing.T, root string) ([]string, []string, <-chan struct{}) {
			store := hubtest.NewStore()
			store.Put("model", "org/tiny", "main", map[string]hubtest.File{
				"config.json": {Data: []byte(`{"model_type":"llama"}`)}, "model.safetensors": {Data: bytes.Repeat([]byte("a"), 50_000), LFS: true}})
			srv = hubtest.New(store)
			ts := srv.Start()
			t.Cleanup(ts.Close)
			env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_HOME": filepath.Join(root, "hf")}
			if code, _, errOut := runCLI(t, env, "fetch", "org/tiny"); code != 0 { // the earlier snapshot
				t.Fatalf("fetch: exit %d: %s", code, errOut)
			}
			newCommit = store.Put("model", "org/tiny", "main", map[string]hubtest.File{
				"config.json": {Data: []byte(`{"model_type":"llama"}`)}, "model.safetensors": {Data: bytes.Repeat([]byte("b"), 50_000), LFS: true}})
			ready := make(chan struct{})
			srv.Inject(hubtest.Fault{Kind: hubtest.FaultStall, Path: "model.safetensors", After: 1000, Hook: func() { close(ready) }})
			return []string{"fetch", "org/tiny"}, []string{"HF_ENDPOINT=" + ts.URL}, ready
		},
		// the new commit's blobs, partial and locks may appear; refs/main and the earlier
		// snapshot stay as they were
		adds: func(p string) bool {
			return !strings.HasSuffix(p, "model.safetensors") && strings.Contains(p, string(filepath.Separator)+"blobs"+string(filepath.Separator)) ||
				strings.Contains(p, ".locks") || strings.Contains(p, newCommit)
		}}
	var pub *hubtest.Server
	push := signalCase{name: "push", want: []string{"hub: interrupted while committing to my-org/tiny-kernels@v1"},
		setup: func(t *testing.T, root string) ([]string, []string, <-chan struct{}) {
			pub = hubtest.New(nil)
			pub.Token = "hf_signalCaseToken"
			ts := pub.Start()
			t.Cleanup(ts.Close)
			ready := make(chan struct{})
			pub.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Stall: true, Hook: func() { close(ready) }})
			return []string{"push", pushTestPkg(t), "--repo-id", "my-org/tiny-kernels"},
				[]string{"HF_ENDPOINT=" + ts.URL, "HF_TOKEN=hf_signalCaseToken"}, ready
		},
		check: func(t *testing.T) {
			if _, c, err := pub.Store.Resolve("kernel", "my-org/tiny-kernels", "v1"); err == nil && len(c.Files) > 0 {
				t.Errorf("the interrupted push committed %d files to v1", len(c.Files))
			}
		}}
	return []signalCase{fetch, push}
}

// TestCrashMatrix: kill -9 at each step of putting an output in place (the child kills
// itself there), then the next run: the output is never missing, and the next run gives
// the bytes of an uninterrupted one with nothing left beside them.
func TestCrashMatrix(t *testing.T) {
	for _, at := range []string{"exchange", "remove"} { // before the swap; after it, before the cleanup
		t.Run("pack killed at "+at, func(t *testing.T) {
			root := t.TempDir()
			m, _, packed := prepared(t, root)
			want := treeState(t, packed)
			// A pack with another plan, so that the two outputs differ.
			cmd := exec.Command(os.Args[0], "pack", m, "--out", packed, "--disable", "add-rmsnorm")
			cmd.Env = append(os.Environ(), asCLI+"=1", pauseAt+"="+at+" packed kill")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the run was not killed at %s (%v):\n%s", at, err, out)
			}
			if _, err := outdir.ReadMarker(packed); err != nil {
				t.Fatalf("right after kill -9 at %s the output is not there: %v", at, err)
			}
			if code, _, errOut := runCLI(t, nil, "pack", m, "--out", packed); code != 0 {
				t.Fatalf("the next pack: exit %d: %s", code, errOut)
			}
			if d := diffTrees(want, treeState(t, packed)); d != "" {
				t.Errorf("the next run's output differs from an uninterrupted one:\n%s", d)
			}
			if got := entries(t, root); !slices.Equal(got, []string{"m", "packed", "pkg"}) {
				t.Errorf("left beside the outputs: %v", got)
			}
		})
	}
}
