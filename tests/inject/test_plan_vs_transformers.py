"""The Go planner's view of a model agrees with the modules transformers builds from the same config.

For every fixture, `bin/xpuinject plan <fixture> --json` (built by scripts/test) must name
only modules that exist in `model.named_modules()`, with the class transformers uses for them, and
only tensors that exist in the checkpoint and the model's state_dict; every state_dict tensor
must be used by some planned layer (allow-list below); and every binding names a module of the
class transformers builds there, whose attributes the binding says the layer reads exist.
Plan schema: inject/plan/types.go, inject/PLAN.md.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import transformers
from safetensors import safe_open
from transformers import AutoConfig

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"
BIN = ROOT / "bin" / "xpuinject"

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def run_plan(folder: Path) -> dict:
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    env = dict(os.environ, HF_HUB_OFFLINE="1")  # a local folder must never touch the network
    r = subprocess.run(
        [str(BIN), "plan", str(folder), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, f"xpuinject plan {folder.name} exited {r.returncode}:\n{r.stderr[-3000:]}"
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"xpuinject plan {folder.name}: stdout is not JSON ({e}):\n{r.stdout[:2000]}") from e


def checkpoint_names(folder: Path) -> set[str]:
    names: set[str] = set()
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(f, "pt") as st:
            names |= set(st.keys())
    return names


_EXPERT = re.compile(r"(.*)\.(?:mlp|block_sparse_moe)\.experts\.\d+\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight")
_ROUTER = re.compile(r"(.*)\.block_sparse_moe\.gate\.weight")
# GraniteMoE's stacked experts (and the plan's views of one expert's part: "...weight[3][0:40]")
_STACKED = re.compile(r"(.*\.block_sparse_moe)\.(input_linear|output_linear|router\.layer)\.weight(\[.*)?")


def loaded(name: str) -> str:
    """The state_dict name a checkpoint tensor loads into: MoE experts' per-expert 2D tensors are
    stacked at load into experts.gate_up_proj / experts.down_proj, Mixtral's block_sparse_moe is
    renamed mlp, and GraniteMoE's stacked tensors are renamed in place (transformers 5.17
    conversion_mapping.py)."""
    m = _STACKED.fullmatch(name)
    if m:
        return m.group(1) + {"input_linear": ".experts.gate_up_proj", "output_linear": ".experts.down_proj",
                             "router.layer": ".router.weight"}[m.group(2)]
    m = _EXPERT.fullmatch(name)
    if m:
        stacked = "down_proj" if m.group(2) in ("down_proj", "w2") else "gate_up_proj"
        return f"{m.group(1)}.mlp.experts.{stacked}"
    m = _ROUTER.fullmatch(name)
    return f"{m.group(1)}.mlp.gate.weight" if m else name


def referenced(layer: dict) -> set[str]:
    refs = set(layer.get("tensors", {}).values())
    for out in layer.get("outputs") or []:
        refs |= set(out.get("sources") or [])
    return {loaded(r) for r in refs}


@pytest.fixture(scope="module", params=FIXTURE_NAMES)
def planned(request):
    name = request.param
    folder = FIXTURES / name
    plan = run_plan(folder)
    cfg = AutoConfig.from_pretrained(folder)
    model = getattr(transformers, cfg.architectures[0]).from_pretrained(folder)
    model.eval()
    return name, folder, cfg, plan, model


def test_plan_header(planned):
    name, _, cfg, plan, _ = planned
    assert plan.get("schema") == 3, f"{name}: schema {plan.get('schema')!r}"
    assert plan.get("arch") == cfg.model_type
    assert isinstance(plan.get("layers"), list) and plan["layers"], f"{name}: no layers planned"


def test_planned_modules_exist_with_transformers_class(planned):
    name, _, _, plan, model = planned
    modules = dict(model.named_modules())
    seen = set()
    for layer in plan["layers"]:
        mod = layer.get("module")
        assert mod, f"{name}: layer without module: {layer}"
        assert mod not in seen, f"{name}: module {mod} planned twice"
        seen.add(mod)
        assert mod in modules, f"{name}: planned module {mod} is not in the transformers model"
        want = type(modules[mod]).__name__
        assert layer.get("class") == want, f"{name}: {mod} planned as class {layer.get('class')!r}, transformers has {want}"
        assert layer.get("kind"), f"{name}: {mod} has no kind"
        assert layer.get("kernel"), f"{name}: {mod} has no kernel (use 'keep')"
        if layer["kernel"] == "keep":
            assert layer.get("reason"), f"{name}: {mod} is kept without a reason"


def test_bindings_name_transformers_modules_and_attributes(planned):
    """The modules a plan binds beyond its layers (decoder layers of a fused add+RMSNorm, qwen3's
    q/k norms) are real, of the class the plan says, and have what their layer reads: the module
    attributes (dotted for a child's) and, for the packed tensors, the children they are made of."""
    name, _, _, plan, model = planned
    modules = dict(model.named_modules())
    contract = json.loads((ROOT / "kernels" / "python" / "xpuinject_kernels" / "contract.json").read_text())
    n = 0
    for layer in plan["layers"]:
        for b in layer.get("bindings") or []:
            n += 1
            m = modules.get(b["module"])
            assert m is not None, f"{name}: binding {b['module']} is not a transformers module"
            assert type(m).__name__ == b["class"], f"{name}: {b['module']} is a {type(m).__name__}, the plan says {b['class']}"
            spec = contract["layers"][b["layer"]]
            assert b["class"] in spec["classes"], f"{name}: {b['layer']} does not replace {b['class']} (contract.json)"
            packed = set(spec["packed"].values())
            for r in b.get("reads") or []:
                if r in packed:
                    continue
                obj = m
                for part in r.split("."):
                    assert hasattr(obj, part), f"{name}: {b['module']} ({b['class']}) has no {r}, which {b['layer']} reads"
                    obj = getattr(obj, part)
            if packed & set(b.get("reads") or []):
                for child in spec["sources"]:
                    assert child in m._modules, f"{name}: {b['module']} has no {child} to pack {b['layer']} from"
    assert n > 0, f"{name}: nothing bound"


def test_plan_tensors_exist_and_cover_state_dict(planned):
    name, folder, cfg, plan, model = planned
    sd = model.state_dict()
    stored = {loaded(n) for n in checkpoint_names(folder)}
    assert stored <= set(sd), f"{name}: checkpoint tensors not in the model: {sorted(stored - set(sd))[:5]}"

    used: set[str] = set()
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    for layer in plan["layers"]:
        mod = layer["module"]
        refs = referenced(layer)
        for t in refs:
            assert t in stored, f"{name}: {mod} references {t}, which is not in the checkpoint"
            assert t in sd, f"{name}: {mod} references {t}, which is not in the model's state_dict"
            # A layer's tensors live under its module; the one exception is a tied lm_head,
            # whose weight is the embedding's.
            if not (tied and mod == "lm_head" and t == "model.embed_tokens.weight"):
                assert t.startswith(mod + "."), f"{name}: {mod} references {t}, outside the module"
        used |= refs

    # state_dict entries no planned layer has to read:
    allowed = {
        # BatchNorm's training counter (only used when momentum is None during training).
        k
        for k in sd
        if k.endswith(".num_batches_tracked")
    }
    if tied:
        # Tied lm_head: the state_dict lists lm_head.weight, the checkpoint does not store it.
        allowed.add("lm_head.weight")
    # LeViT's attention_bias_idxs is a non-persistent buffer (not in state_dict): nothing to allow.
    missing = sorted(set(sd) - used - allowed)
    assert not missing, f"{name}: state_dict tensors no planned layer references: {missing[:10]}"


def test_plan_outputs_are_consistent_with_sources(planned):
    """Light independent checks of what pack will write (the planner's own tests go deeper)."""
    name, _, _, plan, model = planned
    sd = model.state_dict()
    for layer in plan["layers"]:
        for out in layer.get("outputs") or []:
            where = f"{name}: {layer['module']} output {out.get('name')}"
            assert out.get("name") and out.get("sources"), f"{where}: no name or sources"
            shape = out.get("shape")
            assert isinstance(shape, list) and all(isinstance(d, int) and d > 0 for d in shape), f"{where}: shape {shape}"
            tf = out.get("transforms") or []
            if "stack-experts" in tf:  # [E, ...] of each expert's K-major slice of the stacked tensor
                stacked = sd[loaded(out["sources"][0])]
                assert shape == [stacked.shape[0], stacked.shape[2], stacked.shape[1]], f"{where}: {shape} vs {stacked.shape}"
                continue
            srcs = [sd[loaded(s)] for s in out["sources"]]
            if any(t.startswith("concat-") for t in tf):
                split = out.get("split") or []
                assert split == [s.shape[0] for s in srcs], f"{where}: split {split} vs sources"
                dims = list(srcs[0].shape)
                dims[0] = sum(split)
            elif not tf or tf == ["cast-bf16"]:
                assert len(srcs) == 1, f"{where}: copy/cast of {len(srcs)} sources"
                dims = list(srcs[0].shape)
            else:
                continue  # folds: PLAN.md's source orders; checked by the Go tests
            if "prepack-kmajor" in tf:
                assert len(dims) == 2 and out.get("layout") == "k-major", f"{where}: prepack layout"
                dims = dims[::-1]
            assert shape == dims, f"{where}: shape {shape}, sources imply {dims}"
            if "cast-bf16" in tf:
                assert out.get("dtype") == "BF16", f"{where}: cast-bf16 but dtype {out.get('dtype')}"
