"""The emitted package's own inject() on real transformers models from the fixtures, with packages
and packed checkpoints written by the Go binary: loaded the two ways the eval driver loads it
(kernels.get_local_kernel, and a direct import of the variant folder), with and without packed
weights, the released originals, and each mismatch it must refuse with a message naming it."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"


def xpuinject(*args):
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """qwen3-tiny (attention with q/k norms, GQA) packed and packaged by the Go binary, and its
    weights packed again from a plan without the fused add+RMSNorm."""
    out = tmp_path_factory.mktemp("qwen3")
    xpuinject(FIXTURES / "qwen3-tiny", "--out", out / "run", "--skip-eval")
    xpuinject("pack", FIXTURES / "qwen3-tiny", "--out", out / "other-plan", "--disable", "add-rmsnorm")
    return out


def load_package(pkg: Path, how: str):
    """The package's CUDA variant (interpreted on the CPU), as the eval driver loads it."""
    if how == "kernels":
        from kernels import get_local_kernel

        return get_local_kernel(pkg, backend="cuda" if torch.version.cuda else None)
    folder = pkg / "build" / "torch-cuda"
    name = json.loads((folder / "metadata.json").read_text())["id"]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def pkg(built):
    return load_package(built / "run" / "package", "kernels")


def load(name="qwen3-tiny", device="cpu"):
    return transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.bfloat16).eval().to(device)


IDS = torch.randint(0, 500, (2, 11), generator=torch.Generator().manual_seed(3))


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS.to(model.device)).logits.float()


@pytest.mark.parametrize("how", ["kernels", "direct"])
def test_inject_matches_stock_and_releases_originals(built, how, device):
    pkg = load_package(built / "run" / "package", how)
    assert Path(pkg.__file__).is_relative_to(built / "run" / "package")  # the emitted copy, not the sources
    stock, model = load(device=device), load(device=device)
    summary = pkg.inject(model, packed=built / "run" / "packed")
    assert summary["replaced"] == {"Attention": 2, "DecoderLayer": 2, "LMHead": 1, "RMSNorm": 9, "SwiGLUMLP": 2}
    assert summary["packed"] == str(built / "run" / "packed") and summary["packed_tensors"] == 18
    # pack wrote the kept embedding table too: loaded + kept = every tensor of the checkpoint
    from safetensors import safe_open
    with safe_open(str(built / "run" / "packed" / "model.safetensors"), framework="pt") as f:
        on_disk = len(list(f.keys()))
    assert summary["packed_kept_tensors"] == 1 and summary["packed_tensors"] + 1 == on_disk
    assert [k["module"] for k in summary["kept"]] == ["model.embed_tokens"]
    at = model.model.layers[0].self_attn
    assert isinstance(at.q_proj, pkg.Released) and isinstance(model.model.layers[0].mlp.down_proj, pkg.Released)
    assert at.xpuinject_qkv_weight.dtype == torch.bfloat16 and at.xpuinject_qkv_weight.shape == (64, 4 * 32 + 2 * 2 * 32)
    # no second copy of the projection weights is left on the module tree
    names = {n for n, _ in model.named_parameters()}
    assert not any(n.endswith("q_proj.weight") or n.endswith("gate_proj.weight") for n in names)
    # bound per instance, the way kernelize binds
    assert model.model.layers[0].forward.__func__ is pkg.layers.DecoderLayer.forward
    assert at.q_norm.forward.__func__ is pkg.layers.RMSNorm.forward
    a, b = logits(stock), logits(model)
    cos = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()
    assert cos > 0.999 and not torch.equal(a, b), cos


def test_inject_without_packed_weights_packs_the_models_own(built, pkg, device):
    """inject(model) follows the same plan; the layers pack from the model's bf16 weights, which
    are the ones the Go packer rounded from the same F32 checkpoint: the same logits, bit for bit."""
    a, b = load(device=device), load(device=device)
    pkg.inject(a, packed=built / "run" / "packed")
    summary = pkg.inject(b)
    assert summary["packed"] is None and summary["packed_tensors"] == 0
    assert not hasattr(b.model.layers[0].self_attn, "xpuinject_qkv_weight")  # packed on first use
    assert torch.equal(logits(a), logits(b))
    at = b.model.layers[0].self_attn
    assert torch.equal(at.xpuinject_qkv_weight, a.model.layers[0].self_attn.xpuinject_qkv_weight)
    assert isinstance(at.q_proj, torch.nn.Linear)  # the originals stay (nothing packed offline)


def test_check_only_changes_nothing(built, pkg, device):
    model = load(device=device)
    before = {n: p.clone() for n, p in model.named_parameters()}
    r = pkg.inject(model, packed=built / "run" / "packed", check_only=True)
    assert r["checked"] and r["bindings"] == 16 and r["packed_tensors"] == 18
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_inject_sets_nothing_on_classes(built, pkg, device):
    """Bindings and vendor routes live on the instances: a model built afterwards is stock."""
    classes = {type(m) for m in load().modules()}
    before = {c: dict(c.__dict__) for c in classes}
    pkg.inject(load(device=device), packed=built / "run" / "packed")
    assert {c: dict(c.__dict__) for c in classes} == before
    fresh = load()
    assert not any("forward" in m.__dict__ or hasattr(m, "xpuinject_name") for m in fresh.modules())


def test_refuses_wrong_architecture(built, pkg, device):
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "llama-tiny", dtype=torch.bfloat16).to(device)
    with pytest.raises(pkg.InjectError, match=r"made for .*qwen3-tiny, a 'qwen3' model; this model is 'llama'"):
        pkg.inject(model, packed=built / "run" / "packed")


def test_refuses_a_model_of_other_shapes(built, pkg, device):
    """Same architecture and module names, other sizes: named by the tensor that differs."""
    cfg = transformers.AutoConfig.from_pretrained(FIXTURES / "qwen3-tiny")
    cfg.intermediate_size = 96
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval().to(device)
    with pytest.raises(pkg.InjectError, match=r"'model.layers.0.mlp.gate_proj.weight' has shape \[96, 64\] in this model.*needs \[160, 64\]"):
        pkg.inject(model)


def edited(built, tmp_path, fn):
    """A copy of the packed folder whose plan.yaml fn changed, and that plan's path."""
    packed = tmp_path / "packed"
    shutil.copytree(built / "run" / "packed", packed)
    plan = yaml.safe_load((packed / "plan.yaml").read_text())
    fn(plan)
    (packed / "plan.yaml").write_text(yaml.safe_dump(plan))
    return packed, packed / "plan.yaml"


def test_refuses_missing_module(built, pkg, tmp_path, device):
    def move(plan):
        plan["layers"][1]["bindings"][0]["module"] = "model.layers.7.input_layernorm"

    packed, plan = edited(built, tmp_path, move)
    with pytest.raises(pkg.InjectError, match=r"binds module 'model.layers.7.input_layernorm' \(RMSNorm\), which this model does not have"):
        pkg.inject(load(device=device), packed=packed, plan=plan)


def test_refuses_missing_and_misshapen_tensors(built, pkg, tmp_path, device):
    packed, plan = edited(built, tmp_path / "a", lambda p: p["layers"][2]["outputs"][0].__setitem__("name", "model.layers.0.self_attn.nope.weight"))
    with pytest.raises(pkg.InjectError, match=r"nope.weight.*missing from the packed weights"):
        pkg.inject(load(device=device), packed=packed, plan=plan)
    packed, plan = edited(built, tmp_path / "b", lambda p: p["layers"][2]["outputs"][0].__setitem__("shape", [64, 7]))
    with pytest.raises(pkg.InjectError, match=r"shape \[64, 256\], the plan says \[64, 7\]"):
        pkg.inject(load(device=device), packed=packed, plan=plan)


def test_refuses_packed_weights_of_another_plan(built, pkg, device):
    """Weights packed from the same model with another plan (no fused add+RMSNorm): refused,
    naming the first layer whose plan differs, before anything is loaded."""
    model = load(device=device)
    with pytest.raises(pkg.InjectError, match=r"packed from another plan than this package's \(their plan.yaml sha256 .*\): "
                                              r"layers\[3\] \(model.layers.0.post_attention_layernorm\): kernel 'add-rmsnorm' here, 'rmsnorm'"):
        pkg.inject(model, packed=built / "other-plan")
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_plan_digest_recorded_by_the_package_is_checked(built, tmp_path, device):
    """A package that records its plan's sha256 (metadata.json "xpuinject".plan_sha256) takes
    only packed weights whose plan.yaml hashes to it."""
    run = built / "run"
    digest = hashlib.sha256((run / "package" / "plan.yaml").read_bytes()).hexdigest()
    for name, recorded in (("good", digest), ("bad", "0" * 64)):
        copy = tmp_path / name
        shutil.copytree(run / "package", copy)
        meta_path = copy / "build" / "torch-cuda" / "metadata.json"
        meta = json.loads(meta_path.read_text())
        meta["id"] += "_" + name  # a module name of its own: this copy is imported fresh
        meta["xpuinject"] = {"plan_sha256": recorded}
        meta_path.write_text(json.dumps(meta))
        pkg = load_package(copy, "direct")
        if name == "good":
            assert pkg.inject(load(device=device), packed=run / "packed", check_only=True)["checked"]
        else:
            with pytest.raises(pkg.InjectError, match=r"packed from another plan than this package's \(their plan.yaml sha256 is "
                                                      + digest[:12] + r"…, the package records 000000000000…\)"):
                pkg.inject(load(device=device), packed=run / "packed")


def test_refuses_missing_packed_folder_and_plan(built, pkg, tmp_path, device):
    with pytest.raises(pkg.InjectError, match=r"packed='no folder here': no such folder, and not a Hub repo id"):
        pkg.inject(load(device=device), packed="no folder here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(pkg.InjectError, match=r"no plan.yaml: not packed weights written by `xpuinject pack`"):
        pkg.inject(load(device=device), packed=tmp_path / "empty")
    with pytest.raises(pkg.InjectError, match="revision= applies to a Hub repo id only"):
        pkg.inject(load(device=device), packed=built / "run" / "packed", revision="main")


def test_the_source_tree_has_no_plan():
    import xpuinject_kernels

    with pytest.raises(xpuinject_kernels.InjectError, match=r"carries no plan.yaml .*use kernelize\(model\)"):
        xpuinject_kernels.inject(load())


def test_cpu_without_interpreter_is_refused(built, pkg, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(pkg.InjectError, match="TRITON_INTERPRET=1"):
        pkg.inject(load(), packed=built / "run" / "packed")


def test_plan_vendor_routes_reach_the_module(built, pkg, tmp_path, device):
    def route(plan):
        for lp in plan["layers"]:
            if lp["kind"] == "attention":
                lp["bindings"][0]["vendor"] = [{"op": "attention-prefill", "reason": "measured"},
                                               {"op": "o_proj", "max_tokens": 64, "reason": "measured"}]

    packed, plan = edited(built, tmp_path, route)
    model = load(device=device)
    stock = load(device=device)
    pkg.inject(model, packed=packed, plan=plan)
    assert model.model.layers[1].self_attn.xpuinject_vendor == (("attention-prefill", 0, None), ("o_proj", 0, 64))
    assert not hasattr(model.model.layers[1].mlp, "xpuinject_vendor")
    cos = torch.nn.functional.cosine_similarity(logits(model).flatten(), logits(stock).flatten(), dim=0).item()
    assert cos > 0.999


def test_a_failing_layer_is_named(built, pkg, device):
    """A kernel error inside the injected model says which module it came from."""
    model = load(device=device)
    pkg.inject(model, packed=built / "run" / "packed")
    at = model.model.layers[1].self_attn
    at.xpuinject_qkv_weight = at.xpuinject_qkv_weight[:, :100].contiguous()  # a wrongly packed weight
    with pytest.raises(RuntimeError, match=r"model\.layers\.1\.self_attn.*packed qkv weight has 100 columns"):
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]], device=device))


def test_inject_twice_is_refused(built, pkg, device):
    model = load(device=device)
    pkg.inject(model, packed=built / "run" / "packed")
    with pytest.raises(pkg.InjectError, match="already has its forward replaced"):
        pkg.inject(model, packed=built / "run" / "packed")


def stage_of(model, first: bool):
    """What transformers' pipeline parallelism leaves in one of two stages
    (transformers/distributed/pipeline_parallel.py apply_pipeline_parallelism): its half of the
    decoder layers, the embeddings on the first stage, the final norm and head on the last; a
    PipelineIdentityLayer everywhere else."""
    from transformers.distributed.pipeline_parallel import PipelineIdentityLayer

    base = model.model
    n = len(base.layers)
    for i in range(n):
        if (i < n // 2) != first:
            base.layers[i] = PipelineIdentityLayer()
    if first:
        base.norm = PipelineIdentityLayer()
        model.lm_head = PipelineIdentityLayer()
    else:
        base.embed_tokens = PipelineIdentityLayer()
    return model


def test_inject_binds_one_pipeline_stage(built, pkg, device):
    """Each pipeline stage binds the modules it holds and loads only their packed tensors; the
    two stages together bind and load what the whole model does."""
    whole = pkg.inject(load(device=device), packed=built / "run" / "packed")
    first = stage_of(load(device=device), True)
    last = stage_of(load(device=device), False)
    a = pkg.inject(first, packed=built / "run" / "packed")
    b = pkg.inject(last, packed=built / "run" / "packed")
    assert a["replaced_modules"] == [m for m in whole["replaced_modules"] if m.startswith("model.layers.0.") or m == "model.layers.0"]
    assert sorted(a["replaced_modules"] + b["replaced_modules"]) == whole["replaced_modules"]
    assert sorted(a["other_stages"]) == b["replaced_modules"] and sorted(b["other_stages"]) == a["replaced_modules"]
    assert a["packed_tensors"] + b["packed_tensors"] == whole["packed_tensors"] == 18
    assert a["packed_bytes"] + b["packed_bytes"] == whole["packed_bytes"]
    assert a["kept"] == b["kept"] == whole["kept"] and "other_stages" not in whole
    assert first.model.layers[0].forward.__func__ is pkg.layers.DecoderLayer.forward
    assert last.model.layers[1].forward.__func__ is pkg.layers.DecoderLayer.forward
    assert last.lm_head.forward.__func__ is pkg.layers.LMHead.forward
    assert not hasattr(last.model.layers[1], "xpuinject_qkv_weight") and hasattr(last.model.layers[1].self_attn, "xpuinject_qkv_weight")


def test_inject_refuses_a_model_spread_over_devices(pkg):
    """Triton launches on the process's current device: a model whose parameters sit on two
    devices in one process (a device_map) is refused, with the way that works."""

    class Spread(torch.nn.Module):
        def parameters(self, recurse=True):
            return iter([torch.empty(1, device="meta"), _on("cuda:0"), _on("cuda:1")])

    with pytest.raises(pkg.InjectError, match=r"spread over cuda:0, cuda:1 .*pipeline stages, one process per device"):
        pkg.inject(Spread())


def _on(device):
    """A stand-in for a parameter on a device this machine may not have: only .device is read."""
    return type("OnDevice", (), {"device": torch.device(device)})()
