"""Where the eval's models live when they do not fit one device.

Two pieces, used by eval_driver.py:

- `LayeredOracle`: the fp32 model built on the meta device, each of its units (the embeddings,
  every decoder layer, the final norm, the head) loaded from the checkpoint on disk just before it
  runs and dropped after, unless a memory budget lets it stay. The forward is transformers' own
  (hooks only fill in and drop weights), and the weights are the checkpoint's cast to fp32 as
  `from_pretrained(dtype=float32)` casts them, so it computes what the whole fp32 model computes;
  memory is bounded by the embeddings, one unit and the activations.
- `Run`: the process layout. One process, or one process per device under torchrun
  (torch.distributed: NCCL on CUDA, XCCL on XPU, gloo on the CPU), each holding one pipeline stage
  of the bf16 models: transformers' own pipeline parallelism (`DistributedConfig(pp_size=N)`,
  transformers/distributed/pipeline_parallel.py) keeps a contiguous run of decoder layers per
  rank and sends the hidden states from stage to stage. Rank 0 also runs the oracle and writes
  the result; every rank takes part in each forward of the bf16 models.

Imported by eval_driver.py from the folder it is written to (the Go harness writes both).
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

# A collective waits this long for the slowest rank: the others wait while rank 0 runs the oracle,
# which streams every layer from disk once per pass (minutes to hours for the largest models).
COLLECTIVE_TIMEOUT = timedelta(hours=float(os.environ.get("XPUINJECT_COLLECTIVE_TIMEOUT_H", "12")))
IDENTITY = "PipelineIdentityLayer"  # what transformers puts where another stage's module was



def attn_kwargs(path) -> dict:
    """from_pretrained arguments for the attention a model must run: eager when its config asks
    for attention logit soft-capping (Gemma 2), which SDPA ignores (transformers 5.17
    integrations/sdpa_attention.py: softcap lands in its unused **kwargs); the default otherwise."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(path)
    return {"attn_implementation": "eager"} if getattr(cfg, "attn_logit_softcapping", None) else {}

def nbytes(tensors, meta=False) -> int:
    """Bytes of the distinct tensors; meta tensors (not loaded yet) count only with meta=True."""
    seen, total = set(), 0
    for t in tensors:
        if t is None or id(t) in seen or (t.device.type == "meta" and not meta):
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def _human(n: int) -> str:
    """Bytes as "1.9 MB", "21.2 GB" (decimal units, as the CLI prints sizes)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def model_bytes(model) -> int:
    return nbytes(list(model.parameters()) + list(model.buffers()))


# ---------------------------------------------------------------------------- process layout


class Run:
    """The ranks of this evaluation: one process (world 1), or a pipeline of `world` stages."""

    def __init__(self, world=1, rank=0, local_rank=0, device=None, backend=None):
        self.world, self.rank, self.local_rank = world, rank, local_rank
        self.device, self.backend = device, backend

    @property
    def pipeline(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, want: str, fail):
        """The layout torchrun set up (WORLD_SIZE, RANK, LOCAL_RANK), the process group started; a
        single process when WORLD_SIZE is unset or 1. `want` is --device."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        import torch
        import torch.distributed as dist

        rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
        cuda = torch.cuda.is_available()
        xpu = hasattr(torch, "xpu") and torch.xpu.is_available()
        if (want == "cuda" and not cuda) or (want == "xpu" and not xpu):
            fail(3, f"--device {want}: torch sees no {want.upper()} device on rank {rank}")
        if want == "cpu" and (cuda or xpu):
            # transformers puts pipeline stages on the accelerator it finds, whatever --device says
            fail(2, "--device cpu with several processes: this machine has a GPU, on which transformers would place the "
                    "pipeline stages; hide it (CUDA_VISIBLE_DEVICES=) or use --device cuda")
        if want in ("auto", "cuda") and cuda:
            device, backend = torch.device("cuda", local), "nccl"
            torch.cuda.set_device(device)
        elif want in ("auto", "xpu") and xpu:
            device, backend = torch.device("xpu", local), "xccl"
            torch.xpu.set_device(device)
        else:
            device, backend = torch.device("cpu"), "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT,
                                device_id=None if device.type == "cpu" else device)
        return cls(world, rank, local, device, backend)

    def close(self):
        if self.pipeline:
            import torch.distributed as dist

            # every rank done before any tears the group down: a rank still in a send when its
            # peer's connection closes aborts (gloo), failing the whole run after its result
            dist.barrier()
            dist.destroy_process_group()

    def load_kwargs(self) -> dict:
        """from_pretrained arguments that place a bf16 model: this rank's pipeline stage."""
        if not self.pipeline:
            return {}
        from transformers.distributed import DistributedConfig

        return {"distributed_config": DistributedConfig(pp_size=self.world)}

    def adopt(self, model):
        """A loaded bf16 model, ready for the eval. transformers' pipeline sends the last stage's
        logits to every rank cast to the model's dtype; the package's LMHead computes them in fp32,
        so they travel as fp32 (exact for bf16 logits too)."""
        stage = getattr(model, "_pp_stage", None)
        if stage is not None and not getattr(stage, "_xpuinject_fp32_logits", False):
            import torch

            orig = stage.broadcast_from_last

            @functools.wraps(orig)
            def broadcast_fp32(tensor, *, dtype, device):
                return orig(tensor, dtype=torch.float32, device=device)

            stage.broadcast_from_last = broadcast_fp32
            stage._xpuinject_fp32_logits = True
        return model

    # -------------------------------------------------------------- collectives

    def broadcast(self, obj):
        """Rank 0's obj on every rank."""
        if not self.pipeline:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj):
        """Every rank's obj, in rank order, on rank 0 (None elsewhere)."""
        if not self.pipeline:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world if self.main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def _comm_device(self):
        import torch

        return torch.device("cpu") if self.backend == "gloo" else self.device

    def to_main(self, tensor, owner: int, shape, dtype):
        """A tensor that rank `owner` holds, on rank 0's CPU (None on the other ranks)."""
        import torch
        import torch.distributed as dist

        if owner == 0:
            return tensor.detach().cpu() if self.main else None
        if self.rank == owner:
            dist.send(tensor.detach().to(self._comm_device(), dtype).contiguous(), dst=0)
            return None
        if self.main:
            buf = torch.empty(tuple(shape), dtype=dtype, device=self._comm_device())
            dist.recv(buf, src=owner)
            return buf.cpu()
        return None

    # -------------------------------------------------------------- forwards

    def forward_text(self, model, ids):
        """Teacher-forced forward: fp32 logits on every rank and, on rank 0, the hidden states
        transformers' `output_hidden_states` gives (the embeddings, each layer's output, the last
        one after the final norm), all on the CPU. A pipeline's stages each record theirs, which
        go to rank 0."""
        import torch

        if not self.pipeline:
            return forward_text(model, ids)
        base = getattr(model, model.base_model_prefix)
        layers = list(base.layers)
        n = len(layers)
        mine = {}
        hooks = []
        for i, layer in enumerate(layers):
            if type(layer).__name__ == IDENTITY:
                continue
            if i == 0:
                hooks.append(layer.register_forward_pre_hook(lambda m, a: mine.__setitem__(0, a[0])))
            if i < n - 1:
                hooks.append(layer.register_forward_hook(
                    lambda m, a, out, i=i: mine.__setitem__(i + 1, out[0] if isinstance(out, tuple) else out)))
        if type(base.norm).__name__ != IDENTITY:
            hooks.append(base.norm.register_forward_hook(lambda m, a, out: mine.__setitem__(n, out)))
        try:
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        owners = self.broadcast_owners(sorted(mine))
        dtype = next(model.parameters()).dtype
        shape = (*ids.shape, model.config.hidden_size)
        hidden = []
        for i in range(n + 1):
            t = self.to_main(mine.get(i), owners[i], shape, dtype)
            hidden.append(t.float() if t is not None else None)
        return out.logits.float().cpu(), (hidden if self.main else None)

    def broadcast_owners(self, indices):
        """Which rank holds each hidden-state index, known to every rank."""
        import torch.distributed as dist

        per_rank = [None] * self.world
        dist.all_gather_object(per_rank, indices)
        return {i: r for r, idx in enumerate(per_rank) for i in idx}

    def max_over_ranks(self, value):
        vals = self.gather(value)
        if not self.main:
            return None
        vals = [v for v in vals if v is not None]
        return max(vals) if vals else None

    # -------------------------------------------------------------- reporting

    def merge_injection(self, summary: dict) -> dict:
        """One summary of `inject` for the whole model: each stage bound its own modules."""
        every = self.gather(summary)
        if not self.main or not self.pipeline:
            return summary if self.main else None
        out = dict(every[0])
        replaced = {}
        for s in every:
            for k, v in s["replaced"].items():
                replaced[k] = replaced.get(k, 0) + v
        out["replaced"] = dict(sorted(replaced.items()))
        out["replaced_modules"] = sorted(m for s in every for m in s["replaced_modules"])
        out["packed_tensors"] = sum(s["packed_tensors"] for s in every)
        out["packed_bytes"] = sum(s["packed_bytes"] for s in every)
        out.pop("other_stages", None)
        return out

    def stage(self, model) -> dict:
        """This rank's part of a bf16 model: device, host, decoder layers [start, end), whether it
        holds the embeddings, final norm and head, and the bytes it holds."""
        base = getattr(model, model.base_model_prefix, None)
        layers = list(getattr(base, "layers", []) or [])
        own = [i for i, m in enumerate(layers) if type(m).__name__ != IDENTITY]
        held = lambda m: m is not None and type(m).__name__ != IDENTITY  # noqa: E731
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        dev = next(model.parameters()).device
        return {
            "rank": self.rank,
            "host": socket.gethostname(),
            "device": str(dev),
            "layers": [own[0], own[-1] + 1] if own else [],
            "embeddings": held(getattr(base, "embed_tokens", None)),
            "norm": held(getattr(base, "norm", None)),
            "head": held(head),
            "bytes": model_bytes(model),
        }

    def placement(self, model) -> dict:
        """How a bf16 model is placed: `single` (one device) or `pipeline`, with every stage."""
        stages = self.gather(self.stage(model))
        if not self.main:
            return None
        return {"mode": "pipeline" if self.pipeline else "single", "stages": stages}


def die_with_parent():
    """Under torchrun the launcher is this worker's parent and puts it in a session of its own;
    the harness kills the launcher with the CLI (kill -9 included), so the worker asks the kernel
    to kill it too (Linux, PR_SET_PDEATHSIG). Called first thing, before the slow imports."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before the call
        os._exit(1)


# ---------------------------------------------------------------------------- the oracle


def activation_bytes(cfg, tokens: int) -> int:
    """A bound on what one fp32 forward of `tokens` tokens keeps on the device: every layer's hidden
    state (output_hidden_states), two logits-sized buffers, the MLP's intermediates and one
    attention-score matrix (eager attention's; SDPA needs less)."""
    h = int(getattr(cfg, "hidden_size", 0) or 0)
    L = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    v = int(getattr(cfg, "vocab_size", 0) or 0)
    inter = int(getattr(cfg, "intermediate_size", 0) or 0)
    heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
    return 4 * tokens * ((L + 2) * h + 2 * v + 3 * inter + heads * tokens)


def free_memory(device) -> int:
    """Bytes free on the device (the CPU: available RAM)."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "xpu" and hasattr(torch.xpu, "mem_get_info"):
        return int(torch.xpu.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def moe_checkpoint_parts(index: dict, key: str):
    """The checkpoint tensors behind a mixture-of-experts parameter that transformers 5.17 builds
    at load (conversion_mapping.py), as ([[names of expert 0], ...], stacked) or None: experts'
    gate_up_proj [E, 2I, H] is each expert's gate then up weight concatenated, stacked; down_proj
    [E, H, I] the experts' down weights stacked; Mixtral's checkpoints name the block
    block_sparse_moe and the projections w1 (gate), w3 (up), w2 (down). GraniteMoE's store them
    stacked already, under other names (renamed at load; None where the checkpoint has them as
    the model names them)."""
    import re

    m = re.fullmatch(r"(.*\.block_sparse_moe)\.(experts\.gate_up_proj|experts\.down_proj|router\.weight)", key)
    if m is not None:
        name = m[1] + {"experts.gate_up_proj": ".input_linear.weight", "experts.down_proj": ".output_linear.weight",
                       "router.weight": ".router.layer.weight"}[m[2]]
        return ([[name]], False) if name in index else None
    m = re.fullmatch(r"(.*)\.mlp\.(experts\.gate_up_proj|experts\.down_proj|gate\.weight)", key)
    if m is None:
        return None
    base, what = m.groups()
    for block, (gate, up, down) in ((".mlp", ("gate_proj", "up_proj", "down_proj")), (".block_sparse_moe", ("w1", "w3", "w2"))):
        pre = base + block
        if what == "gate.weight":
            if pre + ".gate.weight" in index:
                return [[pre + ".gate.weight"]], False
            continue
        groups, e = [], 0
        while f"{pre}.experts.{e}.{down}.weight" in index:
            names = (gate, up) if what == "experts.gate_up_proj" else (down,)
            groups.append([f"{pre}.experts.{e}.{n}.weight" for n in names])
            e += 1
        if groups:
            return groups, True
    return None


def checkpoint_index(folder: Path) -> dict:
    """Tensor name -> safetensors file of a checkpoint (one file, or shards with their index)."""
    import json

    from safetensors import safe_open

    idx = folder / "model.safetensors.index.json"
    if idx.is_file():
        return {k: folder / v for k, v in json.loads(idx.read_text())["weight_map"].items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    with safe_open(str(single), framework="pt") as f:
        return {k: single for k in f.keys()}


def parameters_on_meta():
    """Every parameter registered inside lands on the meta device (no memory), buffers where they
    were made (the rotary frequencies, computed as from_pretrained computes them): accelerate's
    init_empty_weights(include_buffers=False)."""
    try:
        from accelerate import init_empty_weights
    except ImportError as e:
        raise ImportError("the layered fp32 oracle builds the model on the meta device with accelerate: "
                          "pip install accelerate (requirements.txt pins it)") from e
    return init_empty_weights(include_buffers=False)


class LayeredOracle:
    """The fp32 model, its weights read from the checkpoint unit by unit as the forward reaches them.

    Units, in the order a forward runs them: the embeddings (loaded at once and kept: the model's
    device is its first parameter's, which `generate` reads), each decoder layer, then the modules
    after them (final norm, head). A unit loaded while the kept units and it fit in `budget` bytes
    stays; later ones are dropped after their forward and read again on the next one. For a pass
    over the layers in order that keeps the most units possible: an LRU would drop each unit just
    before it is needed again.

    A dropped unit's tensors, as the checkpoint stores them, stay in host memory while they fit
    in `host_budget` bytes (pinned on a GPU; default: half the available RAM less 2 GiB off the
    CPU, none on it), so each later pass copies them rather than reading the checkpoint again.
    """

    def __init__(self, cls, path, device, budget=None, tokens=0, host_budget=None):
        import torch
        import transformers

        self.path, self.device = Path(path), device
        cfg = transformers.AutoConfig.from_pretrained(path)
        # parameters on the meta device; buffers (rotary frequencies) computed on the CPU as
        # from_pretrained computes them
        with parameters_on_meta():
            model = cls._from_config(cfg, dtype=torch.float32, **attn_kwargs(path))
        model.eval()
        try:
            model.generation_config = transformers.GenerationConfig.from_pretrained(path)
        except OSError:
            pass
        for mod in model.modules():
            for k, b in list(mod._buffers.items()):
                if b is not None:
                    mod._buffers[k] = b.to(device)
        self.model = model
        self.index = checkpoint_index(self.path)
        base = getattr(model, model.base_model_prefix)
        layer_ids = {id(m) for m in base.layers}
        units, taken = [], []
        for name, m in model.named_modules():
            if any(name.startswith(t + ".") for t in taken):
                continue
            if id(m) in layer_ids or (name and any(True for _ in m.parameters(recurse=False))):
                units.append((name, m))
                taken.append(name)
        self.units = units
        # a tied parameter (lm_head.weight is embed_tokens.weight) reads the tensor of its first
        # name in the checkpoint, as tying does
        names = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(name)
        self._key = {}
        for group in names.values():
            key = next((n for n in group if n in self.index), group[0])
            self._key.update({n: key for n in group})
        # from_pretrained ties after loading, so a tied target takes its source's tensor even
        # where the checkpoint also stores the target (transformers 5: all_tied_weights_keys)
        for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
            self._key[target] = self._key.get(source, source)
        self.budget = budget if budget is not None and budget >= 0 else self.auto_budget(cfg, tokens)
        # what the whole fp32 model's weights take (meta tensors know their sizes; tied once)
        self.model_bytes = nbytes(model.parameters(), meta=True)
        self.kept, self.kept_bytes, self.loads, self.streamed_loads = set(), 0, 0, 0
        if host_budget is None or host_budget < 0:
            host_budget = 0 if device.type == "cpu" else max(0, free_memory(torch.device("cpu")) // 2 - (2 << 30))
        self.host_budget, self.host, self.host_bytes, self.host_loads = host_budget, {}, 0, 0
        for name, m in units:
            m.register_forward_pre_hook(functools.partial(self._before, name))
            m.register_forward_hook(functools.partial(self._after, name))
        embed = units[0]
        self._load(*embed)
        self.kept.add(embed[0])
        self.kept_bytes += model_bytes(embed[1])

    def bytes_to_keep(self) -> int:
        """Device bytes the oracle has yet to load and keep (its budget, up to the whole model):
        memory a plan made after it was built must leave free, or the helpers it admits and its
        first forward both count on the same free bytes."""
        return max(0, min(self.budget, self.model_bytes) - self.kept_bytes)

    def budget_line(self) -> str:
        """How much of the model may stay on the device, sized to the model."""
        size = _human(self.model_bytes)
        if self.model_bytes <= self.budget:
            return f"all {size} of its weights fit the device budget and stay after their first load"
        line = f"up to {_human(self.budget)} of its {size} of weights stay on the device, the rest is read again each pass"
        if self.host_budget:
            line += f" (from host memory, up to {_human(self.host_budget)} of the checkpoint's tensors held there)"
        return line

    def auto_budget(self, cfg, tokens: int) -> int:
        """What may stay on the device: its free memory less a forward's activations and 1 GiB."""
        return max(0, free_memory(self.device) - 2 * activation_bytes(cfg, max(tokens, 1)) - (1 << 30))

    def _tensors(self, unit):
        """(owner module, attribute, is_parameter, full name) of each tensor a unit reads from disk."""
        out = []
        for sub_name, sub in unit[1].named_modules():
            prefix = ".".join(p for p in (unit[0], sub_name) if p)
            for k, p in sub._parameters.items():
                if p is not None:
                    out.append((sub, k, True, f"{prefix}.{k}", p))
            for k, b in sub._buffers.items():
                if b is not None and k not in sub._non_persistent_buffers_set:
                    out.append((sub, k, False, f"{prefix}.{k}", b))
        return out

    def _load(self, name, module, hold=False):
        """Load a unit's tensors onto the device; hold: keep what the checkpoint gave in host
        memory, as far as host_budget allows, for the next pass."""
        import torch
        from safetensors import safe_open

        handles = {}
        copied = from_disk = 0
        try:
            for sub, k, is_param, full, t in self._tensors((name, module)):
                if t.device.type != "meta":
                    continue
                key = self._key.get(full, full)
                v = self.host.get(key)
                if v is not None:
                    self._place(sub, k, is_param, v)
                    copied += 1
                    continue
                from_disk += 1

                def read(key):
                    f = self.index.get(key)
                    if f not in handles:
                        handles[f] = safe_open(str(f), framework="pt", device="cpu")
                    return handles[f].get_tensor(key)

                if key in self.index:
                    v = read(key)
                else:
                    parts = moe_checkpoint_parts(self.index, key)
                    if parts is None:
                        raise KeyError(f"{self.path}: the checkpoint has no tensor {key!r} (module {name!r} of the fp32 model)")
                    groups, stacked = parts
                    v = torch.stack([torch.cat([read(n) for n in g], 0) for g in groups]) if stacked else read(groups[0][0])
                if list(v.shape) != list(t.shape):
                    raise ValueError(f"{self.path}: tensor {key!r} has shape {list(v.shape)}, the model wants {list(t.shape)}")
                size = v.numel() * v.element_size()
                if hold and self.host_bytes + size <= self.host_budget:
                    try:
                        held = v.pin_memory() if self.device.type == "cuda" else v
                    except RuntimeError:  # no more page-locked memory: read the rest from the checkpoint
                        self.host_budget = self.host_bytes
                    else:
                        v = self.host[key] = held
                        self.host_bytes += size
                self._place(sub, k, is_param, v)
        finally:
            handles.clear()
        self.loads += 1
        self.host_loads += bool(copied and not from_disk)

    def _place(self, sub, k, is_param, v):
        import torch

        # cast on the device: half the bytes cross the bus, and the cast is exact either way
        v = v.to(self.device)
        v = v.to(torch.float32) if v.is_floating_point() else v
        if is_param:
            sub._parameters[k] = torch.nn.Parameter(v, requires_grad=False)
        else:
            sub._buffers[k] = v

    def _drop(self, name, module):
        import torch

        for sub, k, is_param, _, t in self._tensors((name, module)):
            empty = torch.empty(t.shape, dtype=t.dtype, device="meta")
            if is_param:
                sub._parameters[k] = torch.nn.Parameter(empty, requires_grad=False)
            else:
                sub._buffers[k] = empty

    def _before(self, name, module, args):
        if name in self.kept:
            return
        # the bytes it will hold once loaded: its meta tensors' sizes count too
        size = nbytes(list(module.parameters()) + list(module.buffers()), meta=True)
        keep = self.kept_bytes + size <= self.budget
        self._load(name, module, hold=not keep)
        if keep:
            self.kept.add(name)
            self.kept_bytes += size
        else:
            self.streamed_loads += 1

    def _after(self, name, module, args, output):
        if name not in self.kept:
            self._drop(name, module)

    def placement(self, rank=0) -> dict:
        return {
            "mode": "layered",
            "rank": rank,
            "host": socket.gethostname(),
            "device": str(self.device),
            "units": len(self.units),
            "kept_units": len(self.kept),
            "kept_bytes": self.kept_bytes,
            "budget_bytes": self.budget,
            "loads": self.loads,
            "streamed_loads": self.streamed_loads,
            "host_budget_bytes": self.host_budget,
            "host_bytes": self.host_bytes,
            "host_loads": self.host_loads,
        }


def forward_text(model, ids):
    """Teacher-forced forward of one process's model: fp32 logits and the hidden states, on the CPU."""
    import torch

    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    return out.logits.float().cpu(), [h.float().cpu() for h in out.hidden_states]


def greedy_batch(model, prompts, n):
    """Greedy tokens after each prompt, all prompts in one batch (they have one length: no padding),
    so an oracle that reads its layers from disk reads them once per token, not once per prompt."""
    import torch

    ids = torch.cat(prompts, 0)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return [row[ids.shape[1]:].tolist() for row in out]
