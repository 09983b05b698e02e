"""Putting this package's layers into a transformers model.

    from kernels import get_kernel
    xpuinject = get_kernel("ORG/KERNEL", version=1, trust_remote_code=True)
    xpuinject.inject(model, packed="ORG/KERNEL-packed")  # the offline-packed weights of the plan
    xpuinject.inject(model)                               # the plan; layers pack the model's weights
    xpuinject.kernelize(model)                            # no plan: any supported model

`inject` carries out the package's plan (plan.yaml beside this file in an emitted package): it
binds every module the plan's `bindings` name to the layer class they name, sets the vendor
routes they carry, and decides nothing else. With `packed=` (a folder written by `xpuinject
pack`, or a Hub repo published by `xpuinject push`) it loads the offline-packed tensors onto
the modules and releases the original projections, so the device never holds both copies;
without it the layers pack from the modules' own weights on first use.

`kernelize` needs no plan: it binds every module of a supported class (contract.json's
`classes`) whose shapes the kernels take, through `kernels.kernelize` when the `kernels`
package is importable. That needs `kernel_layer_name` on the module's class, which is set only
for the duration of the call and restored after it, so other models of the same classes stay
stock. Either way a module is bound the way kernels binds it, per instance
(`module.forward = MethodType(layer.forward, module)`, kernels/layer/layer.py `_replace_forward`).

Imports: stdlib, torch and this package; `huggingface_hub` (to download packed weights),
`safetensors` (to read them), `yaml` (to read plan.yaml) and `kernels` are imported when used.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import re
import types
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import nn

from . import _backend
from . import layers as _layers
from . import moe_layer
from .attention import register_transformers
from .contract import (ATTENTION_HEAD_DIMS, LAYERS, MIN_GEMM_DIM, NAME_ATTR, PACKED_CHECKS,
                       QK_NORMS_AFTER_ROPE_MODULES, VENDOR_ATTR, layer_for_class)
from .families import geglu_epilogue, mlp_activation
from .packing import Released, decode_layout

__all__ = ["inject", "kernelize", "load_plan", "supported_bindings", "mark_transformers_classes", "kernel_mapping",
           "kernel_config_mapping",
           "InjectError", "PLAN_SCHEMA", "PLAN_FILE"]

# The plan.yaml schema this package reads (inject/PLAN.md).
PLAN_SCHEMA = 3
PLAN_FILE = "plan.yaml"
# Not resolve(): in the HF cache a snapshot's files are symlinks into blobs/, and the plan
# and metadata are found beside the snapshot path, not beside the blob.
_HERE = Path(os.path.abspath(__file__)).parent
# What `packed=` downloads from a Hub repo: the plan and the tensors, not the tokenizer or card.
_PACKED_PATTERNS = [PLAN_FILE, "*.safetensors", "model.safetensors.index.json"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class InjectError(RuntimeError):
    """A plan, package or packed checkpoint does not fit the model it is injected into."""


# ---------------------------------------------------------------------------- plan


def _parse_plan(text: bytes, where: str) -> dict:
    try:
        import yaml
    except ImportError as e:  # huggingface_hub and transformers both depend on PyYAML
        raise InjectError(f"{where}: reading plan.yaml needs PyYAML (pip install pyyaml)") from e
    try:
        plan = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise InjectError(f"{where}: not valid YAML: {e}") from e
    if not isinstance(plan, dict) or not isinstance(plan.get("layers"), list):
        raise InjectError(f"{where}: not an xpuinject plan (a mapping with a layers list)")
    if plan.get("schema") != PLAN_SCHEMA:
        raise InjectError(
            f"{where}: plan schema {plan.get('schema')!r}, this package reads schema {PLAN_SCHEMA}: "
            "use the package and packed weights written by the same xpuinject run"
        )
    return plan


def load_plan(path: Union[str, os.PathLike, None] = None) -> dict:
    """Read a plan.yaml: `path`, a folder holding one, or (None) this package's own plan."""
    p = Path(path) if path is not None else _HERE / PLAN_FILE
    if p.is_dir():
        p = p / PLAN_FILE
    if not p.is_file():
        if path is None:
            raise InjectError(
                f"{_HERE}: this copy of the package carries no {PLAN_FILE} (it is the source tree, not a package "
                "written by `xpuinject package`): pass plan=PATH, or use kernelize(model), which needs no plan"
            )
        raise InjectError(f"{p}: no such file; is this a package or packed folder written by xpuinject?")
    return _parse_plan(p.read_bytes(), str(p))


def _recorded_plan_digest() -> Optional[str]:
    """The sha256 of plan.yaml this package records in its metadata.json, if it records one."""
    meta = _HERE / "metadata.json"
    if not meta.is_file():
        return None
    try:
        d = json.loads(meta.read_text(encoding="utf-8")).get("xpuinject", {}).get("plan_sha256")
    except (ValueError, AttributeError):
        return None
    return d if isinstance(d, str) and d else None


def _source(plan: dict) -> str:
    src = plan.get("source") or {}
    if src.get("repo"):
        return src["repo"] + (f"@{src['revision']}" if src.get("revision") else "")
    return src.get("path") or "an unnamed model"


def _bindings(plan: dict) -> Iterator[Tuple[dict, dict]]:
    for lp in plan["layers"]:
        for b in lp.get("bindings") or ():
            yield lp, b


def _first_difference(a: dict, b: dict) -> str:
    """Where two plans disagree on what injection does, in words; "" when they agree."""
    if len(a["layers"]) != len(b["layers"]):
        return f"{len(a['layers'])} layers here, {len(b['layers'])} in the packed plan"
    out_keys = ("name", "attr", "shape", "dtype", "layout", "split", "transforms")
    for i, (x, y) in enumerate(zip(a["layers"], b["layers"])):
        at = f"layers[{i}] ({x.get('module')})"
        for k in ("module", "kind", "class", "kernel", "layer"):
            if x.get(k) != y.get(k):
                return f"{at}: {k} {x.get(k)!r} here, {y.get(k)!r} in the packed plan"
        if (x.get("bindings") or []) != (y.get("bindings") or []):
            return f"{at}: bindings differ"
        xo, yo = x.get("outputs") or [], y.get("outputs") or []
        if [[o.get(k) for k in out_keys] for o in xo] != [[o.get(k) for k in out_keys] for o in yo]:
            return f"{at}: outputs differ"
    return ""


# ---------------------------------------------------------------------------- model checks


def _backend_of(model: nn.Module) -> Tuple[torch.device, str]:
    t = next(model.parameters(), None)
    if t is None:
        t = next(model.buffers(), None)
    if t is None:
        raise InjectError("the model has no parameters or buffers to tell its device by")
    dev = t.device
    spread = sorted({str(p.device) for p in model.parameters() if p.device.type != "meta"})
    if len(spread) > 1:
        # Triton launches on the process's current device, not on the device of the tensors
        raise InjectError(
            f"the model is spread over {', '.join(spread)} (a device_map): the kernels run on one device per process; "
            "split the model into pipeline stages, one process per device (transformers' DistributedConfig(pp_size=N) "
            "under torchrun, as `xpuinject eval --gpus N` does), or load it on one device"
        )
    if dev.type in ("cuda", "xpu"):
        return dev, dev.type
    if dev.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise InjectError(
                "the model is on the CPU: the Triton kernels run there only under the interpreter; set "
                "TRITON_INTERPRET=1 before triton is imported (slow; for tests) or move the model to cuda or xpu"
            )
        # The interpreter needs the package's emulation fixes (bf16 rounding and dot, numpy 2
        # indices) to compute what the compiled kernels compute.
        from . import _interpret

        _interpret.apply()
        return dev, "cpu"
    raise InjectError(f"device {dev} is not supported (cuda, xpu, or cpu under TRITON_INTERPRET=1)")


def _check_signature(module: nn.Module, layer: str, path: str) -> None:
    """The layer's forward takes the parameters of the forward it replaces (what kernels'
    `_validate_layer` checks), so a transformers release that changed them is caught here."""
    ref = inspect.signature(type(module).forward).parameters.values()
    got = inspect.signature(getattr(_layers, layer).forward).parameters.values()
    if [p.kind for p in ref] != [p.kind for p in got]:
        raise InjectError(
            f"module {path!r}: {type(module).__name__}.forward{inspect.signature(type(module).forward)} does not take "
            f"the parameters of the package's {layer}.forward{inspect.signature(getattr(_layers, layer).forward)}: "
            "this transformers version is not the one the package was written for"
        )


def _expected_source_shapes(out: dict) -> List[Tuple[int, Optional[List[int]]]]:
    """(source index, shape the model's tensor must have) for the sources whose shape an output
    fixes (inject/PLAN.md, "Output tensors"); the rest of a fold's sources are not checked."""
    tr = out.get("transforms") or []
    shape = [int(d) for d in out["shape"]]
    kmajor = out.get("layout") == "k-major"
    weight = out.get("role") == "weight"
    if "concat-qkv" in tr or "concat-gate-up" in tr:
        split = [int(n) for n in out.get("split") or []]
        if weight:
            k = shape[0] if kmajor else shape[1]
            return [(i, [n, k]) for i, n in enumerate(split)]
        return [(i, [n]) for i, n in enumerate(split)]
    if "fold-bn" in tr or "fold-bn-input" in tr:
        return [(0, [shape[1], shape[0]])] if weight else []
    if "fold-conv-bn" in tr:
        return [(0, shape)] if weight else []
    return [(0, shape[::-1] if kmajor else shape)]


def _check_model(plan: dict, model: nn.Module, named: Dict[str, nn.Module], where: str) -> None:
    """Everything the plan binds and packs fits this model, before anything changes."""
    arch = getattr(getattr(model, "config", None), "model_type", None)
    made_for = f"the plan ({where}) was made for {_source(plan)}"
    if arch and plan.get("arch") and arch != plan["arch"]:
        raise InjectError(f"{made_for}, a {plan['arch']!r} model; this model is {arch!r}")
    for lp, b in _bindings(plan):
        path, layer = b["module"], b["layer"]
        m = named.get(path)
        if m is None:
            raise InjectError(f"{made_for}: it binds module {path!r} ({layer}), which this model does not have")
        if b.get("class") and type(m).__name__ != b["class"]:
            raise InjectError(f"{made_for}: module {path!r} is a {type(m).__name__} here, the plan binds a {b['class']}")
        if layer not in LAYERS or not hasattr(_layers, layer):
            raise InjectError(f"{where}: binding {path!r} names layer {layer!r}, which this package does not have")
        if "forward" in m.__dict__:
            raise InjectError(
                f"module {path!r} already has its forward replaced (injected or kernelized before): inject into a freshly loaded model"
            )
        _check_signature(m, layer, path)
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    for lp in plan["layers"]:
        if not lp.get("bindings"):
            continue
        for out in lp.get("outputs") or ():
            if lp["bindings"][0]["layer"] in ("SparseMoE", "SharedExpertMoE", "RouterMoE"):  # stacked at load
                checks = moe_layer.loaded_sources(lp["module"], out, lp["bindings"][0]["layer"])
            else:
                checks = [(out["sources"][i], want) for i, want in _expected_source_shapes(out)]
            for src, want in checks:
                t = tensors.get(src)
                if t is None:
                    raise InjectError(f"{made_for}: it packs {out['name']!r} from {src!r}, which this model does not have")
                if list(t.shape) != want:
                    raise InjectError(
                        f"{made_for}: {src!r} has shape {list(t.shape)} in this model, the plan's {out['name']!r} "
                        f"{list(out['shape'])} needs {want}: inject the package made for this model"
                    )


def _other_stage(named: Dict[str, nn.Module], path: str) -> bool:
    """Whether `path` lies in a part of the model another pipeline stage holds: transformers'
    pipeline parallelism (transformers/distributed/pipeline_parallel.py) puts a
    PipelineIdentityLayer where a module of another stage was."""
    parts = path.split(".")
    return any(type(named.get(".".join(parts[:i]))).__name__ == "PipelineIdentityLayer" for i in range(1, len(parts) + 1))


def _stage_plan(plan: dict, named: Dict[str, nn.Module]) -> Tuple[dict, List[str]]:
    """The plan for the modules this process holds: a pipeline stage binds its own modules only
    (and loads only their packed tensors); the modules of other stages are returned by name."""
    layers, other = [], []
    for lp in plan["layers"]:
        here = [b for b in lp.get("bindings") or () if not _other_stage(named, b["module"])]
        if len(here) != len(lp.get("bindings") or ()):
            other.extend(b["module"] for b in lp["bindings"] if _other_stage(named, b["module"]))
            lp = dict(lp, bindings=here)
        layers.append(lp)
    return (dict(plan, layers=layers) if other else plan), sorted(other)


def _resolve(module: nn.Module, dotted: str):
    obj = module
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False, None
        obj = getattr(obj, part)
    return True, obj


def _check_reads(plan: dict, named: Dict[str, nn.Module], attached: bool) -> None:
    """Every attribute a binding says its layer reads is there: the module's own now, the
    packed ones once attached (or, without packed weights, the children they are packed from)."""
    for lp, b in _bindings(plan):
        m, layer = named[b["module"]], b["layer"]
        packed = set(LAYERS[layer]["packed"].values())
        for r in b.get("reads") or ():
            if r in packed:
                if attached and not any(o.get("attr") == r for o in lp.get("outputs") or ()):
                    raise InjectError(f"binding {b['module']!r} reads {r}, which no output of its layer attaches")
                continue
            if not _resolve(m, r)[0]:
                raise InjectError(f"module {b['module']!r} ({type(m).__name__}) has no {r!r}, which the {layer} layer reads")
        if not attached and any(r in packed for r in b.get("reads") or ()):
            for src in LAYERS[layer]["sources"]:
                if not isinstance(m._modules.get(src), nn.Module) or isinstance(m._modules.get(src), Released):
                    raise InjectError(f"module {b['module']!r} has no {src!r} to pack the {layer} tensors from")


# ---------------------------------------------------------------------------- packed weights


def _packed_folder(packed, revision: Optional[str], token) -> Tuple[Path, str]:
    """A local folder, or a Hub repo id downloaded into the HF cache; and how to name it."""
    s = os.fspath(packed)
    p = Path(s).expanduser()
    if p.is_dir():
        if revision is not None:
            raise InjectError(f"packed={s!r} is a local folder; revision= applies to a Hub repo id only")
        return p, str(p)
    if not _REPO_ID.match(s):
        raise InjectError(f"packed={s!r}: no such folder, and not a Hub repo id (org/name)")
    try:
        import huggingface_hub
        from huggingface_hub import errors as hf_errors
    except ImportError as e:
        raise InjectError(f"packed={s!r} names a Hub repo; downloading it needs huggingface_hub (pip install huggingface_hub)") from e
    where = f"{s}@{revision}" if revision else s
    endpoint = huggingface_hub.constants.ENDPOINT
    try:
        folder = huggingface_hub.snapshot_download(s, revision=revision, token=token, allow_patterns=_PACKED_PATTERNS)
    except hf_errors.GatedRepoError as e:
        raise InjectError(f"packed weights {where}: the repository on {endpoint} is gated and this token has no access: "
                          f"ask for it at {endpoint}/{s}") from e
    except hf_errors.RepositoryNotFoundError as e:
        if token or huggingface_hub.get_token():
            raise InjectError(f"packed weights {where}: no folder {s!r} here and no repository {s} on {endpoint} "
                              "that this token can read: check the id and the token's access") from e
        raise InjectError(f"packed weights {where}: no folder {s!r} here and no repository {s} on {endpoint}, "
                          "or it is private or gated and no Hub token is set: log in (`hf auth login`), "
                          "set HF_TOKEN or pass token=") from e
    except hf_errors.RevisionNotFoundError as e:
        raise InjectError(f"packed weights {s}: revision {revision!r} not found on {endpoint}") from e
    except hf_errors.LocalEntryNotFoundError as e:
        raise InjectError(f"packed weights {where}: not in the local Hugging Face cache, and the Hub could not be "
                          f"reached (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}): {e}") from e
    except hf_errors.HfHubHTTPError as e:
        raise InjectError(f"packed weights {where}: downloading from {endpoint} failed: {e}") from e
    return Path(folder), where


def _check_packed_plan(plan: dict, plan_bytes: Optional[bytes], digest: Optional[str], folder: Path, where: str) -> None:
    """The packed weights were packed from this package's plan: their plan.yaml hashes to the
    digest the package records, when it records one, and says what the package's says."""
    pf = folder / PLAN_FILE
    if not pf.is_file():
        raise InjectError(f"{where}: no {PLAN_FILE}: not packed weights written by `xpuinject pack` or published by `xpuinject push`")
    raw = pf.read_bytes()
    have = hashlib.sha256(raw).hexdigest()
    if raw == plan_bytes and (not digest or have == digest):
        return
    other = _parse_plan(raw, f"{where}/{PLAN_FILE}")
    if _source(other) != _source(plan) or other.get("arch") != plan.get("arch"):
        raise InjectError(
            f"the packed weights in {where} were made for {_source(other)} ({other.get('arch')}), this package's plan for "
            f"{_source(plan)} ({plan.get('arch')}): use the packed weights published with this package"
        )
    diff = _first_difference(plan, other)
    if digest and have != digest:
        raise InjectError(
            f"the packed weights in {where} were packed from another plan than this package's (their plan.yaml sha256 is "
            f"{have[:12]}…, the package records {digest[:12]}…){': ' + diff if diff else ''}; use the packed weights "
            "written by the same xpuinject run as the package"
        )
    if diff:
        raise InjectError(
            f"the packed weights in {where} were packed from a plan that differs from this package's: {diff}; "
            "use the packed weights written by the same xpuinject run as the package"
        )


def _packed_files(folder: Path, where: str) -> Dict[str, Path]:
    """Tensor name -> file of a packed checkpoint (one file, or shards and their index)."""
    idx = folder / "model.safetensors.index.json"
    if idx.is_file():
        try:
            wm = json.loads(idx.read_text(encoding="utf-8"))["weight_map"]
        except (ValueError, KeyError, TypeError) as e:
            raise InjectError(f"{where}: model.safetensors.index.json has no weight_map: {e}") from e
        return {k: folder / v for k, v in wm.items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise InjectError(f"{where}: no model.safetensors or model.safetensors.index.json")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {k: single for k in f.keys()}


# The shard __metadata__ key of the plan digest (inject/pack/pack.go MetaPlanSHA256).
_META_PLAN_SHA256 = "xpuinject_plan_sha256"


def _packed_headers(folder: Path, where: str) -> Tuple[Dict[str, Tuple[str, List[int], Path]], Dict[Path, dict]]:
    """Tensor name -> (safetensors dtype, shape, file), and file -> __metadata__, from the headers
    alone (no tensor is read)."""
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise InjectError("loading packed weights needs safetensors (pip install safetensors)") from e
    tensors: Dict[str, Tuple[str, List[int], Path]] = {}
    metadata: Dict[Path, dict] = {}
    for f in sorted(set(_packed_files(folder, where).values())):
        if not f.is_file():
            raise InjectError(f"{where}: {f.name} is named by the index but missing")
        with safe_open(str(f), framework="pt") as sf:
            metadata[f] = sf.metadata() or {}
            for k in sf.keys():
                sl = sf.get_slice(k)
                tensors[k] = (sl.get_dtype(), list(sl.get_shape()), f)
    return tensors, metadata


def _check_packed(plan: dict, plan_bytes: bytes, digest: Optional[str], folder: Path, where: str) -> None:
    """Every property contract.json's packed_checks lists, in its order, before the model is
    changed: the checks the CLI makes before an eval (inject/emit/verify.go CheckPacked)."""
    headers: list = []

    def read():
        if not headers:
            headers.extend(_packed_headers(folder, where))
        return headers

    def outputs():
        for lp in plan["layers"]:
            for out in lp.get("outputs") or ():
                yield lp, out

    def shard_digest():
        # Against the digest the package records; a plan given by the caller (plan=) has none,
        # and is compared by content alone (plan_digest), as the caller vouches for it.
        if not digest:
            return
        for f, meta in read()[1].items():
            if meta.get(_META_PLAN_SHA256) != digest:
                raise InjectError(
                    f"the packed weights in {where} were packed from another plan: {f.name} records "
                    f"{_META_PLAN_SHA256} {meta.get(_META_PLAN_SHA256)!r}, the package records {digest[:12]}…; "
                    "use the packed weights written by the same xpuinject run as the package"
                )

    def present():
        for lp, out in outputs():
            if out["name"] not in read()[0]:
                raise InjectError(f"{where}: tensor {out['name']!r} (layer {lp['module']}) is missing from the packed weights")

    def dtype():
        for _, out in outputs():
            have, _, f = read()[0].get(out["name"], (out["dtype"], None, None))
            if have != out["dtype"]:
                raise InjectError(
                    f"{where}/{f.name}: tensor {out['name']!r} is {have}, the plan says {out['dtype']}: "
                    "it was not packed from this plan; re-run `xpuinject pack`"
                )

    def shape():
        for _, out in outputs():
            _, have, f = read()[0].get(out["name"], (None, out["shape"], None))
            if list(have) != list(out["shape"]):
                raise InjectError(f"{where}/{f.name}: tensor {out['name']!r} has shape {have}, the plan says {out['shape']}")

    checks = {
        "plan_digest": lambda: _check_packed_plan(plan, plan_bytes, digest, folder, where),
        "shard_digest": shard_digest,
        "present": present,
        "dtype": dtype,
        "shape": shape,
    }
    for name in PACKED_CHECKS:
        if name not in checks:
            raise InjectError(f"contract.json lists packed check {name!r}, which this package does not know")
        checks[name]()


def _load_outputs(plan: dict, folder: Path, where: str, device: torch.device) -> Dict[str, torch.Tensor]:
    """Every output tensor of a bound layer, read straight onto the device, shapes checked."""
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise InjectError("loading packed weights needs safetensors (pip install safetensors)") from e
    files = _packed_files(folder, where)
    want: Dict[Path, List[dict]] = {}
    for lp in plan["layers"]:
        if not lp.get("bindings"):
            continue
        for out in lp.get("outputs") or ():
            f = files.get(out["name"])
            if f is None:
                raise InjectError(f"{where}: tensor {out['name']!r} (layer {lp['module']}) is missing from the packed weights")
            want.setdefault(f, []).append(out)
    tensors: Dict[str, torch.Tensor] = {}
    for f, outs in want.items():
        if not f.is_file():
            raise InjectError(f"{where}: {f.name} is named by the index but missing")
        with safe_open(str(f), framework="pt", device=str(device)) as sf:
            for out in outs:
                t = sf.get_tensor(out["name"])
                if list(t.shape) != list(out["shape"]):
                    raise InjectError(f"{where}/{f.name}: tensor {out['name']!r} has shape {list(t.shape)}, the plan says {out['shape']}")
                tensors[out["name"]] = t
    return tensors


_PLAN_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _check_packed_dtype(plan: dict, tensors: Dict[str, torch.Tensor], model: nn.Module, where: str) -> None:
    """A model in one half dtype cannot run weights packed in the other: the product of a bf16
    weight and an fp16 activation promotes to fp32 and the next fused kernel is handed mixed
    dtypes. An fp32 model runs either (the kernels round activations to the weights' dtype)."""
    half = {t.dtype for t in tensors.values() if t.dtype in (torch.bfloat16, torch.float16)}
    have = next((p.dtype for p in model.parameters() if p.dtype.is_floating_point), None)
    if have not in (torch.bfloat16, torch.float16) or not half or half == {have}:
        return
    packed = ", ".join(sorted(str(d).replace("torch.", "") for d in half))
    plan_dtype = plan.get("dtype", "bf16")
    raise InjectError(
        f"the packed weights in {where} are {packed} (plan dtype {plan_dtype}), the model is {str(have).replace('torch.', '')}: "
        f"load the model with dtype=torch.{str(_PLAN_DTYPES.get(plan_dtype, torch.bfloat16)).replace('torch.', '')}, "
        "or pack the weights in the model's dtype (xpuinject --dtype), or inject(model) without packed weights"
    )


def _attach(lp: dict, module: nn.Module, reads: List[str], tensors: Dict[str, torch.Tensor]) -> int:
    """Attach a layer's packed tensors to its module, then release the children they were made
    from (keeping the plain attributes the layer still reads of them). Returns bytes attached."""
    nbytes = 0
    for out in lp.get("outputs") or ():
        t = tensors[out["name"]]
        nbytes += t.numel() * t.element_size()
        attr = out.get("attr") or ""
        if attr:
            module._parameters.pop(attr, None)
            layer = lp["bindings"][0]["layer"]
            role = next((r for r, a in LAYERS[layer]["packed"].items() if a == attr), "")
            module.register_buffer(attr, decode_layout(layer, role, t), persistent=False)
            continue
        # replaces the module's own tensor of the same name (an RMSNorm weight in bf16)
        prefix = lp["module"] + "."
        rel = out["name"][len(prefix):] if out["name"].startswith(prefix) else out["name"].rsplit(".", 1)[-1]
        *parents, leaf = rel.split(".")
        sub = module
        for part in parents:
            sub = getattr(sub, part)
        old = getattr(sub, leaf, None)
        if not isinstance(old, torch.Tensor):
            raise InjectError(f"{lp['module']}: has no tensor {rel!r} to replace with {out['name']!r}")
        if isinstance(old, nn.Parameter):
            setattr(sub, leaf, nn.Parameter(t, requires_grad=False))
        else:
            setattr(sub, leaf, t)
    if any(o.get("attr") for o in lp.get("outputs") or ()):
        layer = lp["bindings"][0]["layer"]
        for child in LAYERS[layer]["sources"]:
            c = module._modules.get(child)
            if c is None or isinstance(c, Released):
                continue
            keep = {r.split(".", 1)[1]: _resolve(c, r.split(".", 1)[1])[1] for r in reads if r.startswith(child + ".")}
            module._modules[child] = Released(f"{lp['module']}.{child}", keep)
    return nbytes


def _vendor_routes(routes: List[dict]) -> Tuple[Tuple[str, int, Optional[int]], ...]:
    return tuple((r["op"], int(r.get("min_tokens") or 0), int(r["max_tokens"]) if r.get("max_tokens") else None) for r in routes)


def _bind(module: nn.Module, layer: str) -> None:
    # What kernels does (kernels/layer/layer.py _replace_forward): on the instance only.
    module.forward = types.MethodType(getattr(_layers, layer).forward, module)


# The attention implementation an injected model runs when it was loaded with eager attention.
# Registered like sdpa: boolean masks (True = attend), None where causality needs none
# (masking_utils.sdpa_mask, transformers 5.17), which our attention kernels take as they are.
# eager_mask would build an additive float copy of that mask with a host-to-device scalar
# (torch.tensor(0.0, device=...)), which a CUDA graph cannot capture.
ATTN_IMPLEMENTATION = "xpuinject"


def _runs_our_attention(m: nn.Module) -> bool:
    f = m.__dict__.get("forward")
    return isinstance(f, types.MethodType) and f.__func__ is _layers.Attention.forward


def _use_our_attention(model: nn.Module) -> Optional[str]:
    """Move an injected model off eager attention onto ATTN_IMPLEMENTATION, when every
    attention module (a class named *Attention*) runs this package's Attention, so no module
    asks transformers for the attention function the name selects. The models loaded eager are
    those whose attention soft-caps its logits (Gemma 2), which SDPA ignores; our kernels cap.
    Other implementations stay: sdpa already builds the masks our kernels read. The change is
    on model.config, shared with any model built from the same config object. Returns the
    implementation the model runs now (None: not a transformers model)."""
    cfg = getattr(model, "config", None)
    impl = getattr(cfg, "_attn_implementation", None)
    if impl != "eager" or not hasattr(model, "set_attn_implementation"):
        return impl
    if any("Attention" in type(m).__name__ and not _runs_our_attention(m) for m in model.modules()):
        return impl
    register_transformers(ATTN_IMPLEMENTATION)
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return cfg._attn_implementation


def _refuse_saving(model: nn.Module, source: str) -> None:
    """After the packed weights replaced the original projections, the model's state_dict holds
    neither the checkpoint's tensors (the projections are released) nor a checkpoint transformers
    can load (packed names, folded BatchNorms): transformers' save_pretrained would write part of
    it and its from_pretrained would initialise the rest at random. save_pretrained,
    push_to_hub (which saves through it) and state_dict (which would silently hold only the
    tensors not released) refuse instead, on this model only."""
    cls = type(model).__name__

    def refusal(name):
        def refuse(*args, **kwargs):
            raise InjectError(
                f"{cls}.{name}: this model runs offline-packed weights (inject(model, packed=...)) and its original "
                f"projections were released, so it cannot be saved as a {cls} checkpoint; save the original model "
                f"instead (load {source} again, or call {name} before inject), or keep the packed checkpoint "
                "`xpuinject pack` wrote (`xpuinject push` publishes it) and inject it again after loading"
            )
        return refuse

    for name in ("save_pretrained", "push_to_hub", "state_dict"):
        if hasattr(model, name):
            object.__setattr__(model, name, refusal(name))


def inject(model: nn.Module, packed=None, *, revision: Optional[str] = None, token=None, plan=None,
           check_only: bool = False) -> dict:
    """Bind this package's layers into `model` as the package's plan says.

    Args:
        model: a transformers model of the checkpoint the plan was made for, on its device
            (cuda, xpu; cpu only under TRITON_INTERPRET=1), in eval mode, bf16.
        packed: the offline-packed weights: a folder written by `xpuinject pack`, or a Hub repo
            id published by `xpuinject push` (downloaded into the HF cache). They are checked
            against the package's plan, attached to the modules, and the original projections
            are released; the model's save_pretrained, push_to_hub and state_dict then refuse
            (its weights are no longer a transformers checkpoint). None: the layers pack the model's own
            weights on first use, into buffers state_dict leaves out, so saving still writes the
            original checkpoint.
        revision: branch, tag or commit of a `packed` repo id.
        token: Hub token for a private or gated `packed` repo (default: the saved login, HF_TOKEN).
        plan: another plan to carry out (a plan.yaml path or folder); default this package's.
        check_only: check plan, model and packed weights against each other; change nothing.

    Returns a summary: backend, replaced {layer class: modules}, replaced_modules, kept
    [{module, reason}], packed (where the weights came from, or None), packed_tensors and
    packed_bytes (loaded and attached), packed_kept_tensors (kept modules' tensors in the packed
    checkpoint, not loaded: the model's own copies serve), attn_implementation (what the model's
    config selects after injection: ATTN_IMPLEMENTATION where it was eager and every attention
    module is ours, see _use_our_attention).

    A pipeline stage of transformers' pipeline parallelism (`DistributedConfig(pp_size=N)`) binds
    and loads only the modules it holds; the summary lists the others as `other_stages`. A model
    spread over several devices in one process (a device_map) is refused.
    """
    if plan is None:
        plan_path = _HERE / PLAN_FILE
        plan_dict = load_plan()
        digest = _recorded_plan_digest()
    else:
        plan_path = Path(plan) / PLAN_FILE if Path(plan).is_dir() else Path(plan)
        plan_dict = load_plan(plan_path)
        digest = None
    plan_bytes = plan_path.read_bytes()
    device, backend = _backend_of(model)
    named = dict(model.named_modules())
    full_plan = plan_dict
    plan_dict, other_stages = _stage_plan(plan_dict, named)
    _check_model(plan_dict, model, named, str(plan_path))
    tensors: Dict[str, torch.Tensor] = {}
    where = None
    if packed is not None:
        folder, where = _packed_folder(packed, revision, token)
        _check_packed(full_plan, plan_bytes, digest, folder, where)
        tensors = _load_outputs(plan_dict, folder, where, device)
        _check_packed_dtype(plan_dict, tensors, model, where)
    _check_reads(plan_dict, named, attached=packed is not None)
    bindings = list(_bindings(plan_dict))
    if check_only:
        return {"checked": True, "bindings": len(bindings), "packed": where, "packed_tensors": len(tensors)}

    nbytes = 0
    for lp, b in bindings:
        m = named[b["module"]]
        setattr(m, NAME_ATTR, b["module"])
        if b.get("vendor"):
            setattr(m, VENDOR_ATTR, _vendor_routes(b["vendor"]))
    if tensors:
        for lp in plan_dict["layers"]:
            if lp.get("bindings") and lp.get("outputs"):
                nbytes += _attach(lp, named[lp["module"]], lp["bindings"][0].get("reads") or [], tensors)
    for _, b in bindings:
        _bind(named[b["module"]], b["layer"])
    if nbytes:
        _refuse_saving(model, _source(plan_dict))
    replaced: Dict[str, int] = {}
    for _, b in bindings:
        replaced[b["layer"]] = replaced.get(b["layer"], 0) + 1
    summary = {
        "backend": backend,
        "replaced": dict(sorted(replaced.items())),
        "replaced_modules": sorted(b["module"] for _, b in bindings),
        "kept": [{"module": lp["module"], "reason": lp.get("reason", "")} for lp in full_plan["layers"] if not lp.get("bindings")],
        "packed": where,
        "packed_tensors": len(tensors),
        "packed_bytes": nbytes,
        # the packed checkpoint holds kept modules' weights too (cast); the model keeps its own
        "packed_kept_tensors": sum(len(lp.get("outputs") or ()) for lp in full_plan["layers"] if not lp.get("bindings")) if tensors else 0,
    }
    summary["attn_implementation"] = _use_our_attention(model)
    if other_stages:
        summary["other_stages"] = other_stages
    _reserve_buffers(model)
    return summary


def _reserve_buffers(model: nn.Module) -> None:
    """Allocate now the device buffers the kernels take at their first launch (_backend.semaphores).
    A model's first decode step may run inside a CUDA-graph capture or torch.compile's
    mode="reduce-overhead" (after an eager prefill, which takes none), where a buffer allocated
    then lives in the graph's memory pool, outside any output: torch refuses it ("tensor(s) in the
    cudagraph pool not tracked as outputs") or a later replay overwrites it."""
    for device in {p.device for p in model.parameters()} | {b.device for b in model.buffers()}:
        if device.type in ("cuda", "xpu", "cpu"):
            _backend.semaphores(device, 1)


# ---------------------------------------------------------------------------- no plan


def _linear(m) -> bool:
    return isinstance(m, nn.Linear)


def _why_not(m: nn.Module, layer: str) -> str:
    """Why `layer` cannot take module m ("" when it can): the planner's rules for the same
    layers (kernels/registry.go constraints, inject/plan/rules.go), on the live module."""
    c = m._modules
    if layer == "RMSNorm":
        return "" if isinstance(getattr(m, "weight", None), torch.Tensor) and hasattr(m, "variance_epsilon") else "no weight / variance_epsilon"
    if layer == "Attention":
        if not all(_linear(c.get(n)) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return "no q/k/v/o_proj Linear children"
        cfg = getattr(m, "config", None)
        h = getattr(cfg, "num_attention_heads", 0)
        kv = getattr(cfg, "num_key_value_heads", None) or h
        d = getattr(m, "head_dim", 0)
        hidden = c["q_proj"].in_features
        if d not in ATTENTION_HEAD_DIMS:
            return f"head_dim {d} not supported (supported: {ATTENTION_HEAD_DIMS})"
        if not h or h % kv or d % 2:
            return f"heads {h} not a multiple of kv_heads {kv}, or head_dim {d} odd"
        if len({c[n].bias is None for n in ("q_proj", "k_proj", "v_proj")}) != 1:
            return "only some of q/k/v carry a bias"
        if min(hidden, (h + 2 * kv) * d, h * d) < MIN_GEMM_DIM:
            return f"a GEMM dimension below {MIN_GEMM_DIM}"
        return ""
    if layer == "SwiGLUMLP":
        if not all(_linear(c.get(n)) for n in ("gate_proj", "up_proj", "down_proj")):
            return "no gate/up/down_proj Linear children"
        if any(c[n].bias is not None for n in ("gate_proj", "up_proj", "down_proj")):
            return "biased projections (the planner keeps those)"
        if getattr(getattr(m, "config", None), "hidden_act", "silu") not in ("silu", "swish"):
            return "hidden_act is not silu"
        if min(c["gate_proj"].in_features, c["gate_proj"].out_features) < MIN_GEMM_DIM:
            return f"a GEMM dimension below {MIN_GEMM_DIM}"
        return ""
    if layer == "GemmaRMSNorm":
        return "" if isinstance(getattr(m, "weight", None), torch.Tensor) and hasattr(m, "eps") else "no weight / eps"
    if layer == "FP32RMSNorm":
        return _why_not(m, "RMSNorm")
    if layer == "GeGLUMLP":
        if not all(_linear(c.get(n)) for n in ("gate_proj", "up_proj", "down_proj")):
            return "no gate/up/down_proj Linear children"
        if any(c[n].bias is not None for n in ("gate_proj", "up_proj", "down_proj")):
            return "biased projections (the planner keeps those)"
        if not geglu_epilogue(m):
            return "its activation is neither gelu_pytorch_tanh nor the exact gelu"
        if min(c["gate_proj"].in_features, c["gate_proj"].out_features) < MIN_GEMM_DIM:
            return f"a GEMM dimension below {MIN_GEMM_DIM}"
        return ""
    if layer == "GemmaDecoderLayer":
        names = ("input_layernorm", "self_attn", "post_attention_layernorm", "pre_feedforward_layernorm", "mlp",
                 "post_feedforward_layernorm")
        if not all(isinstance(c.get(n), nn.Module) for n in names):
            return "not a Gemma decoder block"
        norm = c["pre_feedforward_layernorm"]
        ok = layer_for_class(type(norm).__name__) == "GemmaRMSNorm" and not _why_not(norm, "GemmaRMSNorm")
        return "" if ok else "its pre-feedforward norm is not a Gemma RMSNorm"
    if layer == "SandwichDecoderLayer":
        names = ("input_layernorm", "self_attn", "post_self_attn_layernorm", "post_attention_layernorm", "mlp",
                 "post_mlp_layernorm")
        if not all(isinstance(c.get(n), nn.Module) for n in names):
            return "not a block with a norm before and after each branch"
        norm = c["post_attention_layernorm"]
        ok = layer_for_class(type(norm).__name__) == "RMSNorm" and not _why_not(norm, "RMSNorm")
        return "" if ok else "its post-attention norm is not Llama's RMSNorm"
    if layer in ("PostNormDecoderLayer", "PostNormMoEDecoderLayer"):
        names = ("self_attn", "post_attention_layernorm", "mlp", "post_feedforward_layernorm")
        if not all(isinstance(c.get(n), nn.Module) for n in names) or "input_layernorm" in c:
            return "not a block that normalizes each branch before its add"
        # OLMo's norms (fp32 order) or Llama's (EXAONE 4): the layer adds after each by its rounding
        kinds = {layer_for_class(type(n).__name__) for n in (c["post_attention_layernorm"], c["post_feedforward_layernorm"])}
        ok = len(kinds) == 1 and kinds <= {"FP32RMSNorm", "RMSNorm"} and not any(
            _why_not(c[n], next(iter(kinds))) for n in ("post_attention_layernorm", "post_feedforward_layernorm"))
        return "" if ok else "its norms are neither OLMo 2's RMSNorm nor Llama's"
    if layer == "FusedAttention":
        if not all(_linear(c.get(n)) for n in ("qkv_proj", "o_proj")):
            return "no qkv_proj / o_proj Linear children"
        cfg = getattr(m, "config", None)
        h = getattr(cfg, "num_attention_heads", 0)
        kv = getattr(cfg, "num_key_value_heads", None) or h
        d = getattr(m, "head_dim", 0)
        rope = getattr(cfg, "rope_parameters", None) or {}
        if d not in ATTENTION_HEAD_DIMS:
            return f"head_dim {d} not supported (supported: {ATTENTION_HEAD_DIMS})"
        if not h or h % kv or d % 2:
            return f"heads {h} not a multiple of kv_heads {kv}, or head_dim {d} odd"
        # what the planner keeps on the stock path (inject/plan/rules.go stockAttention)
        if rope.get("rope_type", "default") != "default":
            return f"{rope.get('rope_type')} RoPE (LongRoPE picks its factors by a host-side length test)"
        if c["qkv_proj"].bias is not None or c["o_proj"].bias is not None:
            return "biased projections"
        return ""
    if layer == "FusedSwiGLUMLP":
        if not all(_linear(c.get(n)) for n in ("gate_up_proj", "down_proj")):
            return "no gate_up_proj / down_proj Linear children"
        if c["gate_up_proj"].bias is not None or c["down_proj"].bias is not None:
            return "biased projections (the planner keeps those)"
        if mlp_activation(getattr(m, "config", None)) not in ("silu", "swish"):
            return "hidden_act is not silu"
        if min(c["down_proj"].in_features, c["down_proj"].out_features) < MIN_GEMM_DIM:
            return f"a GEMM dimension below {MIN_GEMM_DIM}"
        return ""
    if layer == "DecoderLayer":
        norm = c.get("post_attention_layernorm")
        if not all(isinstance(c.get(n), nn.Module) for n in ("input_layernorm", "self_attn", "mlp")) or norm is None:
            return "not a pre-norm decoder block"
        kind = layer_for_class(type(norm).__name__)
        ok = kind in ("RMSNorm", "GemmaRMSNorm", "FP32RMSNorm") and not _why_not(norm, kind)
        return "" if ok else "its post-attention norm is not an RMSNorm"
    if layer in ("LinearBN", "BNLinear"):
        lin, bn = c.get("linear"), c.get("batch_norm")
        if not _linear(lin) or not isinstance(bn, nn.BatchNorm1d) or bn.running_var is None:
            return "no linear + batch_norm (with running statistics) children"
        return "" if min(lin.in_features, lin.out_features) >= MIN_GEMM_DIM else f"a GEMM dimension below {MIN_GEMM_DIM}"
    if layer == "ConvBN":
        ok = isinstance(c.get("convolution"), nn.Conv2d) and isinstance(c.get("batch_norm"), nn.BatchNorm2d)
        return "" if ok and c["batch_norm"].running_var is not None else "no convolution + batch_norm children"
    if layer == "LMHead":
        ok = isinstance(m, nn.Linear) and min(m.in_features, m.out_features) >= MIN_GEMM_DIM
        return "" if ok else f"not a Linear with both dimensions >= {MIN_GEMM_DIM}"
    if layer in ("SparseMoE", "SharedExpertMoE", "RouterMoE", "MoEDecoderLayer", "ScaledMoEDecoderLayer"):
        return moe_layer.why_not(m, layer, _why_not)
    return f"{layer} is bound only where a plan says so"


def supported_bindings(model: nn.Module) -> List[Tuple[str, str]]:
    """(module path, layer class) for every module `kernelize` binds: those of a class
    contract.json lists, whose shapes the kernels take, and the output embedding (LMHead: fp32
    logits). Other plain Linear layers are left to the vendor GEMM (the planner keeps them too)."""
    out = []
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for path, m in model.named_modules():
        layer = "LMHead" if m is head and isinstance(m, nn.Linear) else layer_for_class(type(m).__name__)
        if layer and layer != "Linear" and not _why_not(m, layer):
            out.append((path, layer))
    # q/k norms run inside their attention: bound with it only, as the planner binds them; a
    # shared expert runs inside its SharedExpertMoE on packed weights, never as its module
    bound = {p for p, _ in out}
    shared = {p + ".shared_expert" for p, layer in out if layer == "SharedExpertMoE"}
    return [(p, layer) for p, layer in out
            if (p.rsplit(".", 1)[-1] not in ("q_norm", "k_norm", *QK_NORMS_AFTER_ROPE_MODULES)
                or p.rsplit(".", 1)[0] in bound)
            and p not in shared]


class _PackageLayerRepository:
    """A `kernels` layer repository that serves this package's own layer classes (no download,
    no second import): what `kernels.LayerRepository.load` returns, for an already loaded package."""

    def __init__(self, layer_name: str):
        self.layer_name = layer_name

    def load(self):
        return getattr(_layers, self.layer_name)

    def __str__(self) -> str:
        return f"the loaded xpuinject package {__package__} (layer `{self.layer_name}`)"


_REPOSITORIES = {name: _PackageLayerRepository(name) for name in LAYERS}
_MISSING = object()


@contextlib.contextmanager
def _extensible(targets: List[Tuple[nn.Module, str]]):
    """Make exactly `targets` visible to kernels.kernelize for the duration: kernelize finds
    `kernel_layer_name` and `kernel_condition` on a module's CLASS (kernels/layer/kernelize.py),
    so they are set there with a condition that admits only these instances, and put back as
    they were afterwards (transformers sets its own on its RMSNorm classes). kernels 0.16 does
    not read the condition: `kernelize` undoes what it binds beyond the targets."""
    ids = frozenset(id(m) for m, _ in targets)
    names = {type(m): "xpuinject." + layer for m, layer in targets}  # one layer per class (contract.json)
    saved = {cls: {k: cls.__dict__.get(k, _MISSING) for k in ("kernel_layer_name", "kernel_condition")} for cls in names}
    try:
        for cls, name in names.items():
            cls.kernel_layer_name = name
            cls.kernel_condition = staticmethod(lambda module, ids=ids: id(module) in ids)
        yield {"xpuinject." + layer: layer for _, layer in targets}
    finally:
        for cls, attrs in saved.items():
            for k, v in attrs.items():
                if v is _MISSING:
                    if k in cls.__dict__:
                        delattr(cls, k)
                else:
                    setattr(cls, k, v)


def kernelize(model: nn.Module, *, use_kernels: Union[bool, str] = "auto", mode=None) -> dict:
    """Bind this package's layers to every supported module of `model`, with no plan and no
    packed weights: the layers pack the modules' own weights on first use.

    use_kernels: "auto" (through kernels.kernelize when the kernels package is importable),
    True (require it) or False (bind directly, the way kernelize does).
    mode: the kernels.Mode to kernelize in (default Mode.INFERENCE); the layers take
    Mode.INFERENCE | Mode.TORCH_COMPILE too (each kernel is a torch custom op). Training modes
    are refused: the layers have no backward.

    Returns a summary: path ("kernels" or "direct"), backend, replaced {layer class: modules},
    replaced_modules, attn_implementation (as inject's).
    """
    _, backend = _backend_of(model)
    named = dict(model.named_modules())
    targets = supported_bindings(model)
    for path, layer in targets:
        if "forward" in named[path].__dict__:
            raise InjectError(f"module {path!r} already has its forward replaced: kernelize a freshly loaded model")
        _check_signature(named[path], layer, path)
        setattr(named[path], NAME_ATTR, path)
    api = None
    if use_kernels in ("auto", True):
        try:
            import kernels as api
        except ImportError:
            if use_kernels is True:
                raise InjectError("use_kernels=True, but the kernels package is not importable (pip install kernels)")
        if api is not None and not hasattr(api, "kernelize"):
            # a folder named kernels on sys.path (a checkout's, say) imports as an empty namespace
            where = list(getattr(api, "__path__", [])) or getattr(api, "__file__", "?")
            api = None
            if use_kernels is True:
                raise InjectError(f"use_kernels=True, but the `kernels` importable here ({where}) is not Hugging "
                                  "Face's kernels package (pip install kernels)")
    if api is None:
        if mode is not None:
            raise InjectError("mode= is a kernels.Mode, which needs the kernels package (pip install kernels)")
        for path, layer in targets:
            _bind(named[path], layer)
    else:
        mode = api.Mode.INFERENCE if mode is None else mode
        if api.Mode.TRAINING in mode:
            raise InjectError(f"kernelize: mode {mode}: the layers are inference-only (no backward); "
                              "use Mode.INFERENCE, with | Mode.TORCH_COMPILE to compile the model")
        # kernelize also visits the functions transformers attaches to modules (`_kernel_funcs`,
        # e.g. rotary_pos_emb) and, with no mapping for them, sets their own forward on those
        # shared objects and logs a warning per module: undo both, they are not ours.
        funcs = {id(f): f for m in named.values() for f in getattr(m, "_kernel_funcs", {}).values()}
        had = {i for i, f in funcs.items() if "forward" in f.__dict__}
        log = logging.getLogger("kernels.layer.layer")
        level = log.level
        log.setLevel(logging.ERROR)
        # Every module's own forward before the call: kernelize sets one on each module of a
        # marked class it visits (the class's own where it finds no mapping, e.g. transformers'
        # "RMSNorm" marks), and kernels 0.16, which ignores kernel_condition, binds every
        # instance of a target's class (LMHead's nn.Linear: every projection too). Whatever it
        # set beyond the targets is put back.
        own = {id(m): m.__dict__.get("forward", _MISSING) for m in named.values()}
        ids = {id(named[p]) for p, _ in targets}
        try:
            with _extensible([(named[p], layer) for p, layer in targets]) as by_name:
                mapping = {name: {backend: _REPOSITORIES[layer]} for name, layer in by_name.items()}
                with api.use_kernel_mapping(mapping, inherit_mapping=False):
                    api.kernelize(model, mode=mode, device=backend)
            for m in named.values():
                if id(m) not in ids and m.__dict__.get("forward", _MISSING) is not own[id(m)]:
                    if own[id(m)] is _MISSING:
                        del m.__dict__["forward"]
                    else:
                        m.__dict__["forward"] = own[id(m)]
        finally:
            log.setLevel(level)
            for i, f in funcs.items():
                if i not in had:
                    f.__dict__.pop("forward", None)
        for path, layer in targets:
            bound = getattr(named[path].__dict__.get("forward"), "__func__", None)
            if bound is not getattr(_layers, layer).forward:
                raise InjectError(f"kernels.kernelize did not bind {layer} to {path!r}")
    replaced: Dict[str, int] = {}
    for _, layer in targets:
        replaced[layer] = replaced.get(layer, 0) + 1
    _reserve_buffers(model)
    return {
        "path": "direct" if api is None else "kernels",
        "backend": backend,
        "replaced": dict(sorted(replaced.items())),
        "replaced_modules": sorted(p for p, _ in targets),
        "attn_implementation": _use_our_attention(model),
    }


# ---------------------------------------------------------------------------- transformers' use_kernels

# transformers marks only its RMSNorm classes for kernels ("RMSNorm", modeling_llama.py and its
# copies, transformers 5.17); the other classes contract.json lists are marked here, in these
# transformers model modules, under names of this package's own so that transformers' default
# kernel mapping (integrations/hub_kernels.py: "SwiGLUMLP" -> Liger) never picks them up.
_TRANSFORMERS_MODELS = ("llama", "mistral", "qwen2", "qwen3", "levit", "gemma2", "gemma3_text", "phi3")
# config.model_type -> the transformers models/ module that defines its classes
_MODEL_MODULES = {"gemma3_text": "gemma3"}
_NATIVE_MARKS = {"RMSNorm": "RMSNorm"}
_NO_NATIVE_ROUTE = ("Linear", "LMHead")  # nn.Linear is every projection's class: plan or kernelize only


def _mark(layer: str) -> str:
    return _NATIVE_MARKS.get(layer, "xpuinject." + layer)


def mark_transformers_classes() -> Dict[str, str]:
    """Mark the transformers classes this package's layers replace (contract.json `classes`) for
    `kernels`, as transformers itself marks its RMSNorm classes: `kernel_layer_name` on the
    class, and with kernels >= 0.17 a `kernel_condition` that admits only modules whose shapes
    the kernels take. Then `from_pretrained(..., use_kernels=True,
    kernel_config=KernelConfig(kernel_config_mapping(REPO, "llama")))` (the model's config.model_type)
    binds the package's layers. Classes that already carry a mark keep it. Returns
    {class name: mark} of every class this call marked."""
    import importlib

    import kernels

    takes_condition = "condition" in inspect.signature(kernels.replace_kernel_forward_from_hub).parameters
    marked = {}
    for arch in _TRANSFORMERS_MODELS:
        name = _MODEL_MODULES.get(arch, arch)
        mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        for layer, spec in LAYERS.items():
            if layer in _NO_NATIVE_ROUTE:
                continue
            for name in spec["classes"]:
                cls = mod.__dict__.get(name)
                if not isinstance(cls, type) or "kernel_layer_name" in cls.__dict__:
                    continue
                if takes_condition:
                    kernels.replace_kernel_forward_from_hub(cls, _mark(layer), condition=lambda m, layer=layer: not _why_not(m, layer))
                else:
                    kernels.replace_kernel_forward_from_hub(cls, _mark(layer))
                marked[name] = _mark(layer)
    return marked


def _mapping_layers(fn: str, repo, arch: str, version, revision):
    """Checks the arguments of the two mapping helpers; returns (repo as str, local, [(mark, layer)])."""
    import importlib

    s = os.fspath(repo)
    local = os.path.isabs(s)
    if not local and not _REPO_ID.match(s):
        raise InjectError(f"{fn}: {s!r} is neither an absolute package folder nor a Hub repo id (org/name)")
    if local and not Path(s).is_dir():
        raise InjectError(f"{fn}: {s}: no such folder (the package folder written by `xpuinject package`)")
    if not local and version is not None and revision is not None:
        raise InjectError(f"{fn}: give version= or revision= for a Hub repo, not both")
    if arch not in _TRANSFORMERS_MODELS:
        raise InjectError(f"{fn}: model type {arch!r} has no layers here (supported: {', '.join(_TRANSFORMERS_MODELS)})")
    name = _MODEL_MODULES.get(arch, arch)
    mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    layers = [(_mark(layer), layer) for layer, spec in LAYERS.items()
              if layer not in _NO_NATIVE_ROUTE and any(isinstance(mod.__dict__.get(c), type) for c in spec["classes"])]
    return s, local, layers


def kernel_mapping(repo: Union[str, os.PathLike], arch: str, *, version: Optional[int] = None, revision: Optional[str] = None,
                   trust_remote_code: bool = False, devices=("cuda", "xpu")) -> dict:
    """What `kernels.use_kernel_mapping` takes for a model of type `arch` (config.model_type:
    "llama", "qwen3", "levit", ...): every mark its classes carry after `mark_transformers_classes`
    (and transformers' own "RMSNorm") mapped, for each of `devices`, to this package's layer as a
    `kernels.LayerRepository` (a Hub repo) or `kernels.LocalLayerRepository` (a local folder):

        with kernels.use_kernel_mapping(kernel_mapping("my-org/llama-xpu-kernels", "llama", trust_remote_code=True)):
            model = kernels.kernelize(model, mode=kernels.Mode.INFERENCE)

    `repo` is a Hub kernel repo id (`version`, 1 by default, or `revision`; `trust_remote_code` for a publisher
    the Hub does not list as trusted) or an absolute local package folder (the Hub arguments do
    not apply). `devices`: the device types to map (the package's builds: cuda and xpu; "cpu" runs
    the kernels under Triton's interpreter). For transformers' `KernelConfig`, whose mapping is of
    another form, see `kernel_config_mapping`."""
    import kernels

    s, local, layers = _mapping_layers("kernel_mapping", repo, arch, version, revision)
    version = 1 if version is None and revision is None else version
    out = {}
    for mark, layer in layers:
        if local:
            r = kernels.LocalLayerRepository(Path(s), layer_name=layer)
        else:
            r = kernels.LayerRepository(s, layer_name=layer, version=version, revision=revision,
                                        trust_remote_code=bool(trust_remote_code))
        out[mark] = {d: r for d in devices}
    return out


def kernel_config_mapping(repo: Union[str, os.PathLike], arch: str, *, version: Optional[int] = None,
                          revision: Optional[str] = None, trust_remote_code: bool = False) -> dict:
    """The `kernel_mapping` of a transformers `KernelConfig` for a model of type `arch`: every
    mark (as `kernel_mapping`) mapped to "repo:Layer", with the Hub arguments for a Hub repo.
    transformers refuses a mapping that names a mark the model does not have, hence `arch`.

        KernelConfig(kernel_config_mapping("my-org/llama-xpu-kernels", "llama", trust_remote_code=True), inherit_mapping=False)
        KernelConfig(kernel_config_mapping("/abs/path/package", "llama"), use_local_kernel=True)
    """
    s, local, layers = _mapping_layers("kernel_config_mapping", repo, arch, version, revision)
    version = 1 if version is None and revision is None else version
    meta = {"trust_remote_code": bool(trust_remote_code)}
    meta.update({"version": version} if revision is None else {"revision": revision})
    return {mark: f"{s}:{layer}" if local else (f"{s}:{layer}", dict(meta)) for mark, layer in layers}
