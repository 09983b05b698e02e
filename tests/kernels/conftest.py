"""pytest setup for the Triton kernel tests.

TRITON_INTERPRET must be set before triton is imported, so it is set here (setdefault: a GPU run
may export TRITON_INTERPRET=0 to run the same tests on cuda/xpu). `xpuinject_kernels` is the
editable install of kernels/python (scripts/setup-venv.sh), and NaN poisoning of kernel outputs is
switched on for every test.
"""

import os
import subprocess
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("XPUINJECT_POISON", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from xpuinject_kernels import _backend, _interpret  # noqa: E402


# Triton 3.6's interpreter disagrees with compiled kernels in three ways (bf16 rounding, bf16
# dot, numpy >= 2.4 loop bounds); the fixes live in the package (its inject and kernelize apply them too).
_interpret.apply()


def _pick_device() -> str:
    if _backend.is_interpret():
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return "cpu"


@pytest.fixture(scope="session")
def device() -> str:
    """Where kernel tests run: "cpu" under TRITON_INTERPRET=1, else the GPU (skip if none)."""
    d = _pick_device()
    if d == "cpu" and not _backend.is_interpret():
        pytest.skip("no GPU and TRITON_INTERPRET is not 1")
    return d


@pytest.fixture(autouse=True)
def _poison_and_seed():
    """Poison kernel outputs with NaN (unwritten elements fail) and fix the RNG for every test."""
    _backend.set_poison(True)
    torch.manual_seed(0)
    yield


BIN = Path(__file__).resolve().parents[2] / "bin" / "xpuinject"
FIXTURES = Path(__file__).resolve().parents[2] / "testdata" / "fixtures"


@pytest.fixture(scope="session")
def llama_odd_run(tmp_path_factory) -> Path:
    """llama-odd planned, packed and packaged by the Go binary (`xpuinject llama-odd --skip-eval`),
    once for every test that reads it; tests must not write in it."""
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp("llama-odd") / "run"
    r = subprocess.run([str(BIN), str(FIXTURES / "llama-odd"), "--out", str(out), "--skip-eval"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def llama_odd_pkg(llama_odd_run):
    """The emitted package of llama_odd_run, loaded as users load it (kernels.get_local_kernel)."""
    from kernels import get_local_kernel

    return get_local_kernel(llama_odd_run / "package", backend="cuda" if torch.version.cuda else None)
