"""xpuinject shim: put an xpuinject kernel package and its Go-packed weights into a
transformers model.

    from xpuinject_shim import inject
    summary = inject(model, "out/package", packed_dir="out/packed")

The package (written by `xpuinject package`) holds the Triton kernels as a kernel-hub
package (build/torch-<backend>/) and the plan (plan.yaml) that says which module gets
which layer. The packed checkpoint (written by `xpuinject pack`) holds the weights in the
layout the kernels read (BatchNorm folded, QKV and gate/up concatenated, bf16, K-major).

Two ways in, same result:
- with the `kernels` package installed (a version that has `kernelize`), the layers are
  loaded through `LocalLayerRepository` and bound by `kernelize`, restricted by a
  per-module condition to the modules the plan names;
- without it, the package's variant folder is imported directly and each planned module's
  forward is rebound by hand (what kernelize does: `MethodType(layer.forward, module)`).

Packed tensors are attached to the planned modules as non-persistent buffers named by the
plan (`xpuinject_qkv_weight`, ...); the original parameters they replace are released
(the submodules are swapped for an empty `Released` placeholder), so the device never holds
both copies. Only stdlib, torch, safetensors and (optionally) kernels and yaml are imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import torch
from torch import nn

__all__ = ["inject", "load_plan", "load_kernel_package", "InjectError"]


class InjectError(RuntimeError):
    """A plan, package or checkpoint does not fit the model it is injected into."""


class Released(nn.Module):
    """Placeholder for a submodule whose weights now live, packed, on its parent."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def forward(self, *args, **kwargs):  # pragma: no cover - guard only
        raise InjectError(f"{self.what}: weights were released by xpuinject; the packed layer must be used")

    def extra_repr(self) -> str:
        return f"released: {self.what}"


# ---------------------------------------------------------------------------- plan


def load_plan(package_dir) -> dict:
    """Read plan.yaml (or plan.json) from a package folder."""
    package_dir = Path(package_dir)
    pj = package_dir / "plan.json"
    py = package_dir / "plan.yaml"
    if pj.exists():
        return json.loads(pj.read_text())
    if not py.exists():
        raise InjectError(f"{package_dir}: no plan.yaml; is this a package written by `xpuinject package`?")
    try:
        import yaml
    except ImportError as e:  # huggingface_hub depends on pyyaml, so this is rare
        raise InjectError("reading plan.yaml needs PyYAML: pip install pyyaml") from e
    plan = yaml.safe_load(py.read_text())
    if not isinstance(plan, dict) or plan.get("schema") != 1 or not isinstance(plan.get("layers"), list):
        raise InjectError(f"{py}: not an xpuinject plan (schema 1 with a layers list)")
    return plan


# ---------------------------------------------------------------------------- package


def _device_backend(device: torch.device) -> str:
    if device.type in ("cuda", "xpu"):
        return device.type
    if device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise InjectError(
                "the model is on the CPU: the Triton kernels run there only under the interpreter; "
                "set TRITON_INTERPRET=1 before importing triton (slow; for tests) or move the model to cuda/xpu"
            )
        return "cpu"
    raise InjectError(f"device {device} is not supported (cuda, xpu, or cpu under TRITON_INTERPRET=1)")


def _kernels_api():
    """The `kernels` package when a compatible version is importable, else None."""
    if os.environ.get("XPUINJECT_NO_KERNELS") == "1":
        return None
    try:
        import kernels  # noqa: F401
        from kernels import LocalLayerRepository, Mode, get_local_kernel, kernelize, use_kernel_mapping
        from kernels import replace_kernel_forward_from_hub
    except Exception:
        return None
    return types.SimpleNamespace(
        LocalLayerRepository=LocalLayerRepository,
        Mode=Mode,
        get_local_kernel=get_local_kernel,
        kernelize=kernelize,
        use_kernel_mapping=use_kernel_mapping,
        replace_kernel_forward_from_hub=replace_kernel_forward_from_hub,
    )


def _variant_dir(package_dir: Path, backend: str) -> Path:
    # The CPU has no variant of its own: the CUDA variant's Triton source runs under the
    # interpreter (TRITON_INTERPRET=1).
    name = "cuda" if backend == "cpu" else backend
    d = package_dir / "build" / f"torch-{name}"
    if not (d / "metadata.json").exists():
        raise InjectError(f"{package_dir}: no build/torch-{name}/metadata.json (package lacks the {name} variant)")
    return d


def load_kernel_package(package_dir, backend: str, api=None):
    """Import the package's variant for backend; through kernels.get_local_kernel when given."""
    package_dir = Path(package_dir).resolve()
    variant = _variant_dir(package_dir, backend)
    if api is not None:
        # get_local_kernel accepts "cpu" or the backend torch was built for; on a CPU run
        # of a CUDA torch build the CUDA variant is the one we want (interpreted).
        kb = backend
        if backend == "cpu":
            kb = "cuda" if torch.version.cuda else None
        return api.get_local_kernel(package_dir, backend=kb)
    meta = json.loads((variant / "metadata.json").read_text())
    mod_id = meta.get("id") or ("_" + meta["name"].replace("-", "_"))
    if mod_id in sys.modules:
        return sys.modules[mod_id]
    spec = importlib.util.spec_from_file_location(mod_id, variant / "__init__.py")
    if spec is None or spec.loader is None:
        raise InjectError(f"{variant}: cannot import __init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_id] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(mod_id, None)
        raise
    return module


# ---------------------------------------------------------------------------- weights


def _open_packed(packed_dir: Path):
    """Map tensor name -> file for the packed checkpoint (single file or index)."""
    idx = packed_dir / "model.safetensors.index.json"
    if idx.exists():
        wm = json.loads(idx.read_text())["weight_map"]
        return {k: packed_dir / v for k, v in wm.items()}
    single = packed_dir / "model.safetensors"
    if not single.exists():
        raise InjectError(f"{packed_dir}: no model.safetensors or model.safetensors.index.json")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {k: single for k in f.keys()}


def _load_outputs(plan_layers, packed_dir: Path, device) -> dict:
    """Read every output tensor the plan's replaced layers need, straight onto device."""
    from safetensors import safe_open

    where = _open_packed(packed_dir)
    want = {}
    for lp in plan_layers:
        for out in lp.get("outputs") or []:
            name = out["name"]
            if name not in where:
                raise InjectError(
                    f"{packed_dir}: tensor {name!r} (layer {lp['module']}) is missing from the packed checkpoint; "
                    "was it packed from the same plan?"
                )
            want.setdefault(where[name], []).append(out)
    tensors = {}
    for path, outs in want.items():
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            for out in outs:
                t = f.get_tensor(out["name"])
                if list(t.shape) != list(out["shape"]):
                    raise InjectError(
                        f"{path.name}: tensor {out['name']!r} has shape {list(t.shape)}, plan says {out['shape']}"
                    )
                tensors[out["name"]] = t
    return tensors


def _release(module: nn.Module, child: str, owner: str):
    if child in module._modules and not isinstance(module._modules[child], Released):
        module._modules[child] = Released(f"{owner}.{child}")


# Which children each layer kind's packed weights replace (released after attaching).
_RELEASE = {
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp-swiglu": ("gate_proj", "up_proj", "down_proj"),
    "linear-bn": ("linear", "batch_norm"),
    "bn-linear": ("batch_norm", "linear"),
    "conv-bn": ("convolution", "batch_norm"),
}


def _attach(module: nn.Module, lp: dict, tensors: dict):
    """Attach a layer's packed tensors to its module; release what they replace."""
    for out in lp.get("outputs") or []:
        t = tensors[out["name"]]
        attr = out.get("attr") or ""
        if attr:
            if attr in module._parameters:
                del module._parameters[attr]
            module.register_buffer(attr, t, persistent=False)
        else:
            # Replaces the module's own tensor of the same name (e.g. an RMSNorm weight).
            sub = module
            prefix = lp["module"] + "."
            rel = out["name"][len(prefix):] if out["name"].startswith(prefix) else out["name"].rsplit(".", 1)[-1]
            parts = rel.split(".")
            for p in parts[:-1]:
                sub = getattr(sub, p)
            old = getattr(sub, parts[-1], None)
            if old is None:
                raise InjectError(f"{lp['module']}: has no tensor {rel!r} to replace with {out['name']!r}")
            if tuple(old.shape) != tuple(t.shape):
                raise InjectError(f"{lp['module']}.{rel}: shape {tuple(old.shape)}, packed {tuple(t.shape)}")
            if isinstance(old, nn.Parameter):
                setattr(sub, parts[-1], nn.Parameter(t, requires_grad=False))
            else:
                setattr(sub, parts[-1], t)
    for child in _RELEASE.get(lp["kind"], ()):
        if lp.get("outputs"):
            _release(module, child, lp["module"])


# ---------------------------------------------------------------------------- layers


def _conv_bn_forward(self, embeddings):
    """Conv2d with BatchNorm folded into its weights (LeViT patch embedding)."""
    conv = self._xpuinject_conv
    return torch.nn.functional.conv2d(
        embeddings.to(self.xpuinject_weight.dtype),
        self.xpuinject_weight,
        self.xpuinject_bias,
        conv["stride"],
        conv["padding"],
        conv["dilation"],
        conv["groups"],
    )


def _decoder_parent(module_path: str) -> str:
    return module_path.rsplit(".", 1)[0]


def _planned_bindings(plan: dict):
    """(module path, layer class name, layer plan) for every module whose forward changes.

    The post-attention RMSNorm the planner fused with the residual add ("add-rmsnorm")
    is carried out by patching its decoder layer with the package's `DecoderLayer`.
    """
    out = []
    for lp in plan["layers"]:
        layer = lp.get("layer") or ""
        if lp.get("kernel") == "add-rmsnorm":
            out.append((_decoder_parent(lp["module"]), "DecoderLayer", lp))
            layer = layer or "RMSNorm"
        if layer and lp.get("kernel") != "keep":
            out.append((lp["module"], layer, lp))
        if layer == "Attention":
            # qwen3's per-head q/k RMSNorms run inside the attention layer: same kernel
            for role in ("q_norm", "k_norm"):
                if f"{role}.weight" in (lp.get("tensors") or {}):
                    out.append((f"{lp['module']}.{role}", "RMSNorm", lp))
    return out


def inject(model: nn.Module, package_dir, packed_dir=None, *, use_kernels="auto", check_only=False) -> dict:
    """Replace the modules the package's plan names with the package's layers.

    Args:
        model: a transformers model built from the same checkpoint the plan was made for,
            already on its device and in eval mode (bf16 recommended).
        package_dir: folder written by `xpuinject package` (plan.yaml + build/).
        packed_dir: folder written by `xpuinject pack`; the replaced layers read their
            packed weights from it. Required when the plan has packed outputs.
        use_kernels: "auto" (kernels when importable), True (require it), False (never).
        check_only: validate plan/package/checkpoint against the model, change nothing.

    Returns a summary dict: path ("kernels" or "direct"), backend, replaced modules by
    layer class, kept modules with reasons, packed tensor count and bytes.
    """
    package_dir = Path(package_dir)
    plan = load_plan(package_dir)
    params = list(model.parameters())
    if not params:
        raise InjectError("the model has no parameters")
    device = params[0].device
    backend = _device_backend(device)
    api = None
    if use_kernels in ("auto", True):
        api = _kernels_api()
        if api is None and use_kernels is True:
            raise InjectError("use_kernels=True but a kernels package with kernelize is not importable")

    arch = getattr(getattr(model, "config", None), "model_type", None)
    if arch and plan.get("arch") and arch != plan["arch"]:
        raise InjectError(f"plan is for model_type {plan['arch']!r}, the model is {arch!r}")

    named = dict(model.named_modules())
    bindings = _planned_bindings(plan)
    for path, layer, lp in bindings:
        if path not in named:
            raise InjectError(f"plan names module {path!r} (layer {layer}), which the model does not have")
        cls = type(named[path]).__name__
        if path == lp["module"] and layer == lp.get("layer") and lp.get("class") and cls != lp["class"]:
            raise InjectError(f"module {path!r} is a {cls}, plan expected {lp['class']}")

    replaced_layers = [lp for lp in plan["layers"] if lp.get("outputs") and (lp.get("layer") or lp["kind"] == "conv-bn")]
    if replaced_layers and packed_dir is None:
        raise InjectError("the plan has packed weights; pass packed_dir (the folder `xpuinject pack` wrote)")
    tensors = _load_outputs(replaced_layers, Path(packed_dir), device) if replaced_layers else {}

    kmod = load_kernel_package(package_dir, backend, api)
    if backend == "cpu":
        # Triton's CPU interpreter needs the package's emulation fixes (bf16 rounding and
        # dot, numpy 2 indices) to compute what the compiled kernels compute.
        importlib.import_module(kmod.__name__ + "._interpret").apply()
    layers_ns = getattr(kmod, "layers", None)
    if layers_ns is None:
        raise InjectError(f"{package_dir}: the kernel package exposes no `layers`")
    for _, layer, _ in bindings:
        if not hasattr(layers_ns, layer):
            raise InjectError(f"{package_dir}: the package has no layer class {layer!r}")
    if check_only:
        return {"checked": True, "bindings": len(bindings), "tensors": len(tensors)}

    # 0. every module we touch knows its path, so a kernel error names the layer
    for path, _, _ in bindings:
        named[path].xpuinject_name = path
    # 1. weights, and the sub-operations the plan sends to the vendor path (measured faster)
    for lp in plan["layers"]:
        if lp.get("vendor") and lp["module"] in named:
            named[lp["module"]].xpuinject_vendor = frozenset(lp["vendor"])
    nbytes = 0
    for lp in replaced_layers:
        module = named[lp["module"]]
        if lp["kind"] == "conv-bn":
            conv = module.convolution
            module._xpuinject_conv = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
        _attach(module, lp, tensors)
        if lp["kind"] == "conv-bn":
            module.forward = types.MethodType(_conv_bn_forward, module)
        nbytes += sum(tensors[o["name"]].numel() * tensors[o["name"]].element_size() for o in lp["outputs"])
    del tensors

    # 2. forwards
    by_layer: dict[str, list[str]] = {}
    for path, layer, _ in bindings:
        by_layer.setdefault(layer, []).append(path)
    used = "direct"
    if api is not None:
        used = "kernels"
        mapping = {}
        for layer, paths in by_layer.items():
            marker = f"xpuinject:{layer}"
            for p in paths:
                named[p]._xpuinject_layer = marker
            for cls in {type(named[p]) for p in paths}:
                api.replace_kernel_forward_from_hub(
                    cls, marker, condition=lambda m, marker=marker: getattr(m, "_xpuinject_layer", None) == marker
                )
            # On the CPU (interpreter runs) kernelize is asked for the "cpu" device; the
            # LocalLayerRepository then loads the variant for torch's own backend (the
            # CUDA build's torch-cuda), whose Triton source the interpreter runs.
            mapping[marker] = {backend: api.LocalLayerRepository(repo_path=package_dir.resolve(), layer_name=layer)}
        with api.use_kernel_mapping(mapping, inherit_mapping=False):
            api.kernelize(model, mode=api.Mode.INFERENCE, device=backend)
    else:
        for layer, paths in by_layer.items():
            cls = getattr(layers_ns, layer)
            for p in paths:
                named[p].forward = types.MethodType(cls.forward, named[p])

    folded_convs = sum(1 for lp in replaced_layers if lp["kind"] == "conv-bn")
    replaced = {k: len(v) for k, v in sorted(by_layer.items())}
    if folded_convs:
        replaced["ConvBN(folded, stock conv2d)"] = folded_convs
    kept = [
        {"module": lp["module"], "reason": lp.get("reason", "")}
        for lp in plan["layers"]
        if lp.get("kernel") == "keep"
    ]
    return {
        "path": used,
        "backend": backend,
        "replaced": replaced,
        "replaced_modules": sorted(p for ps in by_layer.values() for p in ps),
        "kept": kept,
        "packed_tensors": sum(len(lp["outputs"]) for lp in replaced_layers),
        "packed_bytes": nbytes,
    }
