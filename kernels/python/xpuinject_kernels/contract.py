"""The names and bounds the planner, the layers and injection share, read from contract.json.

contract.json sits beside this file in the source tree and in every emitted variant folder; the
Go planner embeds the same file (kernels/contract.go), so a name or bound changes in one place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Tuple

__all__ = [
    "CONTRACT",
    "DECODE_MAX_TOKENS",
    "MIN_GEMM_DIM",
    "ATTENTION_HEAD_DIMS",
    "GEMM_EPILOGUES",
    "NAME_ATTR",
    "VENDOR_ATTR",
    "LAYERS",
    "PACKED_CHECKS",
    "INTERLEAVED_ROTARY",
    "GLOBAL_NOPE",
    "QK_NORMS_AFTER_ROPE",
    "QK_NORMS_AFTER_ROPE_MODULES",
    "packed_attr",
    "packed_attrs",
    "layer_for_class",
]

CONTRACT: Dict = json.loads(Path(__file__).with_name("contract.json").read_text(encoding="utf-8"))

DECODE_MAX_TOKENS: int = int(CONTRACT["decode_max_tokens"])
MIN_GEMM_DIM: int = int(CONTRACT["min_gemm_dim"])
ATTENTION_HEAD_DIMS: Tuple[int, ...] = tuple(int(d) for d in CONTRACT["attention_head_dims"])
GEMM_EPILOGUES: Tuple[str, ...] = tuple(CONTRACT["gemm_epilogues"])
NAME_ATTR: str = CONTRACT["module_attrs"]["name"]
VENDOR_ATTR: str = CONTRACT["module_attrs"]["vendor"]
# layer class name -> {"classes", "reads", "packed" (role -> attribute), "sources"}
LAYERS: Dict[str, Dict] = CONTRACT["layers"]
# What a packed checkpoint must satisfy before inject uses it, in order; the CLI's pre-flight
# checks the same list (inject/emit/verify.go).
PACKED_CHECKS: Tuple[str, ...] = tuple(c["name"] for c in CONTRACT["packed_checks"])
# Attention classes whose RoPE rotates adjacent channel pairs: packing reorders their q/k rows.
INTERLEAVED_ROTARY: Tuple[str, ...] = tuple(CONTRACT["interleaved_rotary"]["classes"])
# Attention classes whose global layers (a window configured, the layer not sliding) skip RoPE.
GLOBAL_NOPE: Tuple[str, ...] = tuple(CONTRACT["global_nope"]["classes"])
# Attention classes whose per-head q/k norms (these modules: the query's, the key's) normalize the
# rotated heads, after RoPE.
QK_NORMS_AFTER_ROPE: Tuple[str, ...] = tuple(CONTRACT["qk_norms_after_rope"]["classes"])
QK_NORMS_AFTER_ROPE_MODULES: Tuple[str, str] = tuple(CONTRACT["qk_norms_after_rope"]["modules"])


def packed_attr(layer: str, role: str) -> str:
    """The attribute a layer's packed tensor of `role` lives in, e.g. ("Attention", "qkv_weight")."""
    return LAYERS[layer]["packed"][role]


def packed_attrs(layer: str) -> List[str]:
    return list(LAYERS[layer]["packed"].values())


def layer_for_class(class_name: str) -> str:
    """The layer that replaces a transformers class's forward, "" when none does."""
    for layer, spec in LAYERS.items():
        if class_name in spec["classes"]:
            return layer
    return ""
