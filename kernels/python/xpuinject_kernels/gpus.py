"""Per-GPU data (gpus/<gpu>.json): launch configs tuned on one GPU model, and what the kernels
tuned at run time.

A file names the GPU's torch device names ("devices") and its "tuned" entries: {kernel, key,
config}, written by benchmarks/tune.py --write-tuned (the planner reads the same file's vendor
routes, kernels/gpus.go). On a device whose name a file lists, a launcher whose problem matches
an entry's key launches that config directly; every other launch autotunes as before. A key
names some of the launcher's problem fields ({"epilogue", "m_bucket", "k", "n"} for gemm; the
autotune key, lowercase, for attention); a field it leaves out matches any value.

A problem class no entry covers takes a heuristic config at once, derived from its shape by the
kernel (`heuristic_config`): nothing is benchmarked before the first launch. XPUINJECT_AUTOTUNE=1
(`xpuinject --autotune`) autotunes such classes instead, as a sweep does.

`tuning_report()` counts, for a run, the problem classes launched from a tuned config, from a
heuristic one, and those the autotuner had to resolve (benchmarked, or read from Triton's on-disk
cache); the eval records it, so "a known GPU does no autotuning" can be checked on the GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import triton

from . import _backend

__all__ = ["tuned_config", "heuristic_config", "autotune_requested", "device_data", "tuning_report"]

_DIR = Path(__file__).with_name("gpus")
_files: Optional[List[dict]] = None
_by_device: Dict[tuple, Optional[dict]] = {}


def _load() -> List[dict]:
    global _files
    if _files is None:
        _files = []
        for p in sorted(_DIR.glob("*.json")):
            data = json.loads(p.read_text(encoding="utf-8"))
            data["file"] = f"gpus/{p.name}"
            _files.append(data)
    return _files


def _device_name(device: torch.device) -> str:
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_name(device)
        if device.type == "xpu":
            return torch.xpu.get_device_name(device)
    except (RuntimeError, AssertionError, AttributeError):
        pass
    return ""


def device_data(device) -> Optional[dict]:
    """The data file of the GPU `device` is, None when there is none (or under the interpreter)."""
    device = torch.device(device)
    key = (device.type, device.index)
    if key not in _by_device:
        found = None
        if device.type in ("cuda", "xpu") and not _backend.is_interpret():
            name = _device_name(device)
            found = next((d for d in _load() if name in d.get("devices", ())), None)
        _by_device[key] = found
    return _by_device[key]


def tuned_config(kernel: str, key: Dict[str, object], device) -> Optional[triton.Config]:
    """The tuned launch config of `kernel` for the problem `key` on `device`'s GPU, or None."""
    data = device_data(device)
    if data is None:
        return None
    for e in data.get("tuned", ()):
        if e["kernel"] == kernel and all(key.get(k) == v for k, v in e["key"].items()):
            c = dict(e["config"])
            warps, stages = c.pop("num_warps"), c.pop("num_stages")
            _backend.count(f"tuned.{kernel}")
            return triton.Config(c, num_warps=warps, num_stages=stages)
    return None


def autotune_requested() -> bool:
    """Whether classes without a tuned config autotune (XPUINJECT_AUTOTUNE=1) instead of taking
    their heuristic config."""
    return _backend.env_switch("XPUINJECT_AUTOTUNE") is True


# The problem classes launched with a heuristic config: {kernel, key, config}, what a sweep
# (benchmarks/tune.py) must cover for the GPU to need none.
_heuristic_classes: List[dict] = []


def heuristic_config(kernel: str, key: Dict[str, object],
                     heuristic: Callable[[], triton.Config]) -> Optional[triton.Config]:
    """The config a GPU launch of `kernel` takes for a class no tuned config covers: heuristic(),
    derived from the shape, counted as "heuristic.<kernel>" and recorded with its key; None when
    autotuning was asked for (XPUINJECT_AUTOTUNE=1). Callers look a class up once and keep it."""
    if autotune_requested():
        return None
    cfg = heuristic()
    _backend.count(f"heuristic.{kernel}")
    _heuristic_classes.append({"kernel": kernel, "key": dict(key),
                               "config": dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)})
    return cfg


def tuning_report() -> dict:
    """What this process tuned so far: problem classes launched from a shipped tuned config, and
    those an autotuner resolved (by benchmarking its configs, or from Triton's disk cache)."""
    c = _backend.launch_counts
    files = sorted({d["file"] for d in _by_device.values() if d is not None})
    by = lambda prefix: {k[len(prefix):]: v for k, v in sorted(c.items()) if k.startswith(prefix)}  # noqa: E731
    return {
        "gpu_data": files,
        "tuned": sum(by("tuned.").values()),
        "tuned_by_kernel": by("tuned."),
        "heuristic": sum(by("heuristic.").values()),
        "heuristic_by_kernel": by("heuristic."),
        "heuristic_classes": list(_heuristic_classes),
        "autotuned": sum(by("autotune.key.").values()),
        "autotuned_by_kernel": by("autotune.key."),
        "benchmarked": c["autotune.benchmarked"],
        "configs_timed": c["autotune.configs_timed"],
    }
