"""Packing on the device, from the module a layer is bound to, when no offline-packed tensors
were attached (plain `kernelize`, or `inject` without `packed=`).

Each layer's packed tensors (contract.json `packed`) are made from its source children
(contract.json `sources`) the way the Go packer makes them offline (inject/pack/transform.go):
q/k/v and gate/up concatenated along the output dimension, weights transposed to K-major
[in, out], BatchNorm folded into the neighbouring Linear or Conv2d with its running
statistics, cast to the model's half dtype. Folds run in float32 on the device (the offline
packer folds in float64 and rounds once, so the two differ in the last bits only). The result
is cached on the module as non-persistent buffers: it moves with `model.to(...)`, stays out of
`state_dict()`, and the module's own weights are left untouched.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Optional

import torch
from torch import nn

from ._backend import env_switch
from .contract import INTERLEAVED_ROTARY, LAYERS, NAME_ATTR, packed_attr

__all__ = ["pack", "Released"]


class Released(nn.Module):
    """Placeholder for a child whose weights now live, packed, on its parent (`inject` with
    offline-packed tensors). It keeps the plain attributes the parent's layer still reads
    (a convolution's stride, padding, ...) and nothing else."""

    def __init__(self, what: str, keep: Optional[Dict[str, object]] = None):
        super().__init__()
        self.what = what
        for k, v in (keep or {}).items():
            setattr(self, k, v)

    def forward(self, *args, **kwargs):
        raise RuntimeError(
            f"xpuinject_kernels: {self.what}: its weights were released when the packed weights were loaded; "
            "only the packed layer bound to its parent can run it"
        )

    def extra_repr(self) -> str:
        return f"released: {self.what}"


def _name(module: nn.Module) -> str:
    return getattr(module, NAME_ATTR, None) or type(module).__name__


def _child(module: nn.Module, name: str, layer: str) -> nn.Module:
    c = module._modules.get(name)
    if c is None or isinstance(c, Released):
        attrs = ", ".join(LAYERS[layer]["packed"].values())
        raise RuntimeError(
            f"xpuinject_kernels: {layer}: module {_name(module)!r} has neither its packed tensors ({attrs}) "
            f"nor a {name!r} child with weights to pack them from"
        )
    return c


def _half(w: torch.Tensor) -> torch.dtype:
    """The dtype packed tensors take: the model's own half dtype, bf16 for a float32 source."""
    return w.dtype if w.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def _kmajor(w: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    return w.to(dt).t().contiguous()


def _bn_scale(bn: nn.Module) -> torch.Tensor:
    """gamma / sqrt(var + eps) in float32 (gamma = 1 for a BatchNorm without affine weights)."""
    var = bn.running_var.float()
    gamma = bn.weight.float() if bn.weight is not None else torch.ones_like(var)
    return gamma / torch.sqrt(var + bn.eps)


def _bn_shift(bn: nn.Module) -> torch.Tensor:
    mean = bn.running_mean.float()
    return bn.bias.float() if bn.bias is not None else torch.zeros_like(mean)


def rotary_dim(m: nn.Module) -> int:
    """The channels of each head an interleaved-rotary attention rotates: int(head_dim *
    partial_rotary_factor), as GLM's rotary embedding computes its dim (rope_parameters' factor,
    else the config's, else 1)."""
    cfg = m.config
    factor = (getattr(cfg, "rope_parameters", None) or {}).get("partial_rotary_factor")
    if factor is None:
        factor = getattr(cfg, "partial_rotary_factor", 1.0)
    return int(m.head_dim * factor)


def deinterleave_rows(t: torch.Tensor, heads: int, head_dim: int, rot: int) -> torch.Tensor:
    """rope-deinterleave on q or k rows [heads * head_dim, ...]: in each head, the first `rot` rows'
    even ones, then their odd ones, so rotate-half RoPE computes the rotation of adjacent pairs
    (2i, 2i+1); q.k is unchanged when q and k are reordered alike. The offline packer's order
    (inject/pack/transform.go DeinterleavePerm)."""
    rest = t.shape[1:]
    x = t.reshape(heads, head_dim, *rest)
    r = x[:, :rot].reshape(heads, rot // 2, 2, *rest).transpose(1, 2).reshape(heads, rot, *rest)
    return torch.cat([r, x[:, rot:]], dim=1).reshape(heads * head_dim, *rest)


def _attention(m: nn.Module) -> Dict[str, torch.Tensor]:
    if "qkv_proj" in m._modules:  # Phi-3: q, k, v rows already concatenated in the checkpoint
        qkv, o = _child(m, "qkv_proj", "FusedAttention"), _child(m, "o_proj", "FusedAttention")
        dt = _half(qkv.weight)
        return {"qkv_weight": _kmajor(qkv.weight, dt), "o_weight": _kmajor(o.weight, dt)}
    q, k, v, o = (_child(m, n, "Attention") for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    dt = _half(q.weight)
    biases = [p.bias for p in (q, k, v)]
    if any(b is not None for b in biases) and not all(b is not None for b in biases):
        raise RuntimeError(f"xpuinject_kernels: Attention: module {_name(m)!r}: only some of q/k/v_proj carry a bias")
    qw, kw, qb, kb = q.weight, k.weight, biases[0], biases[1]
    if type(m).__name__ in INTERLEAVED_ROTARY:
        d, rot = m.head_dim, rotary_dim(m)
        hq, hk = qw.shape[0] // d, kw.shape[0] // d
        qw, kw = deinterleave_rows(qw, hq, d, rot), deinterleave_rows(kw, hk, d, rot)
        if qb is not None:
            qb, kb = deinterleave_rows(qb, hq, d, rot), deinterleave_rows(kb, hk, d, rot)
    out = {"qkv_weight": _kmajor(torch.cat([qw, kw, v.weight], 0), dt), "o_weight": _kmajor(o.weight, dt)}
    if qb is not None:
        out["qkv_bias"] = torch.cat([qb, kb, biases[2]]).to(dt)
    if o.bias is not None:
        out["o_bias"] = o.bias.to(dt)
    return out


def _swiglu(m: nn.Module) -> Dict[str, torch.Tensor]:
    if "gate_up_proj" in m._modules:  # Phi-3: gate, then up rows, already concatenated
        gu, d = _child(m, "gate_up_proj", "FusedSwiGLUMLP"), _child(m, "down_proj", "FusedSwiGLUMLP")
        dt = _half(gu.weight)
        return {"gate_up_weight": _kmajor(gu.weight, dt), "down_weight": _kmajor(d.weight, dt)}
    g, u, d = (_child(m, n, "SwiGLUMLP") for n in ("gate_proj", "up_proj", "down_proj"))
    dt = _half(g.weight)
    out = {"gate_up_weight": _kmajor(torch.cat([g.weight, u.weight], 0), dt), "down_weight": _kmajor(d.weight, dt)}
    if (g.bias is None) != (u.bias is None):
        raise RuntimeError(f"xpuinject_kernels: SwiGLUMLP: module {_name(m)!r}: only one of gate/up_proj carries a bias")
    if g.bias is not None:
        out["gate_up_bias"] = torch.cat([g.bias, u.bias]).to(dt)
    if d.bias is not None:
        out["down_bias"] = d.bias.to(dt)
    return out


def _linear_bn(m: nn.Module) -> Dict[str, torch.Tensor]:
    """Linear then BatchNorm1d: W' = diag(a) W, b' = a (b - mean) + beta, a = gamma / sqrt(var + eps)."""
    lin, bn = _child(m, "linear", "LinearBN"), _child(m, "batch_norm", "LinearBN")
    a = _bn_scale(bn)
    b = lin.bias.float() if lin.bias is not None else torch.zeros_like(a)
    dt = _half(lin.weight)
    return {"weight": _kmajor(lin.weight.float() * a[:, None], dt), "bias": (a * (b - bn.running_mean.float()) + _bn_shift(bn)).to(dt)}


def _bn_linear(m: nn.Module) -> Dict[str, torch.Tensor]:
    """BatchNorm1d then Linear: W' = W diag(s), b' = b + W (beta - s mean), s = gamma / sqrt(var + eps)."""
    bn, lin = _child(m, "batch_norm", "BNLinear"), _child(m, "linear", "BNLinear")
    s = _bn_scale(bn)
    w = lin.weight.float()
    b = lin.bias.float() if lin.bias is not None else torch.zeros(w.shape[0], device=w.device)
    dt = _half(lin.weight)
    return {"weight": _kmajor(w * s[None, :], dt), "bias": (b + w @ (_bn_shift(bn) - s * bn.running_mean.float())).to(dt)}


def _conv_bn(m: nn.Module) -> Dict[str, torch.Tensor]:
    """Conv2d then BatchNorm2d: W'[o] = a[o] W[o], b' = a (b - mean) + beta."""
    conv, bn = _child(m, "convolution", "ConvBN"), _child(m, "batch_norm", "ConvBN")
    a = _bn_scale(bn)
    b = conv.bias.float() if conv.bias is not None else torch.zeros_like(a)
    dt = _half(conv.weight)
    return {"weight": (conv.weight.float() * a[:, None, None, None]).to(dt),
            "bias": (a * (b - bn.running_mean.float()) + _bn_shift(bn)).to(dt)}


def _linear(m: nn.Module) -> Dict[str, torch.Tensor]:
    if getattr(m, "weight", None) is None:
        raise RuntimeError(f"xpuinject_kernels: Linear: module {_name(m)!r} has neither xpuinject_weight nor a weight")
    dt = _half(m.weight)
    out = {"weight": _kmajor(m.weight, dt)}
    if m.bias is not None:
        out["bias"] = m.bias.to(dt)
    return out


def _gemma_norm(m: nn.Module) -> Dict[str, torch.Tensor]:
    """Gemma's norm offset: 1 + w in fp32 (the offline packer folds the same from the source)."""
    return {"weight": 1.0 + m.weight.float()}


def _sparse_moe(m: nn.Module, router: str = "gate") -> Dict[str, torch.Tensor]:
    """The router [E, H] (the block's `router` child) and transformers' stacked experts
    (gate_up_proj [E, 2I, H], gate rows then up; down_proj [E, H, I]), each transposed to K-major
    as the offline packer stacks them."""
    gate, experts = _child(m, router, "SparseMoE"), _child(m, "experts", "SparseMoE")
    dt = _half(gate.weight)
    return {"router_weight": _kmajor(gate.weight, dt),
            "gate_up_weight": experts.gate_up_proj.to(dt).transpose(1, 2).contiguous(),
            "down_weight": experts.down_proj.to(dt).transpose(1, 2).contiguous()}


def _shared_expert_moe(m: nn.Module) -> Dict[str, torch.Tensor]:
    """_sparse_moe's tensors and the shared expert's: gate then up rows, K-major, and its down."""
    out = _sparse_moe(m)
    se = _child(m, "shared_expert", "SharedExpertMoE")
    g, u, d = (_child(se, n, "SharedExpertMoE") for n in ("gate_proj", "up_proj", "down_proj"))
    dt = out["router_weight"].dtype
    out["shared_gate_up_weight"] = _kmajor(torch.cat([g.weight, u.weight], 0), dt)
    out["shared_down_weight"] = _kmajor(d.weight, dt)
    return out


_PACKERS: Dict[str, Callable[[nn.Module], Dict[str, torch.Tensor]]] = {
    "Attention": _attention,
    "FusedAttention": _attention,
    "SwiGLUMLP": _swiglu,
    "FusedSwiGLUMLP": _swiglu,
    "GeGLUMLP": _swiglu,
    "GemmaRMSNorm": _gemma_norm,
    "LinearBN": _linear_bn,
    "BNLinear": _bn_linear,
    "ConvBN": _conv_bn,
    "Linear": _linear,
    "SparseMoE": _sparse_moe,
    "RouterMoE": lambda m: _sparse_moe(m, "router"),
    "SharedExpertMoE": _shared_expert_moe,
}


# The packed tensors a decode GEMV may read N-major ([N, K] rows of contiguous K, nn.Linear's own
# layout, seen as [K, N]). On the H200 the Qwen3-30B-A3B attention projections' one-row GEMVs took
# 6.99 and 6.39 us that way (the EW path) against 8.56 and 7.97 K-major
# (benchmarks/bench_launch_floor.py --nmajor), but the whole decode step moved by 0.998x on the
# H200 and 0.99x on an H100 (BENCHMARKS.md), so K-major stays the default everywhere.
# Every kernel that takes these tensors reads either layout. XPUINJECT_NMAJOR=1 or 0 decides.
NMAJOR_ROLES = {("Attention", "qkv_weight"), ("Attention", "o_weight")}
NMAJOR_ON_CUDA = False

# The MoE layers' stacked experts, which every MoE kernel reads as packed ([E, K, N], K-major),
# N-major (XPUINJECT_MOE_NMAJOR=1: each expert's [N, K], nn.Linear's own layout, seen as [E, K, N])
# or blocked (moe.blocked: each tile of XPUINJECT_MOE_SLAB columns one contiguous run of memory).
# On an H100, each at its best launch config, N-major took the whole decode step to 0.990x but the
# prefill block to 1.02-1.03x (BENCHMARKS.md), so the experts stay K-major.
MOE_EXPERT_ROLES = {(layer, role) for layer in ("SparseMoE", "RouterMoE", "SharedExpertMoE")
                    for role in ("gate_up_weight", "down_weight")}


def nmajor_on(device: torch.device) -> bool:
    on = env_switch("XPUINJECT_NMAJOR")
    return (device.type == "cuda" and NMAJOR_ON_CUDA) if on is None else on


def moe_slab() -> int:
    """XPUINJECT_MOE_SLAB: the experts' blocked-layout tile width (a power of two from 16 to 1024),
    0 or unset for the packed layout; any other value is an error naming the variable."""
    v = os.environ.get("XPUINJECT_MOE_SLAB", "").strip()
    if v in ("", "0"):
        return 0
    if not v.isdigit() or int(v) not in (16, 32, 64, 128, 256, 512, 1024):
        raise ValueError(f"xpuinject_kernels: environment variable XPUINJECT_MOE_SLAB={v!r}: want 0 or a power of two "
                         "from 16 to 1024 (columns per tile)")
    return int(v)


def decode_layout(layer: str, role: str, t: torch.Tensor) -> torch.Tensor:
    """t, or the [K, N] view of its N-major copy where NMAJOR_ROLES and nmajor_on say so, or a MoE
    layer's experts as the [E, K, N] view of their N-major copy (XPUINJECT_MOE_NMAJOR) or their
    blocked copy where moe_slab says so (and their columns split into its tiles, gate/up's halves
    each)."""
    if (layer, role) in NMAJOR_ROLES and t.dim() == 2 and t.stride(1) == 1 and nmajor_on(t.device):
        return t.t().contiguous().t()
    if (layer, role) in MOE_EXPERT_ROLES and t.dim() == 3:
        nmajor, slab = bool(env_switch("XPUINJECT_MOE_NMAJOR")), moe_slab()
        if nmajor and slab:
            raise ValueError("xpuinject_kernels: environment variables XPUINJECT_MOE_NMAJOR and XPUINJECT_MOE_SLAB "
                             "both set: the experts load N-major or blocked, not both")
        return experts_layout(role, t, nmajor, slab)
    return t


def experts_layout(role: str, t: torch.Tensor, nmajor: bool = False, slab: int = 0) -> torch.Tensor:
    """A MoE layer's stacked experts t ([E, K, N], role gate_up_weight or down_weight) as the
    kernels are to read them: the [E, K, N] view of their N-major copy (nmajor), their blocked
    copy (moe.blocked) where their columns split into slab-wide tiles (gate/up's halves each),
    else t itself."""
    if nmajor:
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    n = t.shape[2] // 2 if role == "gate_up_weight" else t.shape[2]
    if slab and n % slab == 0:
        from .moe import blocked

        return blocked(t, slab)
    return t


def pack(module: nn.Module, layer: str) -> None:
    """Make `layer`'s packed tensors from `module`'s own weights and cache them on it."""
    fn = _PACKERS.get(layer)
    if fn is None:
        raise RuntimeError(f"xpuinject_kernels: {layer} has no packed tensors")
    with torch.no_grad():
        tensors = fn(module)
    for role, t in tensors.items():
        module.register_buffer(packed_attr(layer, role), decode_layout(layer, role, t), persistent=False)
