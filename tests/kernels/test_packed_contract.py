"""The package's inject(model, packed=...) refuses every packed checkpoint the CLI's pre-flight
refuses, before it changes the model: one case per property of contract.json's packed_checks,
written once for both languages in testdata/packed-contract.json (the Go side:
cmd/xpuinject/contract_fixtures_test.go makes the same edits)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"
SPEC = json.loads((ROOT / "testdata" / "packed-contract.json").read_text())
CONTRACT = json.loads((ROOT / "kernels" / "python" / "xpuinject_kernels" / "contract.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp("packed-contract") / "run"
    r = subprocess.run([str(BIN), str(FIXTURES / SPEC["model"]), "--out", str(out), "--skip-eval"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def pkg(run):
    folder = run / "package" / "build" / "torch-cuda"
    name = json.loads((folder / "metadata.json").read_text())["id"]
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load(device="cpu"):
    return transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / SPEC["model"], dtype=torch.bfloat16).eval().to(device)


def read_safetensors(path: Path):
    b = path.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_safetensors(path: Path, header: dict, data: bytes) -> None:
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def break_packed(folder: Path, check: str, tensor: str) -> None:
    """The edit testdata/packed-contract.json describes for check (as breakPacked does in Go)."""
    shard = folder / "model.safetensors"
    if check == "plan_digest":
        with open(folder / "plan.yaml", "a") as f:
            f.write("# edited by hand\n")
        return
    header, data = read_safetensors(shard)
    if check == "shard_digest":
        header["__metadata__"]["xpuinject_plan_sha256"] = "0" * 64
    elif check == "present":
        header[tensor[:-1] + "x"] = header.pop(tensor)
    elif check == "shape":
        header[tensor]["shape"].reverse()
    elif check == "dtype":
        out = bytearray()
        for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                                 key=lambda kv: kv[1]["data_offsets"][0]):
            a, b = info["data_offsets"]
            chunk = data[a:b]
            if name == tensor:
                assert info["dtype"] == "BF16"
                chunk = torch.frombuffer(bytearray(chunk), dtype=torch.bfloat16).float().numpy().tobytes()
                info["dtype"] = "F32"
            info["data_offsets"] = [len(out), len(out) + len(chunk)]
            out += chunk
        data = bytes(out)
    else:
        raise AssertionError(f"no edit for packed check {check!r}")
    write_safetensors(shard, header, data)


def test_cases_cover_every_check(pkg):
    names = [c["name"] for c in CONTRACT["packed_checks"]]
    assert [c["check"] for c in SPEC["cases"]] == names
    from xpuinject_kernels.contract import PACKED_CHECKS
    assert list(PACKED_CHECKS) == names


def test_the_unedited_checkpoint_passes(run, pkg, device):
    r = pkg.inject(load(device), packed=run / "packed", check_only=True)
    assert r["checked"] and r["packed_tensors"] > 0


@pytest.mark.parametrize("case", SPEC["cases"], ids=lambda c: c["check"])
def test_refused_before_the_model_changes(run, pkg, tmp_path, case, device):
    packed = tmp_path / "packed"
    shutil.copytree(run / "packed", packed)
    break_packed(packed, case["check"], SPEC["tensor"])
    model = load(device)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    mlp = model.model.layers[0].mlp
    with pytest.raises(pkg.InjectError, match=re.escape(case["python"])):
        pkg.inject(model, packed=packed)
    # nothing was bound, attached or released
    assert isinstance(mlp.gate_proj, torch.nn.Linear) and not hasattr(mlp, "xpuinject_gate_up_weight")
    assert not hasattr(mlp, "xpuinject_name")
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
