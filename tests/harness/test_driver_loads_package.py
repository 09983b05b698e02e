"""The eval driver injects through the emitted package itself: loaded by kernels.get_local_kernel
when the kernels package is importable, else (or with XPUINJECT_NO_KERNELS=1) imported from its
variant folder. Either way the module is the package's copy, not the source tree."""

import importlib.util
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "xpuinject"


@pytest.fixture(scope="module")
def driver():
    spec = importlib.util.spec_from_file_location("eval_driver_under_test", ROOT / "harness" / "python" / "eval_driver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp("pkg") / "package"
    r = subprocess.run([str(BIN), "package", str(ROOT / "testdata" / "fixtures" / "llama-tiny"), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("no_kernels, how", [("0", "kernels"), ("1", "direct")])
def test_driver_loads_the_emitted_package(driver, package, monkeypatch, no_kernels, how):
    monkeypatch.setenv("XPUINJECT_NO_KERNELS", no_kernels)
    pkg, loaded_by = driver.load_package(package, torch.device("cpu"))
    assert loaded_by == how
    assert Path(pkg.__file__).parent == package / "build" / "torch-cuda"  # the CPU runs the CUDA variant, interpreted
    assert callable(pkg.inject) and pkg.load_plan()["arch"] == "llama"
