"""The package `xpuinject package` writes, read by the real `kernels` library the way kernel-builder's
own output is: build.toml parses as the current edition (no in-memory upgrade warning),
metadata.json parses and its digest is the one kernels computes for the variant folder, and
get_local_kernel loads it without a warning.

Run: TRITON_INTERPRET=1 .venv/bin/pytest tests/inject/test_package_with_kernels.py (needs `go`).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

kernels = pytest.importorskip("kernels")
from kernels import _rust  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "testdata" / "fixtures" / "llama-tiny"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    work = tmp_path_factory.mktemp("pkg")
    binary = work / "xpuinject"
    subprocess.run([go, "build", "-o", str(binary), "./cmd/xpuinject"], cwd=REPO, check=True)
    out = work / "package"
    subprocess.run([str(binary), "package", str(FIXTURE), "--out", str(out)], check=True, capture_output=True)
    return out


def test_build_toml_is_the_current_edition(package, capfd):
    _rust.Build.open(package)
    err = capfd.readouterr().err
    assert "legacy" not in err and "upgrading" not in err and "edition" not in err, err
    assert "\nedition = 5\n" in (package / "build.toml").read_text()


@pytest.mark.parametrize("backend", ["cuda", "xpu"])
def test_metadata_digest_is_the_kernels_digest(package, backend, tmp_path):
    variant = package / "build" / f"torch-{backend}"
    meta = _rust.Metadata.read_from_file(variant / "metadata.json")
    assert str(meta.name) and meta.version == 1 and str(meta.kernels_minver) == "0.14.0"
    assert meta.digest is not None and meta.digest.algorithm == _rust.DigestAlgorithm.SHA256
    actual = _rust.Digest.hash_variant(meta.digest.algorithm, variant)
    meta.digest.validate(actual)  # raises DigestValidationError on any difference
    assert "plan.yaml" in actual.files and "gpus/h200.json" in actual.files
    # and the check can fail: one byte changed in a copy is named
    copy = tmp_path / "variant"
    shutil.copytree(variant, copy)
    (copy / "plan.yaml").write_text((copy / "plan.yaml").read_text() + "\n")
    with pytest.raises(_rust.DigestValidationError, match="plan.yaml"):
        meta.digest.validate(_rust.Digest.hash_variant(meta.digest.algorithm, copy))


def test_get_local_kernel_loads_without_warnings(package, capfd, caplog):
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        mod = kernels.get_local_kernel(package, backend="cuda")
    assert hasattr(mod, "inject") and hasattr(mod, "tuning_report")
    err = capfd.readouterr().err
    assert "legacy" not in err and "upgrading" not in err, err
    assert not [w for w in caught if "kernels" in str(w.filename)], [str(w.message) for w in caught]
    assert not [r for r in caplog.records if r.name.startswith("kernels")], caplog.text
