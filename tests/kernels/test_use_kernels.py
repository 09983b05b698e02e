"""transformers' own kernels route (KernelConfig + use_kernels) with an emitted package, under
both kernels releases: 0.16.2 (.venv-kernels016, which scripts/setup-venv.sh installs; the
range transformers 5.17 takes) and the pinned 0.17.2. Each runs use_kernels_route.py in a
subprocess of its own, since kernels and transformers' kernels integration are chosen at import.

Under 0.16.2 transformers' `set_use_kernels(True, KernelConfig(...))` binds the layers; under
0.17.2 transformers refuses use_kernels (its version range), and the script runs the steps
set_use_kernels runs on the same KernelConfig. Either way: exactly the modules `kernelize` would
bind (the lm_head aside, which has no class of its own to mark) get the package's layers, our
kernels run, and the model computes bit for bit what the same layers bound by hand compute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "xpuinject"
K016 = ROOT / ".venv-kernels016"
SCRIPT = Path(__file__).with_name("use_kernels_route.py")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp("pkg") / "package"
    r = subprocess.run([str(BIN), "package", str(ROOT / "testdata" / "fixtures" / "llama-odd"), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def route(package: Path, fixture: str, first_on_path: Path = None) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    path = [str(ROOT / "kernels" / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    if first_on_path is not None:
        path.insert(0, str(first_on_path))
    env["PYTHONPATH"] = os.pathsep.join(path)
    r = subprocess.run([sys.executable, str(SCRIPT), str(package), str(ROOT / "testdata" / "fixtures" / fixture)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def check(res: dict, kernels_version: str) -> None:
    assert res["kernels"] == kernels_version
    assert res["bound"] == res["supported"] and res["bound"], (res["bound"], res["supported"])
    assert res["layers"] == {"Attention": 1, "DecoderLayer": 1, "RMSNorm": 3, "SwiGLUMLP": 1}
    assert sorted(res["mapping"]) == ["RMSNorm", "xpuinject.Attention", "xpuinject.DecoderLayer", "xpuinject.SwiGLUMLP"]
    assert res["kernels_ran"]
    assert res["equal_to_bound_by_hand"]
    assert not res["equal_to_stock"] and res["max_abs_vs_stock"] < 0.25, res["max_abs_vs_stock"]


def test_use_kernels_with_kernels_016(package):
    if not (K016 / "kernels").is_dir():
        pytest.fail(f"{K016} is missing: scripts/setup-venv.sh installs kernels 0.16.2 there")
    res = route(package, "llama-odd", K016)
    check(res, "0.16.2")
    assert res["transformers_takes_kernels"] and res["route"] == "set_use_kernels(True, kernel_config)"
    # transformers marks its RMSNorm classes itself with a release it takes; the package marks the rest
    assert "LlamaRMSNorm" not in res["marked"] and res["marked"]["LlamaMLP"] == "xpuinject.SwiGLUMLP"


def test_use_kernels_with_kernels_017(package):
    res = route(package, "llama-odd")
    check(res, "0.17.2")
    # transformers 5.17 takes kernels < 0.17 only: when a release takes 0.17, this route becomes
    # set_use_kernels itself and this assertion says so
    assert not res["transformers_takes_kernels"] and res["route"] == "set_use_kernels steps"
    assert "0.16.0 <= version < 0.17.0" in res["refused"]
    assert res["marked"]["LlamaRMSNorm"] == "RMSNorm"
