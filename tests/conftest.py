"""pytest setup shared by every test folder."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"


def skip_eval_run(tmp_path_factory, fixture) -> Path:
    """The fixture planned, packed and packaged by the Go binary (`xpuinject FIXTURE --skip-eval`)."""
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp(fixture) / "run"
    r = subprocess.run([str(BIN), str(FIXTURES / fixture), "--out", str(out), "--skip-eval"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def llama_odd_run(tmp_path_factory) -> Path:
    """llama-odd's run folder, once for every test that reads it; tests must not write in it."""
    return skip_eval_run(tmp_path_factory, "llama-odd")


@pytest.fixture(scope="session")
def qwen3_moe_tiny_run(tmp_path_factory) -> Path:
    """qwen3-moe-tiny's run folder, as llama_odd_run."""
    return skip_eval_run(tmp_path_factory, "qwen3-moe-tiny")


@pytest.fixture(scope="session")
def levit_tiny_run(tmp_path_factory) -> Path:
    """levit-tiny's run folder, as llama_odd_run."""
    return skip_eval_run(tmp_path_factory, "levit-tiny")


def pytest_collection_modifyitems(config, items):
    """The longest tests first (slow(minutes=N) before slow, slow before the rest; otherwise in
    collection order): scripts/test spreads the suite over the cores (pytest-xdist), and a long
    test started last would run alone at the end."""
    def minutes(item):
        m = item.get_closest_marker("slow")
        return 0 if m is None else m.kwargs.get("minutes", 1)

    items.sort(key=lambda item: -minutes(item))
