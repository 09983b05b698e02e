"""The graph runtime on the CPU, where it runs its steps eagerly: the same greedy tokens as
transformers' model.generate on the fixtures (stock and injected, batch 1 and a left-padded batch),
EOS and padding like generate, sampling that follows transformers' warpers, and clear refusals of
bad arguments. The captured path itself runs on a GPU (scripts/gpu_runtime_check.py).

model.generate's static cache holds prompt + max_new_tokens - 1 positions; passing the same
max_cache_len gives the runtime the same attention shapes, hence the same rounding. (With another
cache length bf16 attention may round differently and a near-tie may flip a greedy choice.)
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
import transformers

from xpuinject_kernels import _backend
from xpuinject_kernels import runtime as rt

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "testdata" / "fixtures"


def load(name, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=dtype).eval()


def prompts(L=10, pads=(0, 3, 6, 1), seed=0):
    """A batch of len(pads) prompts of L tokens, left-padded with token 0 (mask 0)."""
    ids = torch.randint(3, 500, (len(pads), L), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    for r, n in enumerate(pads):
        ids[r, :n] = 0
        mask[r, :n] = 0
    return ids, mask


def reference(model, ids, mask, n, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                              cache_implementation="static", **kw)


@pytest.mark.parametrize("name, dtype", [
    ("llama-tiny", torch.float32),
    ("qwen3-tiny", torch.float32),   # per-head q/k norms, GQA
    ("qwen2-tiny", torch.bfloat16),  # qkv bias, bf16 checkpoint
    ("llama-odd", torch.bfloat16),   # hidden 160, 5 heads
])
def test_greedy_equals_generate(name, dtype):
    model = load(name, dtype)
    ids, mask = prompts()
    n = 32
    for x, m in ((ids[:1], None), (ids, mask)):
        ref = reference(model, x, m, n)
        out = rt.generate(model, x, m, max_new_tokens=n, max_cache_len=x.shape[1] + n - 1)
        assert out.shape == ref.shape and torch.equal(out, ref), f"{name} batch {x.shape[0]}"
    stats = rt.runtime_for(model).stats
    assert stats["graphs"] is False and stats["eager_steps"] > 0 and stats["replays"] == 0


def test_eager_attention_takes_an_additive_mask():
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "llama-tiny", attn_implementation="eager").eval()
    ids, mask = prompts()
    out = rt.generate(model, ids, mask, max_new_tokens=16, max_cache_len=10 + 16 - 1)
    assert torch.equal(out, reference(model, ids, mask, 16))
    assert rt.runtime_for(model)._mask_min.item() == torch.finfo(torch.float32).min


def test_fp32_equals_default_generate_with_bucketed_cache():
    """In fp32 the cache length does not move a greedy choice here: the default (bucketed) cache
    against generate's default dynamic cache."""
    model = load("llama-tiny")
    ids, mask = prompts(pads=(0, 4))
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=30, do_sample=False)
    out = rt.generate(model, ids, mask, max_new_tokens=30)
    assert torch.equal(out, ref)
    assert rt.runtime_for(model).stats["last"]["cache_len"] == rt.cache_bucket(10 + 30 - 1) == 64


def test_sliding_window_past_the_window():
    """mistral-tiny attends over a 32-token window; 10 + 40 tokens go past it. The runtime keeps a
    full-length cache and applies the window in its mask."""
    model = load("mistral-tiny")
    ids, mask = prompts()
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=40, do_sample=False)
    out = rt.generate(model, ids, mask, max_new_tokens=40)
    assert torch.equal(out, ref)
    assert rt.runtime_for(model)._window == 32


def test_static_cache_compiles_one_decode_step_past_the_window():
    """rt.static_cache gives a sliding-window model full-length layers: a static-shape compiled
    decode step compiles once and, past the 32-token window, gives the logits of eager steps on
    the model's own (windowed) cache. transformers' StaticCache compiles anew at every token: its
    sliding layers keep a host-side counter the compiled step guards on."""
    from transformers import StaticCache

    model = load("mistral-tiny")
    ids = prompts(L=30)[0][:1]
    steps = 8  # 30 + 8 tokens: past the window

    def compiled_steps(cache):
        graphs = []

        def count(gm, _inputs):
            graphs.append(gm)
            return gm.forward

        torch._dynamo.reset()
        fn = torch.compile(lambda tok, pos, c: model(input_ids=tok, position_ids=pos, past_key_values=c,
                                                     use_cache=True).logits[:, -1],
                           backend=count, fullgraph=True, dynamic=False)
        with torch.no_grad():
            tok = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
            out = []
            for i in range(steps):
                logits = fn(tok, torch.full((1, 1), ids.shape[1] + i), cache)
                out.append(logits)
                tok = logits.argmax(-1, keepdim=True)
        return torch.cat(out), len(graphs)

    ours, compiles = compiled_steps(rt.static_cache(model.config, 64))
    assert compiles == 1
    assert not any(getattr(layer, "is_sliding", False) for layer in rt.static_cache(model.config, 64).layers)
    stock, stock_compiles = compiled_steps(StaticCache(config=model.config, max_cache_len=64))
    assert stock_compiles == steps  # the guard on the host counter fails at every token
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, want = out.past_key_values, []
        tok = out.logits[:, -1:].argmax(-1)
        for i in range(steps):
            logits = model(input_ids=tok, past_key_values=past, use_cache=True).logits[:, -1]
            want.append(logits)
            tok = logits.argmax(-1, keepdim=True)
    torch.testing.assert_close(ours, torch.cat(want), atol=1e-4, rtol=1e-4)


def test_eos_pads_and_stops_like_generate():
    model = load("llama-tiny")
    ids, mask = prompts()
    free = rt.generate(model, ids, mask, max_new_tokens=12, eos_token_id=[])[:, 10:]
    # without EOS the rows run to 12 tokens; these ids end rows 1, 2, 3 at new tokens 2, 1, 1
    assert free[1, 2] == 57 and free[2, 1] == 365 and free[3, 1] == 245 and 46 == free[0, 1]
    for eos, length in (([57, 365, 245], 22), ([57, 365, 245, 46], 13)):
        ref = reference(model, ids, mask, 12, eos_token_id=eos, pad_token_id=2)
        out = rt.generate(model, ids, mask, max_new_tokens=12, eos_token_id=eos, pad_token_id=2,
                          max_cache_len=10 + 12 - 1)
        assert out.shape == (4, length) and torch.equal(out, ref), eos
        assert (out[1, 13:] == 2).all() and (out[2, 12:] == 2).all() and (out[3, 12:] == 2).all()
    # the row that never finishes keeps its tokens; the result stops when the last row finished
    assert torch.equal(out[:, 10:12], free[:, :2]) and out[1, 12] == 57


def test_runtime_is_reused_across_prompts_and_batches():
    model = load("llama-tiny")
    r = rt.Runtime(model)
    ids, mask = prompts()
    for x, m in ((ids, mask), (ids[2:], mask[2:]), (prompts(seed=5)[0], None), (ids, mask)):
        n = 16
        out = r.generate(x, m, max_new_tokens=n, max_cache_len=x.shape[1] + n - 1)
        assert torch.equal(out, reference(model, x, m, n))
    assert sorted((b["batch"], b["cache_len"]) for b in r.stats["buckets"]) == [(2, 25), (4, 25)]


def test_injected_greedy_equals_generate(llama_odd_run, device):
    """llama-odd with every layer on our kernels (the interpreter, or the GPU: eager steps there,
    so every forward's launches are counted)."""
    from xpuinject_kernels import inject

    model = load("llama-odd", torch.bfloat16).to(device)
    summary = inject(model, packed=llama_odd_run / "packed", plan=llama_odd_run / "package" / "plan.yaml")
    assert summary["replaced"]["Attention"] == 1
    ids, mask = (t.to(device) for t in prompts(L=8, pads=(0, 2, 5, 1)))
    counts = _backend.launch_counts
    runtime = rt.Runtime(model, graphs=False)
    for x, m, n in ((ids[:1], None, 6), (ids, mask, 4)):
        ref = reference(model, x, m, n)
        rope = ("apply_rope", "apply_rope.inplace", "apply_rope.norm")  # .norm: with qwen3's q/k norms in it
        before = (counts["rope_cache_write"], sum(counts[k] for k in rope), counts["qkv_rope_cache_write"])
        out = runtime.generate(x, m, max_new_tokens=n, max_cache_len=x.shape[1] + n - 1)
        assert torch.equal(out, ref), f"batch {x.shape[0]}"
        # the static cache takes the fused RoPE + cache write on every forward, the rope kernel none:
        # the prefill's in a launch of its own, each decode step's in the QKV GEMV
        assert counts["rope_cache_write"] - before[0] == 1
        assert counts["qkv_rope_cache_write"] - before[2] == n - 1
        assert sum(counts[k] for k in rope) == before[1]


def test_sampling_top_k_1_is_greedy_and_seeds_repeat():
    model = load("llama-tiny")  # fp32: no exact ties between the two best scores here
    ids, mask = prompts()
    greedy = rt.generate(model, ids, mask, max_new_tokens=16)
    top1 = rt.generate(model, ids, mask, max_new_tokens=16, do_sample=True, top_k=1)
    assert torch.equal(greedy, top1)
    torch.manual_seed(11)
    a = rt.generate(model, ids, mask, max_new_tokens=16, do_sample=True, temperature=1.5, top_k=0, top_p=1.0)
    torch.manual_seed(11)
    b = rt.generate(model, ids, mask, max_new_tokens=16, do_sample=True, temperature=1.5, top_k=0, top_p=1.0)
    c = rt.generate(model, ids, mask, max_new_tokens=16, do_sample=True, temperature=1.5, top_k=0, top_p=1.0)
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert not torch.equal(a, greedy)


def warped_support(scores, temperature, top_k, top_p):
    """The tokens transformers' warpers leave finite (generation/logits_process.py)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    s = TemperatureLogitsWarper(temperature)(None, scores.clone())
    if top_k:
        s = TopKLogitsWarper(top_k)(None, s)
    if top_p < 1:
        s = TopPLogitsWarper(top_p)(None, s)
    return torch.isfinite(s)


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 3, 1.0), (0.7, 0, 0.6), (2.0, 5, 0.9), (1.0, 0, 1.0)])
def test_sample_follows_transformers_warpers(temperature, top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(1, 12) * 2
    draws = 20000
    scores = logits.expand(draws, 12).contiguous()
    t = lambda v, dt: torch.tensor(v, dtype=dt)  # noqa: E731
    got = rt._sample(scores, t(temperature, torch.float32), t(top_k, torch.long), t(top_p, torch.float32))
    support = warped_support(logits, temperature, top_k, top_p)[0]
    freq = torch.bincount(got, minlength=12).float() / draws
    assert (freq[~support] == 0).all(), (freq, support)
    # the draw follows softmax over the kept tokens
    want = torch.softmax(torch.where(support, logits[0] / temperature, float("-inf")), -1)
    assert (freq - want).abs().max() < 0.02, (freq, want)


def test_bad_arguments_are_refused_clearly():
    model = load("llama-tiny")
    ids, mask = prompts()
    r = rt.Runtime(model, max_batch=2)
    cases = [
        (dict(input_ids=ids[:1], max_new_tokens=-3), "max_new_tokens must be a positive integer, got -3"),
        (dict(input_ids=ids[:1], max_new_tokens=0), "max_new_tokens must be a positive integer, got 0"),
        (dict(input_ids=ids[:1, :0], max_new_tokens=4), "is empty: the prompt needs at least one token"),
        (dict(input_ids=ids[:3], max_new_tokens=4), "batch 3 is larger than the largest batch bucket 2"),
        (dict(input_ids=ids[:2], attention_mask=mask[:2, :5], max_new_tokens=4), "does not match input_ids"),
        (dict(input_ids=ids[:2], attention_mask=torch.zeros_like(ids[:2]), max_new_tokens=4), "row 0 masks every token"),
        (dict(input_ids=ids[:1], max_new_tokens=4, do_sample=True, top_p=1.5), "top_p must be in (0, 1]"),
        (dict(input_ids=ids[:1], max_new_tokens=4, do_sample=True, temperature=0.0), "temperature must be a positive number"),
        (dict(input_ids=ids[:1], max_new_tokens=4, do_sample=True, top_k=-2), "top_k must be a non-negative integer"),
        (dict(input_ids=ids[:2], max_new_tokens=4, streamer=object()), "a streamer takes batch 1"),
        (dict(input_ids=ids[:1], max_new_tokens=8, max_cache_len=12), "max_cache_len 12 < prompt 10 + max_new_tokens 8 - 1"),
        (dict(input_ids=ids[0], max_new_tokens=4), "must be a [batch, tokens] tensor"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError) as e:
            r.generate(**kw)
        assert msg in str(e.value), (kw, str(e.value))
    with pytest.raises(ValueError, match="graphs=True on cpu: cpu has no device graphs"):
        rt.Runtime(model, graphs=True)


def test_cpu_runs_eagerly_and_says_so():
    model = load("llama-tiny")
    rt._warned.clear()
    with pytest.warns(RuntimeWarning, match="cpu has no device graphs; running eagerly"):
        r = rt.Runtime(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        rt.Runtime(model)
    assert r.graphs is False and r.stats["reason"] == "cpu has no device graphs"
    assert rt.Runtime(model, graphs=False).stats["reason"] == "disabled (graphs=False)"


def test_interpreter_on_a_gpu_device_is_not_captured(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    g, why = rt.graph_support("cuda")
    assert g is None and "TRITON_INTERPRET=1" in why
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert rt.graph_support("cpu")[0] is None


def test_streamer_gets_prompt_then_each_token():
    model = load("llama-tiny")
    ids, _ = prompts()

    class Rec:
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, v):
            self.puts.append(v.tolist())

        def end(self):
            self.ended = True

    s = Rec()
    out = rt.generate(model, ids[:1], max_new_tokens=9, streamer=s, eos_token_id=[])
    assert s.ended and s.puts[0] == ids[:1].tolist()
    assert [p[0] for p in s.puts[1:]] == out[0, 10:].tolist()


def test_graphed_forward_eager_fallback():
    model = load("llama-tiny")
    ids, _ = prompts()
    with rt.GraphedForward(model) as fwd:
        a = fwd(input_ids=ids, use_cache=False).logits
        assert fwd.stats["eager_calls"] == 1 and not fwd.graphs
    with torch.no_grad():
        b = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(a, b)
    with pytest.raises(TypeError, match="generation with a KV cache: use generate"):
        rt.GraphedForward(model)(input_ids=ids, past_key_values=transformers.DynamicCache())


def test_buckets():
    assert [rt.batch_bucket(b) for b in (1, 2, 3, 5, 8, 9, 64)] == [1, 2, 4, 8, 8, 16, 64]
    assert [rt.cache_bucket(n) for n in (1, 64, 65, 767, 1024, 1025)] == [64, 64, 128, 1024, 1024, 2048]
    with pytest.raises(ValueError, match="batch 65 is larger than the largest batch bucket 64"):
        rt.batch_bucket(65)


@pytest.mark.slow
def test_injected_gemma2_greedy_equals_generate(device):
    """gemma2-tiny (soft-capped attention, loaded eager) with every layer on our kernels runs the
    package's attention implementation, so the runtime's decode masks are bool; 14 + 8 tokens go
    past layer 0's 16-token window. Sharpened attention and post-block norms scaled up make the
    blocks, not the tied embedding of the last token, decide the next one (the fixture's greedy
    repeats it)."""
    from xpuinject_kernels import kernelize
    from xpuinject_kernels.injection import ATTN_IMPLEMENTATION

    model = transformers.AutoModelForCausalLM.from_pretrained(
        FIXTURES / "gemma2-tiny", dtype=torch.bfloat16, attn_implementation="eager").eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(4.0)
            layer.self_attn.k_proj.weight.mul_(4.0)
            for norm in (layer.post_attention_layernorm, layer.post_feedforward_layernorm):
                norm.weight.copy_(6 * (1 + norm.weight) - 1)  # Gemma norms scale by 1 + weight
    model = model.to(device)
    assert kernelize(model)["attn_implementation"] == ATTN_IMPLEMENTATION
    ids, mask = (t.to(device) for t in prompts(L=14, pads=(0, 2, 5)))
    n = 8
    for x, m in ((ids[:1], None), (ids, mask)):
        ref = reference(model, x, m, n)
        assert len(set(ref[0, 14:].tolist())) > n // 2  # not one token repeated
        out = rt.generate(model, x, m, max_new_tokens=n, max_cache_len=x.shape[1] + n - 1)
        assert torch.equal(out, ref), f"batch {x.shape[0]}"
    r = rt.runtime_for(model)
    assert r._mask_kind() == "bool" and r._window == 16


def test_package_carries_the_runtime(llama_odd_run):
    variant = llama_odd_run / "package" / "build" / "torch-cuda"
    assert (variant / "runtime.py").read_bytes() == (Path(rt.__file__)).read_bytes()
    assert os.path.exists(llama_odd_run / "package" / "build" / "torch-xpu" / "runtime.py")


@pytest.mark.slow
def test_fused_static_cache_path_equals_the_unfused_dynamic_one(device):
    """The static-cache path (RoPE + cache write in one kernel at the layer's counter, decode
    attention reading only the filled slots) decodes the same greedy tokens as the unfused path
    of model.generate's default dynamic cache (the rope kernel, cache.update, attention over the
    cached keys), on qwen3-tiny (GQA 2, per-head q/k norms) in bf16 with every layer on our
    kernels; batch 1 and a left-padded batch. Both read the same keys; only the decode kernel's
    split of them differs (by the cache bucket against the filled length)."""
    from xpuinject_kernels import kernelize

    model = load("qwen3-tiny", torch.bfloat16).to(device)
    summary = kernelize(model, use_kernels=False)
    assert summary["replaced"]["Attention"] == 2
    counts = _backend.launch_counts
    for x, m in ((prompts()[0][:1], None), prompts(pads=(0, 4))):
        x, m = x.to(device), None if m is None else m.to(device)
        rope = ("apply_rope", "apply_rope.inplace", "apply_rope.norm")  # .norm: with qwen3's q/k norms in it
        before = counts["rope_cache_write"], sum(counts[k] for k in rope)
        with torch.no_grad():
            dyn = model.generate(x, attention_mask=m, max_new_tokens=12, do_sample=False)
        assert counts["rope_cache_write"] == before[0]  # the dynamic cache never takes the fused write
        assert sum(counts[k] for k in rope) > before[1]
        fused = rt.Runtime(model, graphs=False).generate(x, m, max_new_tokens=12)
        assert counts["rope_cache_write"] > before[0]
        assert torch.equal(fused, dyn), f"batch {x.shape[0]}"


@pytest.mark.parametrize("name, dtype", [("llama-odd", torch.bfloat16), ("qwen3-moe-tiny", torch.float32),
                                         ("gemma2-tiny", torch.bfloat16)])
def test_rope_tables_equal_the_rotary_module(name, dtype):
    """The runtime's cos/sin tables answer every position of the slot bit for bit as the model's
    rotary module computes it, and the module is itself again outside the runtime's forwards."""
    model = load(name, dtype)
    ids, _ = prompts(L=6, pads=(0,))
    rt.generate(model, ids, max_new_tokens=4, max_cache_len=64)
    slot = next(iter(rt.runtime_for(model)._slots.values()))
    (m, cos_t, sin_t), = slot.rope
    assert m is model.model.rotary_emb and "forward" not in m.__dict__
    assert cos_t.shape[0] == 64 and cos_t.dtype == dtype
    pos = torch.tensor([[0, 1, 5, 17, 63], [63, 40, 2, 9, 33]])
    x = torch.empty(1, dtype=dtype)
    with torch.no_grad():
        cos, sin = m(x, pos)
    with rt._rope_lookup(slot):
        cos2, sin2 = m(x, pos)
        assert "forward" in m.__dict__
    assert "forward" not in m.__dict__
    assert torch.equal(cos, cos2) and torch.equal(sin, sin2) and not torch.equal(cos[0, 0], cos[0, 1])
    with torch.no_grad():  # a dtype the tables were not made for: the module's own computation
        cos32, _ = m(torch.empty(1), pos)
    with rt._rope_lookup(slot):
        assert torch.equal(m(torch.empty(1), pos)[0], cos32)
    # another batch bucket of the same cache length reads the same tables
    rt.generate(model, ids.expand(2, -1), max_new_tokens=4, max_cache_len=64)
    first, second = rt.runtime_for(model)._slots.values()
    assert second.batch != first.batch and second.rope is first.rope


def test_length_dependent_rope_keeps_its_own_module():
    """LongRoPE picks its frequencies by the sequence length: no table. Dynamic RoPE keeps its
    original ones up to its original length: a table there, equal to the module's own cos/sin
    (HunYuan's alpha-scaled base included), and none past it."""
    cfg = transformers.AutoConfig.from_pretrained(FIXTURES / "phi3-tiny")
    cfg.rope_parameters = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
                           "short_factor": [1.0] * 40, "long_factor": [2.0] * 40,
                           "original_max_position_embeddings": 256}
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    assert rt._table_rotaries(model, 64) == []
    assert [type(m).__name__ for m in rt._table_rotaries(load("phi3-tiny"), 64)] == ["Phi3RotaryEmbedding"]
    hy = load("hunyuan-tiny")
    m = hy.model.rotary_emb
    assert m.rope_type == "dynamic" and m.original_max_seq_len == 512
    assert rt._table_rotaries(hy, 512) == [m] and rt._table_rotaries(hy, 513) == []
    (_, cos_t, sin_t), = rt._rope_tables(hy, 64, torch.float32, torch.device("cpu"))
    pos = torch.tensor([[0, 9, 63]])
    with torch.no_grad():
        cos, sin = m(torch.empty(1), pos)
    assert torch.equal(cos_t[pos], cos) and torch.equal(sin_t[pos], sin)
    base = 10000.0 * 1000.0 ** (32 / 30)  # rope_theta * alpha^(d / (d - 2)), head_dim 32
    assert torch.allclose(m.inv_freq, 1.0 / base ** (torch.arange(0, 32, 2).float() / 32))


class _NoCapture:
    """Stands in for a device's graph API where none exists (the CPU): any capture fails the test."""

    def pool(self):
        return None

    def capture(self, *a, **k):
        raise AssertionError("a step was captured")

    def synchronize(self):
        pass


def test_length_dependent_rope_steps_run_eagerly(monkeypatch):
    """A rotary module that picks its frequencies by the sequence length with no table (LongRoPE;
    dynamic RoPE past its original length) is never captured: with graphs='auto' the runtime's
    steps and GraphedForward run eagerly, saying why; with graphs=True each refuses, naming the
    module. Within its original length HunYuan's dynamic RoPE has its table and nothing blocks."""
    monkeypatch.setattr(rt, "graph_support", lambda device: (_NoCapture(), None))
    cfg = transformers.AutoConfig.from_pretrained(FIXTURES / "phi3-tiny")
    cfg.rope_parameters = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
                           "short_factor": [1.0] * 40, "long_factor": [2.0] * 40,
                           "original_max_position_embeddings": 256}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ids = torch.randint(3, 500, (1, 6), generator=torch.Generator().manual_seed(1))
    with pytest.warns(RuntimeWarning, match="model.rotary_emb is longrope RoPE"):
        r = rt.Runtime(model)
        out = r.generate(ids, max_new_tokens=4, eos_token_id=[], pad_token_id=0)
    assert r.stats["captures"] == 0 and r.stats["eager_steps"] == 3 and "longrope" in r.stats["eager_reason"]
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="runtime: graphs=True: model.rotary_emb is longrope RoPE"):
        rt.Runtime(model, graphs=True).generate(ids, max_new_tokens=4, eos_token_id=[], pad_token_id=0)
    with pytest.raises(ValueError, match="GraphedForward: graphs=True: model.rotary_emb is longrope RoPE"):
        rt.GraphedForward(model, graphs=True)
    with pytest.warns(RuntimeWarning, match="GraphedForward: model.rotary_emb is longrope"):
        fwd = rt.GraphedForward(model)
    assert not fwd.graphs and "longrope" in fwd.stats["reason"]
    hy = load("hunyuan-tiny")
    tables = rt._rope_tables(hy, 512, torch.float32, torch.device("cpu"))
    assert rt._graph_blocker(hy, 512, tables) is None
    assert "dynamic RoPE" in rt._graph_blocker(hy, 1024, rt._rope_tables(hy, 1024, torch.float32, torch.device("cpu")))


class _RunGraphs(_NoCapture):
    """A graph API whose capture runs the function once more and whose replay runs it again: what
    a captured forward computes, on the CPU, with the module's forward as bound at capture."""

    def capture(self, fn, pool, warmup=0):
        for _ in range(warmup):
            fn()

        class Graph:
            def replay(self_):
                self.replays += 1

        self.replays = 0
        return Graph(), fn()


def test_graphed_forward_reads_dynamic_rope_from_tables(monkeypatch):
    """GraphedForward on HunYuan's dynamic RoPE: captured with cos/sin from tables of the rotary
    module's original length (its frequencies hold there), so capture never runs the module's
    host-side length test; the logits are the model's own; a forward past that length runs
    eagerly."""
    g = _RunGraphs()
    monkeypatch.setattr(rt, "graph_support", lambda device: (g, None))
    hy = load("hunyuan-tiny")
    m = hy.model.rotary_emb
    calls = []
    orig = type(m).forward
    monkeypatch.setattr(type(m), "forward", lambda self, x, position_ids: calls.append(1) or orig(self, x, position_ids))
    fwd = rt.GraphedForward(hy, warmup=1)
    assert fwd.graphs and fwd.rope_len == 512 and [t[0] for t in fwd.rope] == [m]
    ids = torch.randint(3, 500, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = hy(input_ids=ids).logits
    calls.clear()
    got = fwd(input_ids=ids).logits
    assert calls == [] and fwd.stats["captures"] == 1 and torch.equal(got, want)
    long_ids = torch.randint(3, 500, (1, 513), generator=torch.Generator().manual_seed(3))
    fwd(input_ids=long_ids)
    assert fwd.stats["eager_calls"] == 1 and calls
    # positions of its own past the table (only the device knows their values): eagerly, and the
    # module's own frequencies for them
    far = torch.arange(600, 609)[None].expand(2, -1)
    calls.clear()
    got_far = fwd(input_ids=ids, position_ids=far).logits
    with torch.no_grad():
        want_far = hy(input_ids=ids, position_ids=far).logits
    assert fwd.stats["eager_calls"] == 2 and fwd.stats["captures"] == 1 and calls
    assert torch.equal(got_far, want_far) and not torch.equal(got_far, got)
