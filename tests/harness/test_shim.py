"""xpuinject_shim.inject on real transformers models from the fixtures, with packages and packed
checkpoints written by the Go binary: both ways in (kernels' kernelize and direct patching), the
released originals, and each mismatch the shim must refuse with a message naming the problem."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"
sys.path.insert(0, str(ROOT / "harness" / "python"))

import xpuinject_shim as shim  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """qwen3-tiny (attention with q/k norms, GQA) packed and packaged by the Go binary."""
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it")
    out = tmp_path_factory.mktemp("qwen3")
    r = subprocess.run([str(BIN), str(FIXTURES / "qwen3-tiny"), "--out", str(out), "--skip-eval"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def load(name="qwen3-tiny"):
    return transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.bfloat16).eval()


@pytest.mark.parametrize("use_kernels", [True, False])
def test_inject_matches_stock_and_releases_originals(built, use_kernels):
    stock, model = load(), load()
    summary = shim.inject(model, built / "package", packed_dir=built / "packed", use_kernels=use_kernels)
    assert summary["path"] == ("kernels" if use_kernels else "direct")
    assert summary["replaced"] == {"Attention": 2, "DecoderLayer": 2, "RMSNorm": 9, "SwiGLUMLP": 2}
    at = model.model.layers[0].self_attn
    assert isinstance(at.q_proj, shim.Released) and isinstance(model.model.layers[0].mlp.down_proj, shim.Released)
    assert at.xpuinject_qkv_weight.dtype == torch.bfloat16 and at.xpuinject_qkv_weight.shape == (64, 4 * 32 + 2 * 2 * 32)
    # no second copy of the projection weights is left on the module tree
    names = {n for n, _ in model.named_parameters()}
    assert not any(n.endswith("q_proj.weight") or n.endswith("gate_proj.weight") for n in names)
    ids = torch.randint(0, 500, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = stock(input_ids=ids).logits.float()
        b = model(input_ids=ids).logits.float()
    cos = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()
    assert cos > 0.999 and not torch.equal(a, b), cos


def test_check_only_changes_nothing(built):
    model = load()
    before = {n: p.clone() for n, p in model.named_parameters()}
    r = shim.inject(model, built / "package", packed_dir=built / "packed", check_only=True)
    assert r["checked"] and r["bindings"] > 0
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def copy_package(built, tmp_path):
    pkg = tmp_path / "package"
    shutil.copytree(built / "package", pkg)
    return pkg


def edit_plan(pkg, fn):
    import yaml

    plan = yaml.safe_load((pkg / "plan.yaml").read_text())
    fn(plan)
    (pkg / "plan.yaml").write_text(yaml.safe_dump(plan))


def test_refuses_wrong_architecture(built):
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "llama-tiny", dtype=torch.bfloat16)
    with pytest.raises(shim.InjectError, match="qwen3.*llama|model_type"):
        shim.inject(model, built / "package", packed_dir=built / "packed")


def test_refuses_missing_module(built, tmp_path):
    pkg = copy_package(built, tmp_path)
    edit_plan(pkg, lambda p: p["layers"][1].__setitem__("module", "model.layers.7.input_layernorm"))
    with pytest.raises(shim.InjectError, match="model.layers.7.input_layernorm"):
        shim.inject(load(), pkg, packed_dir=built / "packed")


def test_refuses_missing_and_misshapen_tensors(built, tmp_path):
    pkg = copy_package(built, tmp_path)
    edit_plan(pkg, lambda p: p["layers"][2]["outputs"][0].__setitem__("name", "model.layers.0.self_attn.nope.weight"))
    with pytest.raises(shim.InjectError, match="nope.weight.*missing from the packed checkpoint"):
        shim.inject(load(), pkg, packed_dir=built / "packed")
    pkg2 = copy_package(built, tmp_path / "b")
    edit_plan(pkg2, lambda p: p["layers"][2]["outputs"][0].__setitem__("shape", [64, 7]))
    with pytest.raises(shim.InjectError, match=r"shape \[64, 256\], plan says \[64, 7\]"):
        shim.inject(load(), pkg2, packed_dir=built / "packed")


def test_refuses_missing_packed_dir_and_variant(built, tmp_path):
    with pytest.raises(shim.InjectError, match="packed_dir"):
        shim.inject(load(), built / "package")
    pkg = copy_package(built, tmp_path)
    shutil.rmtree(pkg / "build" / "torch-cuda")
    with pytest.raises(shim.InjectError, match="torch-cuda"):
        shim.inject(load(), pkg, packed_dir=built / "packed", use_kernels=False)
    with pytest.raises(shim.InjectError, match="plan.yaml"):
        shim.inject(load(), tmp_path, packed_dir=built / "packed")


def test_cpu_without_interpreter_is_refused(built, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(shim.InjectError, match="TRITON_INTERPRET=1"):
        shim.inject(load(), built / "package", packed_dir=built / "packed")


def test_plan_vendor_routes_reach_the_module(built, tmp_path):
    pkg = copy_package(built, tmp_path)

    def route(plan):
        for lp in plan["layers"]:
            if lp["kind"] == "attention":
                lp["vendor"] = {"attention-prefill": "vendor path faster for ... (measured)"}

    edit_plan(pkg, route)
    model = load()
    shim.inject(model, pkg, packed_dir=built / "packed", use_kernels=False)
    assert model.model.layers[1].self_attn.xpuinject_vendor == frozenset({"attention-prefill"})
    assert not hasattr(model.model.layers[1].mlp, "xpuinject_vendor")


def test_a_failing_layer_is_named(built):
    """A kernel error inside the injected model says which module it came from."""
    model = load()
    shim.inject(model, built / "package", packed_dir=built / "packed", use_kernels=False)
    at = model.model.layers[1].self_attn
    at.xpuinject_qkv_weight = at.xpuinject_qkv_weight[:, :100].contiguous()  # a wrongly packed weight
    with pytest.raises(RuntimeError, match=r"model\.layers\.1\.self_attn.*packed qkv weight has 100 columns"):
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]]))
