"""pytest setup shared by every test folder."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"


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
