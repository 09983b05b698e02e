"""pytest setup for the Triton kernel tests.

TRITON_INTERPRET must be set before triton is imported, so it is set here (setdefault: a GPU run
may export TRITON_INTERPRET=0 to run the same tests on cuda/xpu). `xpuinject_kernels` is the
editable install of kernels/python (scripts/setup-venv.sh), and NaN poisoning of kernel outputs is
switched on for every test.
"""

import os

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


@pytest.fixture(scope="session")
def llama_odd_pkg(llama_odd_run):
    """The emitted package of llama_odd_run, loaded as users load it (kernels.get_local_kernel)."""
    from kernels import get_local_kernel

    return get_local_kernel(llama_odd_run / "package", backend="cuda" if torch.version.cuda else None)
