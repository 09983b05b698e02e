package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// FindPython picks the interpreter: explicit (--python), else $XPUINJECT_PYTHON, else
// the project's virtualenv (.venv/bin/python found by walking up from the working
// directory and from the executable), else python3 on PATH.
func FindPython(explicit string, getenv func(string) string) (string, error) {
	if explicit != "" {
		return checkExe(explicit, "--python")
	}
	if p := getenv("XPUINJECT_PYTHON"); p != "" {
		return checkExe(p, "$XPUINJECT_PYTHON")
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, ".venv", "bin", "python")
			if st, err := os.Stat(cand); err == nil && !st.IsDir() {
				return cand, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("harness: no Python found: pass --python, set XPUINJECT_PYTHON, or run scripts/setup-venv.sh to make .venv")
	}
	return p, nil
}

func checkExe(p, from string) (string, error) {
	if !strings.ContainsRune(p, os.PathSeparator) {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("harness: %s %q: not found on PATH", from, p)
		}
		return lp, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("harness: %s %q: %w", from, p, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("harness: %s %q: not an executable file", from, p)
	}
	return p, nil
}

// Env describes what an interpreter has.
type Env struct {
	Python       string
	Version      string
	Torch        string
	Transformers string
	Triton       string
	Kernels      string // "" when not installed (the driver then imports the package's variant folder itself)
	CUDA         bool
	XPU          bool
	Device       string // GPU name when there is one
	// GPUMemory is the total memory of each visible CUDA device (or XPU when there is no
	// CUDA), in bytes.
	GPUMemory []int64
}

// ErrMissing is returned when the interpreter lacks a required package or device.
var ErrMissing = errors.New("harness: missing")

// probeScript reads the packages' versions from their installed metadata and imports nothing
// heavy: importing transformers, triton and kernels would cost seconds of every run's start, and
// the eval driver imports them itself and names any that fails. The CUDA devices come from the
// driver library (libcuda's cuDeviceGet*, through ctypes) when torch's own version file says it
// was built for CUDA: importing torch for them costs seconds on a cold machine. Without either it
// imports torch and asks it (an XPU, or a CUDA build on a machine without a driver).
const probeScript = `
import json, re, sys, importlib, importlib.util, importlib.metadata as md
out = {"version": sys.version.split()[0]}
dists = md.packages_distributions()
for m in ("transformers", "triton", "kernels", "safetensors", "torch"):
    out[m] = ""
    try:
        if importlib.util.find_spec(m) is not None:
            ds = dists.get(m)
            out[m] = md.version(ds[0]) if ds else importlib.import_module(m).__version__
    except Exception:
        out[m] = ""
out["cuda"] = out["xpu"] = False

def torch_cuda_build():
    try:
        spec = importlib.util.find_spec("torch")
        text = open(spec.submodule_search_locations[0] + "/version.py").read()
    except Exception:
        return False
    m = re.search(r"^cuda(?:: [^=]+)? = (.+)$", text, re.M)
    return bool(m) and m.group(1).strip() not in ("None", "''", '""')

def cuda_driver_devices():
    import ctypes
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return None
    n = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        return None
    devs = []
    for i in range(n.value):
        d, buf, mem = ctypes.c_int(), ctypes.create_string_buffer(256), ctypes.c_size_t()
        if (lib.cuDeviceGet(ctypes.byref(d), i) != 0 or lib.cuDeviceGetName(buf, 256, d) != 0
                or lib.cuDeviceTotalMem_v2(ctypes.byref(mem), d) != 0):
            return None
        devs.append((buf.value.decode(errors="replace"), mem.value))
    return devs

devs = None
if out["torch"] and torch_cuda_build():
    try:
        devs = cuda_driver_devices()
    except Exception:
        devs = None
if devs:
    out["cuda"], out["device"], out["gpus"] = True, devs[0][0], [m for _, m in devs]
else:
    try:
        import torch
        out["torch"] = torch.__version__
    except Exception:
        out["torch"] = ""
    else:
        try:
            out["cuda"] = bool(torch.cuda.is_available())
            out["xpu"] = bool(hasattr(torch, "xpu") and torch.xpu.is_available())
            out["device"] = torch.cuda.get_device_name(0) if out["cuda"] else ""
            acc = torch.cuda if out["cuda"] else (torch.xpu if out["xpu"] else None)
            out["gpus"] = [acc.get_device_properties(i).total_memory for i in range(acc.device_count())] if acc else []
        except Exception:
            out["cuda"] = out["xpu"] = False
print(json.dumps(out))
`

// Probe runs the interpreter once and reports its packages and devices; a missing
// torch, transformers, triton or safetensors is an error saying how to install it.
func Probe(ctx context.Context, python string) (*Env, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", probeScript)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	child := startChild(cmd)
	out, err := cmd.Output()
	child.done()
	if err != nil {
		return nil, fmt.Errorf("harness: running %s: %w: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	var r map[string]any
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("harness: %s: unexpected probe output %q", python, out)
	}
	s := func(k string) string { v, _ := r[k].(string); return v }
	b := func(k string) bool { v, _ := r[k].(bool); return v }
	env := &Env{Python: python, Version: s("version"), Torch: s("torch"), Transformers: s("transformers"),
		Triton: s("triton"), Kernels: s("kernels"), CUDA: b("cuda"), XPU: b("xpu"), Device: s("device")}
	if gpus, ok := r["gpus"].([]any); ok {
		for _, g := range gpus {
			if v, ok := g.(float64); ok && v > 0 {
				env.GPUMemory = append(env.GPUMemory, int64(v))
			}
		}
	}
	var missing []string
	for _, m := range []struct{ name, ver string }{{"torch", env.Torch}, {"transformers", env.Transformers}, {"triton", env.Triton}, {"safetensors", s("safetensors")}} {
		if m.ver == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return env, fmt.Errorf("%w: %s lacks %s: run scripts/setup-venv.sh (or pip install -r requirements.txt) and pass --python .venv/bin/python",
			ErrMissing, python, strings.Join(missing, ", "))
	}
	return env, nil
}
