"""Graph runtime: generation and repeated forwards of transformers models, captured once as
device graphs (CUDA graphs; XPU graphs where torch has them) and replayed.

    from xpuinject_kernels.runtime import generate, GraphedForward
    out = generate(model, input_ids, attention_mask=mask, max_new_tokens=256)   # like model.generate
    with GraphedForward(vision_model) as fwd:                                    # fixed-shape forwards
        logits = fwd(pixel_values=images).logits

Eager transformers is bound by the host: a decode step of a 1B model launches hundreds of small
kernels from Python. Here the prefill runs eagerly (exactly the forward `model.generate` makes),
then every decode step -- model forward on a static KV cache, token selection (greedy, or
temperature / top-k / top-p sampling), EOS bookkeeping -- is one replay of a graph captured once
per (batch bucket, cache-length bucket, greedy|sample). Inside a step everything reads lengths and
positions from device tensors and nothing synchronizes with the host; the host checks for EOS
every `check_every` steps. The model's rotary embedding answers from cos/sin tables of the
bucket's positions, made once by the module itself (a gather, not eight launches a step), where
its RoPE type depends on the position alone.

The runtime owns the KV cache: a transformers `StaticCache`, whose layers write at their own
device-side counter (`cumulative_length`, advanced in place by every forward, warm-ups included)
rather than at a position the caller gives. The runtime sets those counters before each prefill and
sizes the cache from prompt + max_new_tokens, so a step never writes past `max_cache_len`.

It takes any transformers causal LM (stock or with xpuinject layers) and any model for
`GraphedForward`; it imports only torch here and transformers when it builds a cache. Where there is
no device graph support (the CPU, or Triton's interpreter) it runs the same steps eagerly, warns
once, and says so in `stats`.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

import torch

__all__ = ["Runtime", "Generation", "GraphedForward", "generate", "graph_support", "batch_bucket", "cache_bucket",
           "static_cache"]

# Cache lengths are rounded up to a power of two, at least this: few graphs, and a bucket serves
# every prompt + max_new_tokens below it.
MIN_CACHE_LEN = 64
# Batches are rounded up to a power of two up to this; larger batches are refused (Runtime's
# max_batch raises it).
DEFAULT_MAX_BATCH = 64
# EOS ids a step compares against (padded with -1, which no token equals).
MAX_EOS_IDS = 16
# Eager runs before a capture: Triton compiles and autotunes, cuBLAS and the caching allocator
# warm up, lazily built module state (masks, bias caches) settles.
WARMUP_RUNS = 2

_warned: set = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def batch_bucket(batch: int, max_batch: int = DEFAULT_MAX_BATCH) -> int:
    """The captured batch size that serves `batch` rows: the next power of two."""
    if batch > max_batch:
        raise ValueError(f"runtime: batch {batch} is larger than the largest batch bucket {max_batch}; "
                         f"split the batch or build Runtime(model, max_batch={1 << (batch - 1).bit_length()})")
    return 1 << (batch - 1).bit_length()


def cache_bucket(tokens: int) -> int:
    """The KV-cache length that serves `tokens` cached positions: a power of two. A generation of n
    tokens after a prompt of L caches L + n - 1 of them (the last token is never fed back)."""
    return max(MIN_CACHE_LEN, 1 << (tokens - 1).bit_length())


# ---------------------------------------------------------------------------------------------
# Device graphs
# ---------------------------------------------------------------------------------------------


class _Graphs:
    """The device-graph API of one backend: torch.cuda.CUDAGraph or torch.xpu.XPUGraph (torch >= 2.9
    has the latter, torch/xpu/graphs.py), with the matching stream and pool calls.

    Each instance warms up and captures on a stream of its own: libraries key per-stream state to
    the capture stream (cuBLAS workspaces, pytorch/pytorch#193402), and graphs of one Runtime or
    GraphedForward are released together, never under another's feet."""

    def __init__(self, mod):
        self.mod = mod
        self.graph_cls = mod.CUDAGraph if mod is torch.cuda else mod.XPUGraph
        self._stream = None

    def pool(self):
        return self.mod.graph_pool_handle()

    def capture(self, fn: Callable[[], Any], pool, warmup: int = WARMUP_RUNS):
        """Run fn `warmup` times, then capture one call, on this instance's stream; returns
        (graph, output)."""
        if self._stream is None:
            self._stream = self.mod.Stream()
        s = self._stream
        s.wait_stream(self.mod.current_stream())
        with self.mod.stream(s):
            for _ in range(warmup):
                fn()
        self.mod.current_stream().wait_stream(s)
        g = self.graph_cls()
        with self.mod.graph(g, pool=pool, stream=s):
            out = fn()
        return g, out

    def synchronize(self):
        self.mod.synchronize()


def graph_support(device) -> tuple:
    """(graphs, reason): whether steps on `device` can be captured, and why not when they cannot."""
    device = torch.device(device)
    interp = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    if device.type == "cuda":
        if interp:
            return None, "TRITON_INTERPRET=1: Triton kernels run on the host, which a CUDA graph cannot capture"
        return _Graphs(torch.cuda), None
    if device.type == "xpu":
        if interp:
            return None, "TRITON_INTERPRET=1: Triton kernels run on the host, which an XPU graph cannot capture"
        if not hasattr(torch.xpu, "XPUGraph") or not hasattr(torch.xpu, "graph"):
            return None, f"torch {torch.__version__} has no XPU graphs (torch.xpu.XPUGraph)"
        return _Graphs(torch.xpu), None
    return None, f"{device.type} has no device graphs"


def _resolve_graphs(device, graphs) -> tuple:
    if graphs not in ("auto", True, False):
        raise ValueError(f"runtime: graphs={graphs!r}: want 'auto', True or False")
    if graphs is False:
        return None, "disabled (graphs=False)"
    g, reason = graph_support(device)
    if g is None:
        if graphs is True:
            raise ValueError(f"runtime: graphs=True on {device}: {reason}")
        _warn_once(f"eager:{reason}", f"xpuinject runtime: {reason}; running eagerly")
    return g, reason


def _model_device(model) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    raise ValueError("runtime: the model has no parameters or buffers to place it on a device")


# ---------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------


def _triton_steps(t: torch.Tensor) -> bool:
    """Whether a step's greedy selection and its prologue run as Triton launches, by the device of
    t: on a GPU, or on the CPU under the Triton interpreter (an eager CPU runtime without it keeps
    the torch ops)."""
    from . import _backend

    return t.device.type in ("cuda", "xpu") or _backend.is_interpret()


@dataclass
class _Slot:
    """Everything one (batch bucket, cache length) owns: the cache and the static tensors a step
    reads and writes (their addresses are baked into the captured graphs)."""

    batch: int
    cache_len: int
    cache: Any
    tok: torch.Tensor  # [B, 1] the token the next step feeds
    cur: torch.Tensor  # [] cache slot the next step writes (its position is cur - pos_offset)
    pos_offset: torch.Tensor  # [B] cache slot minus position id, per row (left padding)
    key_valid: torch.Tensor  # [B, S] keys a query may attend (prompt mask, then True)
    arange: torch.Tensor  # [S]
    unfinished: torch.Tensor  # [B] bool
    n_gen: torch.Tensor  # [] steps taken while some row was unfinished
    out: torch.Tensor  # [B, S + 1] prompt + generated tokens (the last one is never cached)
    pad: torch.Tensor  # []
    eos: torch.Tensor  # [MAX_EOS_IDS], -1 padded
    temperature: torch.Tensor  # [] float32
    top_k: torch.Tensor  # [] long, 0 = off
    top_p: torch.Tensor  # [] float32, 1 = off
    graphs: Dict[str, Any] = field(default_factory=dict)
    trace_vals: Optional[torch.Tensor] = None  # [B, S + 1, 2] top-2 scores per step (Runtime(trace=True))
    trace_idx: Optional[torch.Tensor] = None  # [B, S + 1, 2] their token ids
    rope: Optional[list] = None  # [(rotary module, cos [S, D], sin [S, D])]: _rope_tables
    no_graph: Optional[str] = None  # why steps of this cache length run eagerly: _graph_blocker


# Two RoPE types depend on the sequence length: transformers' dynamic_rope_update
# (modeling_rope_utils.py) recomputes inv_freq from it for "dynamic" and picks LongRoPE's short or
# long factors by it. A LongRoPE module keeps computing its own, and so does a dynamic one past its
# original length; below it, dynamic_frequency_update keeps or restores the original inv_freq,
# which a table made by the module's own forward then holds (and the captured step makes no host
# sync on the length test).


def _length_rope(m) -> str:
    """The RoPE type of a rotary module whose frequencies depend on the sequence length ("dynamic"
    or "longrope" in its rope_type), "" for any other module."""
    kind = str(getattr(m, "rope_type", "")) if hasattr(m, "inv_freq") else ""
    return kind if "dynamic" in kind or "longrope" in kind else ""


def _table_rotaries(model, S: int) -> list:
    """The model's rotary-embedding modules whose cos/sin a per-position table of S positions can
    stand in for: a transformers rotary module (inv_freq, attention_scaling) whose forward takes
    (x, position_ids) alone, of a position-only RoPE type, or dynamic RoPE (HunYuan's alpha
    base, Llama's dynamic NTK) when S is at most its original length."""
    import inspect

    found = []
    for m in model.modules():
        if not (hasattr(m, "inv_freq") and hasattr(m, "attention_scaling")) or "forward" in m.__dict__:
            continue
        kind = _length_rope(m)
        original = getattr(m, "original_max_seq_len", None)
        if "longrope" in kind or ("dynamic" in kind and not (isinstance(original, int) and S <= original)):
            continue
        if list(inspect.signature(m.forward).parameters) != ["x", "position_ids"]:
            continue
        found.append(m)
    return found


def _rope_tables(model, S: int, dtype: torch.dtype, device: torch.device) -> list:
    """cos/sin of positions [0, S) for each table-able rotary module, made by the module's own
    forward: the same fp32 ops position by position (the inv_freq x position product has one
    term, so it is exact whatever kernel runs it), so a lookup equals the module's output bit for
    bit under torch's default matmul precision. TF32 is kept off while they are made: it would
    round inv_freq itself."""
    tables = []
    x = torch.empty((1,), dtype=dtype, device=device)
    pos = torch.arange(S, device=device)[None]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.no_grad():
            for m in _table_rotaries(model, S):
                cos, sin = m(x, pos)
                tables.append((m, cos[0].contiguous(), sin[0].contiguous()))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return tables


def _graph_blocker(model, S: int, tables: list) -> Optional[str]:
    """Why a captured step at cache length S (0: a forward of any length) would be wrong, None
    when it would not: a rotary module that picks its frequencies by the sequence length
    (LongRoPE's factors, dynamic RoPE past its original length) with no table among `tables`,
    whose length test on the host a graph would freeze at capture (and which synchronizes the
    stream while capturing)."""
    tabled = {id(m) for m, _, _ in tables}
    for name, m in model.named_modules():
        kind = _length_rope(m)
        if kind and id(m) not in tabled:
            return (f"{name or type(m).__name__} is {kind} RoPE, which picks its frequencies by the sequence length "
                    f"(original length {getattr(m, 'original_max_seq_len', '?')}"
                    f"{f', cache length {S}' if S else ''}): a captured step would freeze them")
    return None


def _dynamic_rope_len(model) -> Optional[int]:
    """The shortest original length of the model's dynamic-RoPE rotary modules (positions below it
    keep their frequencies, so a table of that many stands in), None when it has none."""
    lens = [m.original_max_seq_len for m in model.modules()
            if "dynamic" in _length_rope(m) and isinstance(getattr(m, "original_max_seq_len", None), int)]
    return min(lens) if lens else None


def _within_tables(inputs: dict, n: int) -> bool:
    """Whether a forward reaches only positions [0, n), which rope tables of n positions cover:
    its positions are 0 .. S-1 (no position_ids, cache_position or cache of its own, whose values
    only the device knows) and S <= n."""
    if any(inputs.get(k) is not None for k in ("position_ids", "cache_position", "past_key_values")):
        return False
    return _seq_len(inputs) <= n


def _seq_len(inputs: dict) -> int:
    """The sequence length of a forward's inputs (input_ids or inputs_embeds), 0 when neither."""
    for k in ("input_ids", "inputs_embeds"):
        v = inputs.get(k)
        if isinstance(v, torch.Tensor) and v.dim() >= 2:
            return v.shape[1]
    return 0


@contextlib.contextmanager
def _rope_lookup(slot: "_Slot", rows: Optional[tuple] = None):
    """Inside: the slot's rotary modules answer from its tables (positions < slot.cache_len, which
    every runtime forward keeps to): one gather each for cos and sin instead of the module's
    product, cat, cos, sin, scale and casts, about eight launches a decode step. rows: (position
    ids, cos, sin) the step's prologue already gathered from the one table, returned when the
    module is asked for those very position ids."""
    bound = []
    try:
        for m, cos_t, sin_t in slot.rope or ():
            orig = m.forward

            def lookup(x, position_ids, _c=cos_t, _s=sin_t, _orig=orig):
                if x.dtype != _c.dtype:
                    return _orig(x, position_ids)
                if rows is not None and position_ids is rows[0]:
                    return rows[1], rows[2]
                return _c[position_ids], _s[position_ids]

            m.forward = lookup
            bound.append(m)
        yield
    finally:
        for m in bound:
            del m.forward


def static_cache(config, max_cache_len: int):
    """A transformers StaticCache of max_cache_len slots per layer, every layer full-length.

    Its sliding-window layers (StaticSlidingWindowLayer) roll their window in place behind
    Python-side branches on a host counter (`cumulative_length_int`): a captured step cannot follow
    them, and torch.compile with static shapes guards on that counter and recompiles at every
    token. A full-length StaticLayer keeps every token instead, and the attention mask applies the
    window (the model's own sliding-window mask, or the runtime's _masks), so attention sees the
    same keys."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    cache = StaticCache(config=config, max_cache_len=max_cache_len)
    for i, layer in enumerate(cache.layers):
        if getattr(layer, "is_sliding", False):
            cache.layers[i] = StaticLayer(max_cache_len=max_cache_len)
    return cache


class Runtime:
    """Generation (and fixed-shape forwards) of one model with captured device graphs.

    graphs: "auto" (capture where the device supports it, else eager with a warning), True (require
    it), False (eager; the same steps, not captured). max_batch: largest batch bucket.
    check_every: decode steps between the host's EOS checks (the steps past the last EOS are
    discarded; a generation ends at the same token as model.generate's).

    `stats` says what ran: graphs on or off and why, captures and their wall time, replays, eager
    steps, and the last generation's timings when asked for (`generate(..., timings=True)`).
    trace: record each step's two best scores and their ids (`last_trace`), to tell a near-tie from
    a difference when two runs disagree; costs a top-k per step.
    """

    def __init__(self, model, *, graphs="auto", max_batch: int = DEFAULT_MAX_BATCH, check_every: int = 32,
                 trace: bool = False):
        if max_batch < 1 or check_every < 1:
            raise ValueError(f"runtime: max_batch {max_batch} and check_every {check_every} must be positive")
        self.model = model
        self.device = _model_device(model)
        self._g, reason = _resolve_graphs(self.device, graphs)
        self._forced = graphs is True
        self._pool = self._g.pool() if self._g is not None else None
        self.max_batch = max_batch
        self.check_every = check_every
        self.trace = trace
        self.last_trace: Optional[dict] = None
        self._slots: Dict[tuple, _Slot] = {}
        self._rope: Dict[int, list] = {}  # cache length -> _rope_tables
        self._window = None
        self._mask_zero = self._mask_min = None
        self._embedding: Any = False  # _plain_embedding's answer once asked (a tensor or None)
        self._types = self._layer_types() if hasattr(getattr(model, "config", None), "num_hidden_layers") else []
        self.stats: Dict[str, Any] = {
            "device": str(self.device), "graphs": self._g is not None, "reason": reason,
            "captures": 0, "capture_s": 0.0, "replays": 0, "eager_steps": 0, "buckets": [],
        }

    @property
    def graphs(self) -> bool:
        return self._g is not None

    def release(self) -> None:
        """Drop every cache and graph (their device memory returns to the allocator)."""
        self._slots.clear()
        self._rope.clear()
        self.stats["buckets"] = []

    # -- attention masks ----------------------------------------------------------------------

    def _model_dtype(self) -> torch.dtype:
        for t in self.model.parameters():
            if t.is_floating_point():
                return t.dtype
        return torch.float32

    def _mask_kind(self) -> str:
        """The 4-D mask the model's attention reads: transformers builds a bool mask (True = attend)
        for sdpa and functions registered like it, an additive one for eager attention
        (masking_utils.sdpa_mask / eager_mask)."""
        cfg = getattr(self.model, "config", None)
        impl = getattr(cfg, "_attn_implementation", None) or "sdpa"
        if impl == "eager":
            if self._mask_zero is None:  # made once: captured graphs keep reading these two
                dt = self._model_dtype()
                self._mask_zero = torch.zeros((), dtype=dt, device=self.device)
                self._mask_min = torch.full((), torch.finfo(dt).min, dtype=dt, device=self.device)
            return "additive"
        if impl.startswith("flash_attention") or impl.startswith("flex_attention") or impl.startswith("paged"):
            raise ValueError(f"runtime: attn_implementation {impl!r} takes no 4-D mask; load the model with "
                             "attn_implementation='sdpa' (or 'eager') to run it under the runtime")
        return "bool"

    # -- slots --------------------------------------------------------------------------------

    def _layer_types(self) -> list:
        """Per decoder layer: "full_attention" or "sliding_attention" (transformers' layer_types)."""
        from transformers.cache_utils import get_layer_types_and_kwargs

        cfg = self.model.config
        cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        types, _ = get_layer_types_and_kwargs(cfg)
        bad = sorted({t for t in types if t not in ("full_attention", "sliding_attention")})
        if bad:
            raise ValueError(f"runtime: layer types {bad} are not supported (full and sliding-window attention are)")
        self._window = getattr(cfg, "sliding_window", None) if "sliding_attention" in types else None
        return types

    def _slot(self, batch: int, need: int, max_cache_len: Optional[int]) -> _Slot:
        S = max_cache_len if max_cache_len is not None else cache_bucket(need)
        key = (batch, S)
        slot = self._slots.get(key)
        if slot is not None:
            return slot
        cache = static_cache(self.model.config, S)
        dev = self.device
        z = lambda *shape, dtype=torch.long: torch.zeros(shape, dtype=dtype, device=dev)  # noqa: E731
        slot = _Slot(
            batch=batch, cache_len=S, cache=cache, tok=z(batch, 1), cur=z(), pos_offset=z(batch),
            key_valid=torch.ones(batch, S, dtype=torch.bool, device=dev),
            arange=torch.arange(S, device=dev), unfinished=torch.ones(batch, dtype=torch.bool, device=dev),
            n_gen=z(), out=z(batch, S + 1), pad=z(), eos=torch.full((MAX_EOS_IDS,), -1, dtype=torch.long, device=dev),
            temperature=torch.ones((), dtype=torch.float32, device=dev), top_k=z(),
            top_p=torch.ones((), dtype=torch.float32, device=dev),
        )
        if S not in self._rope:  # one set per cache length, shared by its batch buckets
            self._rope[S] = _rope_tables(self.model, S, self._model_dtype(), dev)
        slot.rope = self._rope[S]
        slot.no_graph = _graph_blocker(self.model, S, slot.rope) if self.graphs else None
        if self.trace:
            slot.trace_vals = torch.zeros(batch, S + 1, 2, dtype=torch.float32, device=dev)
            slot.trace_idx = torch.zeros(batch, S + 1, 2, dtype=torch.long, device=dev)
        self._slots[key] = slot
        self.stats["buckets"].append({"batch": batch, "cache_len": S})
        return slot

    def _set_cache_length(self, slot: _Slot, n: int) -> None:
        """Point every cache layer's write counter at slot n (a device fill, no sync)."""
        for layer in slot.cache.layers:
            cl = getattr(layer, "cumulative_length", None)
            if isinstance(cl, torch.Tensor):
                cl.fill_(n)
            elif cl is not None:
                layer.cumulative_length = n
            if hasattr(layer, "cumulative_length_int"):
                layer.cumulative_length_int = n

    def _forward_kwargs(self) -> dict:
        import inspect

        params = inspect.signature(self.model.forward).parameters
        return {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    # -- one step -----------------------------------------------------------------------------

    def _select(self, slot: _Slot, logits: torch.Tensor, mode: str) -> None:
        """Pick each row's next token from its last logits and advance the slot: all device ops.
        Mirrors transformers' generate loop: finished rows get pad, EOS finishes a row."""
        if mode == "greedy" and slot.trace_vals is None and _triton_steps(logits):
            # argmax and the bookkeeping below in one launch (greedy.py)
            from .greedy import greedy_select

            greedy_select(logits, slot.unfinished, slot.n_gen, slot.out, slot.cur, slot.pad, slot.eos, slot.tok)
            return
        scores = logits.float()  # generate compares float32 logits
        nxt = scores.argmax(-1) if mode == "greedy" else _sample(scores, slot.temperature, slot.top_k, slot.top_p)
        if slot.trace_vals is not None:
            v, i = scores.topk(2, dim=-1)
            at = (slot.cur + 1).view(1)
            slot.trace_vals.index_copy_(1, at, v[:, None])
            slot.trace_idx.index_copy_(1, at, i[:, None])
        alive = slot.unfinished
        slot.n_gen.add_(alive.any().long())
        nxt = torch.where(alive, nxt, slot.pad)
        slot.out.index_copy_(1, (slot.cur + 1).view(1), nxt[:, None])
        # isin would take a sorting path (with a host sync) for 16 ids; a broadcast compare does not
        slot.unfinished.logical_and_(~(nxt[:, None] == slot.eos[None, :]).any(-1))
        slot.tok.copy_(nxt[:, None])
        slot.cur.add_(1)

    def _masks(self, slot: _Slot, mask_kind: str):
        """The decode step's 4-D attention mask(s) [B, 1, 1, S], from device tensors: keys up to the
        current slot that are not padding (and, for sliding-window layers, within the window).
        Models with per-layer-type masks (a `layer_types` config) take a dict by type."""
        full = ((slot.arange <= slot.cur) & slot.key_valid)[:, None, None, :]
        masks = {"full_attention": full}
        if self._window is not None:
            masks["sliding_attention"] = full & (slot.arange > slot.cur - self._window)[None, None, None, :]
        if mask_kind == "additive":
            masks = {k: torch.where(m, self._mask_zero, self._mask_min) for k, m in masks.items()}
        return self._by_type(masks)

    def _by_type(self, masks: dict):
        types = set(self._types)
        if len(types) == 1:
            return masks[types.pop()]
        return masks

    def _plain_embedding(self) -> Optional[torch.Tensor]:
        """The input embedding's table where the model's embedding is a plain lookup of it (an
        nn.Embedding, not a subclass that scales, no max_norm renormalizing it) and its forward
        takes inputs_embeds, else None. Decided once: eager steps ask at every token."""
        if self._embedding is not False:
            return self._embedding
        import inspect

        w = None
        get = getattr(self.model, "get_input_embeddings", None)
        emb = get() if get is not None else None
        if ("inputs_embeds" in inspect.signature(self.model.forward).parameters
                and type(emb) is torch.nn.Embedding and emb.max_norm is None):
            w = emb.weight
            if not (w.device == self.device and w.dim() == 2 and w.stride(1) == 1):
                w = None
        self._embedding = w
        return w

    def _prologue(self, slot: _Slot, mask_kind: str):
        """(mask, position ids, the model's input, rows for _rope_lookup) of a decode step from one
        launch (prologue.py), or None where the torch ops stay: XPUINJECT_FUSE_PROLOGUE=0, or a
        CPU without the Triton interpreter. The model then takes the token's embedding row
        (inputs_embeds) where its embedding is a plain lookup, and the one rotary table's rows."""
        from . import _backend

        if _backend.env_switch("XPUINJECT_FUSE_PROLOGUE") is False or not _triton_steps(slot.key_valid):
            return None
        from .prologue import step_prologue

        weight = self._plain_embedding()
        tables = tuple(slot.rope[0][1:]) if slot.rope is not None and len(slot.rope) == 1 else None
        dt = self._mask_min.dtype if mask_kind == "additive" else torch.bool
        out = step_prologue(slot.cur, slot.pos_offset, slot.key_valid, tok=slot.tok if weight is not None else None,
                            weight=weight, tables=tables, window=self._window, mask_dtype=dt)
        masks = {"full_attention": out["mask"]}
        if self._window is not None:
            masks["sliding_attention"] = out["sliding_mask"]
        inputs = {"inputs_embeds": out["embeds"]} if weight is not None else {"input_ids": slot.tok}
        rows = (out["pos"], out["cos"], out["sin"]) if tables is not None else None
        return self._by_type(masks), out["pos"], inputs, rows

    def _decode_step(self, slot: _Slot, mode: str, mask_kind: str, kw: dict) -> None:
        pro = self._prologue(slot, mask_kind)
        if pro is None:
            mask, pos = self._masks(slot, mask_kind), (slot.cur - slot.pos_offset)[:, None]
            inputs, rows = {"input_ids": slot.tok}, None
        else:
            mask, pos, inputs, rows = pro
        with _rope_lookup(slot, rows):
            out = self.model(**inputs, attention_mask=mask, position_ids=pos, past_key_values=slot.cache,
                             use_cache=True, **kw)
        self._select(slot, out.logits[:, -1, :], mode)

    def _graph(self, slot: _Slot, mode: str, mask_kind: str, kw: dict):
        g = slot.graphs.get(mode)
        if g is not None:
            return g
        t = time.perf_counter()
        with torch.no_grad():
            if not _cache_ready(slot.cache):
                # a one-token forward sizes the cache's tensors (StaticLayer allocates lazily)
                self._set_cache_length(slot, 0)
                self.model(input_ids=slot.tok, position_ids=slot.tok * 0, past_key_values=slot.cache, use_cache=True, **kw)
            # warm-ups and the capture write cache slots from 0; the prefill that follows rewrites them
            slot.cur.zero_()
            slot.key_valid.fill_(True)
            slot.unfinished.fill_(True)
            self._set_cache_length(slot, 0)
            g, _ = self._g.capture(lambda: self._decode_step(slot, mode, mask_kind, kw), self._pool)
        self._g.synchronize()
        slot.graphs[mode] = g
        self.stats["captures"] += 1
        self.stats["capture_s"] += time.perf_counter() - t
        return g

    # -- generate -----------------------------------------------------------------------------

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        *,
        max_new_tokens: Optional[int] = None,
        do_sample: bool = False,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        eos_token_id=None,
        pad_token_id: Optional[int] = None,
        streamer=None,
        max_cache_len: Optional[int] = None,
        timings: bool = False,
    ) -> torch.LongTensor:
        """Like `model.generate` for greedy search and multinomial sampling: returns prompt + new
        tokens [batch, prompt + n]; a row that reached an EOS is padded with pad_token_id, and the
        result ends at the step where every row has finished (or after max_new_tokens).

        Unset arguments come from `model.generation_config` (max_new_tokens: else 20; temperature
        1.0, top_k 50, top_p 1.0 as transformers' defaults; pad: else the first EOS id).
        attention_mask: [batch, prompt] with 0 on (left) padding; None attends to every token
        (model.generate may instead infer a mask from pad tokens in the prompt: pass it). streamer: an object with
        put(tokens)/end() (transformers' TextStreamer), fed like model.generate feeds it (batch 1;
        the host then waits for every token). max_cache_len: the KV-cache length (default: prompt +
        max_new_tokens - 1, the positions a generation caches, rounded up to a power of two;
        model.generate's static cache has exactly prompt + max_new_tokens - 1: pass that to
        reproduce its numbers, since attention over more masked keys may round differently).
        timings: record prefill and per-step device times in stats["last"].
        """
        gen = self.start(input_ids, attention_mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                         temperature=temperature, top_k=top_k, top_p=top_p, eos_token_id=eos_token_id,
                         pad_token_id=pad_token_id, streamer=streamer, max_cache_len=max_cache_len, timings=timings)
        has_eos = bool(gen.eos)
        for step in range(gen.max_steps):
            if streamer is not None or (has_eos and step % self.check_every == 0):
                if gen.finished():
                    break
            gen.step()
        return gen.result()

    def start(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None, *,
              max_new_tokens: Optional[int] = None, do_sample: bool = False, temperature: Optional[float] = None,
              top_k: Optional[int] = None, top_p: Optional[float] = None, eos_token_id=None,
              pad_token_id: Optional[int] = None, streamer=None, max_cache_len: Optional[int] = None,
              timings: bool = False) -> "Generation":
        """A generation in flight, stepped by the caller: the prefill and the first token selection
        have run; each `step()` is one decode step (a graph replay, or the eager step) with no host
        sync, `finished()` asks the device whether every row reached an EOS, and `result()` ends it.
        `generate` is this loop; a benchmark times `step()` itself. Arguments as in `generate`."""
        p = self._check_args(input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, top_p,
                             eos_token_id, pad_token_id, streamer, max_cache_len)
        B, L = input_ids.shape
        n_new = p["max_new_tokens"]
        mode = "sample" if do_sample else "greedy"
        mask_kind = self._mask_kind()
        kw = self._forward_kwargs()
        Bb = batch_bucket(B, self.max_batch)  # refuses a batch past max_batch on every device
        if not self.graphs:
            Bb = B  # eager steps take any batch size: no rows to fill
        slot = self._slot(Bb, L + n_new - 1, max_cache_len)
        if slot.no_graph is not None:
            if self._forced:
                raise ValueError(f"runtime: graphs=True: {slot.no_graph}; run with graphs='auto' or False")
            _warn_once(f"nograph:{slot.no_graph}", f"xpuinject runtime: {slot.no_graph}; these steps run eagerly")
            self.stats["eager_reason"] = slot.no_graph
        graph = self._graph(slot, mode, mask_kind, kw) if self.graphs and n_new > 1 and slot.no_graph is None else None

        dev = self.device
        ids = input_ids.to(dev)
        am = (attention_mask.to(dev) != 0) if attention_mask is not None else torch.ones_like(ids, dtype=torch.bool)
        if Bb > B:  # rows that fill the bucket repeat row 0; they start finished and emit pad
            ids = torch.cat([ids, ids[:1].expand(Bb - B, L)])
            am = torch.cat([am, am[:1].expand(Bb - B, L)])
        am_long = am.long()
        # positions as generate makes them (utils.py _prepare_position_ids_for_generation)
        pos = am_long.cumsum(-1) - 1
        pos = pos.masked_fill(~am, 0)
        with torch.no_grad():
            slot.key_valid.fill_(True)
            slot.key_valid[:, :L].copy_(am)
            slot.pos_offset.copy_(L - (pos[:, -1] + 1))
            slot.out.fill_(p["pad"])
            slot.out[:, :L].copy_(ids)
            slot.unfinished.fill_(True)
            slot.unfinished[B:].fill_(False)
            slot.n_gen.zero_()
            slot.cur.fill_(L - 1)
            slot.pad.fill_(p["pad"])
            slot.eos.fill_(-1)
            if p["eos"]:
                slot.eos[: len(p["eos"])].copy_(torch.tensor(p["eos"], dtype=torch.long))
            slot.temperature.fill_(p["temperature"])
            slot.top_k.fill_(p["top_k"])
            slot.top_p.fill_(p["top_p"])
            self._set_cache_length(slot, 0)

            clock = _Clock(self.device, timings)
            clock.start()
            with _rope_lookup(slot):
                out = self.model(input_ids=ids, attention_mask=am_long, position_ids=pos, past_key_values=slot.cache,
                                 use_cache=True, **kw)
            self._select(slot, out.logits[:, -1, :], mode)
            del out
            clock.lap()
        if streamer is not None:
            streamer.put(input_ids.cpu())
            streamer.put(slot.tok[:B, 0].cpu())
        return Generation(self, slot, graph, mode, mask_kind, kw, B, L, n_new - 1, p["eos"], streamer, clock)

    def _check_args(self, input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, top_p,
                    eos_token_id, pad_token_id, streamer, max_cache_len) -> dict:
        gc = getattr(self.model, "generation_config", None)

        def dflt(v, name, fallback):
            if v is not None:
                return v
            g = getattr(gc, name, None)
            return g if g is not None else fallback

        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise ValueError(f"runtime: input_ids must be a [batch, tokens] tensor, got "
                             f"{tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__}")
        if input_ids.dtype not in (torch.long, torch.int32):
            raise ValueError(f"runtime: input_ids dtype {input_ids.dtype}: want token ids (int64)")
        B, L = input_ids.shape
        if B == 0 or L == 0:
            raise ValueError(f"runtime: input_ids {tuple(input_ids.shape)} is empty: the prompt needs at least one token")
        if attention_mask is not None:
            if tuple(attention_mask.shape) != (B, L):
                raise ValueError(f"runtime: attention_mask {tuple(attention_mask.shape)} does not match input_ids {(B, L)}")
            empty = (attention_mask != 0).sum(-1) == 0
            if bool(empty.any()):
                raise ValueError(f"runtime: attention_mask row {int(empty.nonzero()[0])} masks every token")
        n = dflt(max_new_tokens, "max_new_tokens", 20)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"runtime: max_new_tokens must be a positive integer, got {n!r}")
        if max_cache_len is not None and max_cache_len < L + n - 1:
            raise ValueError(f"runtime: max_cache_len {max_cache_len} < prompt {L} + max_new_tokens {n} - 1 "
                             "(the positions a generation caches)")
        temp = float(dflt(temperature, "temperature", 1.0))
        k = dflt(top_k, "top_k", 50)
        tp = float(dflt(top_p, "top_p", 1.0))
        if do_sample:
            if not temp > 0 or math.isinf(temp):
                raise ValueError(f"runtime: temperature must be a positive number, got {temp}")
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise ValueError(f"runtime: top_k must be a non-negative integer (0: off), got {k!r}")
            if not 0 < tp <= 1:
                raise ValueError(f"runtime: top_p must be in (0, 1], got {tp}")
        eos = dflt(eos_token_id, "eos_token_id", None)
        eos = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
        if len(eos) > MAX_EOS_IDS:
            raise ValueError(f"runtime: {len(eos)} EOS ids; at most {MAX_EOS_IDS}")
        pad = dflt(pad_token_id, "pad_token_id", None)
        if pad is None:
            pad = eos[0] if eos else 0
        if streamer is not None and B != 1:
            raise ValueError(f"runtime: a streamer takes batch 1, got batch {B} (as model.generate)")
        return {"max_new_tokens": n, "temperature": temp, "top_k": int(k or 0), "top_p": tp, "eos": eos, "pad": int(pad)}


class Generation:
    """One generation of a Runtime, after its prefill (Runtime.start): the caller steps it."""

    def __init__(self, rt: "Runtime", slot: _Slot, graph, mode: str, mask_kind: str, kw: dict, batch: int,
                 prompt: int, max_steps: int, eos: list, streamer, clock: "_Clock"):
        self._rt, self._slot, self._graph = rt, slot, graph
        self._mode, self._mask_kind, self._kw = mode, mask_kind, kw
        self.batch, self.prompt, self.max_steps, self.eos = batch, prompt, max_steps, eos
        self._streamer, self._clock = streamer, clock
        self.steps = 0
        self._done = False

    def step(self) -> None:
        """One decode step: the next token of every row, chosen on the device (no host sync)."""
        if self._done:
            raise RuntimeError("runtime: this generation has ended (result() was called)")
        if self.steps >= self.max_steps:
            raise RuntimeError(f"runtime: the generation has taken its {self.max_steps} decode steps "
                               f"(max_new_tokens {self.max_steps + 1}); start another")
        rt, slot = self._rt, self._slot
        if self._graph is not None:
            self._graph.replay()
            rt.stats["replays"] += 1
        else:
            with torch.no_grad():
                rt._decode_step(slot, self._mode, self._mask_kind, self._kw)
            rt.stats["eager_steps"] += 1
        self.steps += 1
        self._clock.lap()
        if self._streamer is not None:
            self._streamer.put(slot.tok[:self.batch, 0].cpu())

    def finished(self) -> bool:
        """Whether every row has reached an EOS (a host sync)."""
        return not bool(self._slot.unfinished[:self.batch].any())

    def result(self) -> torch.LongTensor:
        """Prompt + generated tokens [batch, prompt + n], ending at the step where every row finished."""
        rt, slot, B, L = self._rt, self._slot, self.batch, self.prompt
        self._done = True
        n = int(slot.n_gen)  # the one sync of a generation without a streamer
        result = slot.out[:B, : L + n].clone()
        if slot.trace_vals is not None:
            rt.last_trace = {"values": slot.trace_vals[:B, L: L + n].cpu(), "indices": slot.trace_idx[:B, L: L + n].cpu()}
        if self._streamer is not None:
            self._streamer.end()
        last = {"batch": B, "batch_bucket": slot.batch, "cache_len": slot.cache_len, "prompt_tokens": L, "new_tokens": n,
                "decode_steps": self.steps, "graph": self._graph is not None, "mode": self._mode}
        if self._clock.on:
            ms = self._clock.ms()
            last["prefill_ms"] = ms[0]
            last["step_ms"] = ms[1:]
        rt.stats["last"] = last
        return result


def _cache_ready(cache) -> bool:
    return all(getattr(layer, "is_initialized", True) for layer in cache.layers)


def _sample(scores: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Temperature, top-k, top-p (transformers' TemperatureLogitsWarper, TopKLogitsWarper,
    TopPLogitsWarper, in that order) and a multinomial draw, from device tensors only: one graph
    serves every setting. The draw is argmax(p / E), E ~ Exp(1) (the exponential race), which
    picks index i with probability p_i and, unlike torch.multinomial, needs no host sync."""
    V = scores.shape[-1]
    scores = scores / temperature
    srt, idx = scores.sort(dim=-1, descending=True)
    k = torch.where(top_k > 0, top_k.clamp(max=V), torch.full_like(top_k, V))
    kth = srt.gather(-1, (k - 1).view(1, 1).expand(srt.shape[0], 1))
    srt = srt.masked_fill(srt < kth, float("-inf"))  # ties with the k-th value stay, as in transformers
    probs = srt.softmax(-1)
    # top-p: drop a token when the mass ranked strictly above it already reaches top_p (the
    # descending form of "cumulative ascending mass <= 1 - top_p"); the first token always stays
    above = probs.cumsum(-1) - probs
    probs = probs.masked_fill(above >= top_p, 0.0)
    e = torch.empty_like(probs).exponential_()
    j = (probs / e).argmax(-1, keepdim=True)
    return idx.gather(-1, j).squeeze(-1)


class _Clock:
    """Device-event laps (host clock on the CPU) when asked for; read once at the end."""

    def __init__(self, device: torch.device, on: bool):
        self.mod = {"cuda": torch.cuda, "xpu": getattr(torch, "xpu", None)}.get(device.type)
        self.on = on
        self.marks: list = []

    def _mark(self):
        if self.mod is not None:
            e = self.mod.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def start(self):
        if self.on:
            self.marks = [self._mark()]

    def lap(self):
        if self.on:
            self.marks.append(self._mark())

    def ms(self) -> list:
        if not self.on or len(self.marks) < 2:
            return []
        if self.mod is not None:
            self.mod.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


_runtimes: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def generate(model, input_ids, attention_mask=None, **kwargs) -> torch.LongTensor:
    """`Runtime(model).generate(...)` with one Runtime per model, kept while the model lives (its
    captured graphs and caches are reused by later calls). See Runtime.generate."""
    rt = _runtimes.get(model)
    if rt is None:
        rt = _runtimes[model] = Runtime(model)
    return rt.generate(input_ids, attention_mask, **kwargs)


def runtime_for(model) -> Runtime:
    """The Runtime `generate` uses for model (to read its stats or release it)."""
    rt = _runtimes.get(model)
    if rt is None:
        rt = _runtimes[model] = Runtime(model)
    return rt


# ---------------------------------------------------------------------------------------------
# Fixed-shape forwards
# ---------------------------------------------------------------------------------------------


def _signature(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.dtype, v.device, tuple(v.stride()))
    if v is None or isinstance(v, (bool, int, float, str)):
        return ("value", v)
    raise TypeError(f"runtime: GraphedForward takes tensors and plain values (bool, int, float, str, None); "
                    f"got {type(v).__name__} (generation with a KV cache: use generate())")


def _clone_out(o):
    if isinstance(o, torch.Tensor):
        return o.clone()
    if isinstance(o, dict):  # transformers' ModelOutput is a dict subclass built from keywords
        return type(o)(**{k: _clone_out(v) for k, v in o.items()})
    if isinstance(o, (list, tuple)):
        return type(o)(_clone_out(v) for v in o)
    return o


# Inputs whose attention masks follow from their shapes alone: no padding mask, positions or cache
# from the caller (the model numbers the tokens 0..n-1 itself), and no input a model builds a
# mask from (token types, images).
SHAPE_ONLY_INPUTS = frozenset({"input_ids", "inputs_embeds", "use_cache", "logits_to_keep"})


class _MaskDecisions:
    """transformers' own choice to build no attention mask, taken in the warm-up and kept in the
    capture. Under stream capture transformers skips no mask (masking_utils: is_tracing() is true
    while a stream captures), since its checks (padding all ones, positions not packed) read the
    device; a forward of SHAPE_ONLY_INPUTS has neither, so the warm-up's answer holds for every
    replay. Without it a prefill captures a materialized [q, kv] mask, and SDPA with a mask and
    grouped KV heads takes repeated K/V copies and a masked kernel (over twice the time of the
    causal one on the H200, 2048 tokens). Wraps the mask builder `orig` (sdpa_mask) for one capture."""

    def __init__(self, orig):
        self.orig = orig
        self.skipped = []  # per mask built in the last warm-up forward: whether transformers built none
        self.replay = None  # the capture's position in that list

    def forward(self, capture: bool) -> None:
        if capture:
            self.replay = 0
        else:
            self.skipped = []

    def __call__(self, **kw):
        if self.replay is None:
            mask = self.orig(**kw)
            self.skipped.append(mask is None)
            return mask
        i, self.replay = self.replay, self.replay + 1
        if i < len(self.skipped) and self.skipped[i] and kw.get("attention_mask") is None:
            return None
        return self.orig(**kw)


@contextlib.contextmanager
def _masks_decided_in_warmup(model, inputs):
    """A context for warming up and capturing model(**inputs): yields a function fn -> fn' that
    tells the mask decisions which forward is the capture (the one after `warmup` others), or
    None when the inputs or the model's mask builder are not the plain case (_MaskDecisions)."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if not set(inputs) <= SHAPE_ONLY_INPUTS or impl is None:
        yield None
        return
    try:
        from transformers import masking_utils
    except ImportError:
        yield None
        return
    funcs = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS
    orig = funcs[impl] if impl in funcs else None
    if orig is not masking_utils.sdpa_mask:  # boolean masks with skips; eager's additive ones skip nothing
        yield None
        return
    had_local = impl in funcs._local_mapping
    dec = _MaskDecisions(orig)
    funcs[impl] = dec
    try:
        yield dec
    finally:
        if had_local:
            funcs[impl] = orig
        else:
            del funcs[impl]


class GraphedForward:
    """Repeated forwards of one model at fixed shapes: the first call of each input signature
    (shapes, dtypes, plain values) warms up and captures a graph; later calls copy the inputs into
    the captured ones and replay. Outputs are cloned (the graph's own are overwritten by the next
    replay). Without device graphs it calls the model eagerly (see `stats`). A forward of
    SHAPE_ONLY_INPUTS captures the attention masks transformers builds eagerly: none where the
    plain causal case needs none (_MaskDecisions).

        with GraphedForward(model) as fwd:
            for batch in loader:
                logits = fwd(pixel_values=batch).logits
    """

    def __init__(self, model, *, graphs="auto", warmup: int = WARMUP_RUNS):
        self.model = model
        self.device = _model_device(model)
        self._g, reason = _resolve_graphs(self.device, graphs)
        # Dynamic RoPE: tables up to its original length, where its frequencies hold; a forward
        # past it, or with positions of its own, runs eagerly. LongRoPE: no table, every forward
        # eagerly.
        self.rope: list = []
        self.rope_len = _dynamic_rope_len(model) if self._g is not None else None
        if self.rope_len:
            dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
            self.rope = _rope_tables(model, self.rope_len, dtype, self.device)
        blocker = _graph_blocker(model, self.rope_len or 0, self.rope) if self._g is not None else None
        if blocker is not None:
            if graphs is True:
                raise ValueError(f"GraphedForward: graphs=True: {blocker}; run with graphs='auto' or False")
            _warn_once(f"nograph:{blocker}", f"xpuinject GraphedForward: {blocker}; running eagerly")
            self._g, reason, self.rope = None, blocker, []
        self.warmup = warmup
        self._entries: Dict[tuple, tuple] = {}
        self.stats: Dict[str, Any] = {"device": str(self.device), "graphs": self._g is not None, "reason": reason,
                                      "captures": 0, "capture_s": 0.0, "replays": 0, "eager_calls": 0}

    @property
    def graphs(self) -> bool:
        return self._g is not None

    def __call__(self, **inputs):
        key = tuple(sorted((k, _signature(v)) for k, v in inputs.items()))
        with torch.no_grad():
            if self._g is None or (self.rope_len and not _within_tables(inputs, self.rope_len)):
                self.stats["eager_calls"] += 1
                return self.model(**inputs)
            entry = self._entries.get(key)
            if entry is None:
                t = time.perf_counter()
                static = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
                with _masks_decided_in_warmup(self.model, static) as masks:
                    calls = [0]

                    def fwd():
                        if masks is not None:
                            masks.forward(capture=calls[0] == self.warmup)
                        calls[0] += 1
                        with _rope_lookup(self):
                            return self.model(**static)

                    # each signature gets its own pool: a replay must not overwrite another's outputs
                    g, out = self._g.capture(fwd, self._g.pool(), self.warmup)
                self._g.synchronize()
                entry = self._entries[key] = (g, static, out)
                self.stats["captures"] += 1
                self.stats["capture_s"] += time.perf_counter() - t
            else:
                for k, v in inputs.items():
                    if isinstance(v, torch.Tensor):
                        entry[1][k].copy_(v)
            entry[0].replay()
            self.stats["replays"] += 1
            return _clone_out(entry[2])

    def release(self) -> None:
        self._entries.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


@contextlib.contextmanager
def graphed(model, **kw):
    """`with graphed(model) as fwd:` -- a GraphedForward released on exit."""
    g = GraphedForward(model, **kw)
    try:
        yield g
    finally:
        g.release()
