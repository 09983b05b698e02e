"""The fused MoE kernel (xpuinject_kernels/moe.py) against an fp64 reference: both paths (decode,
prefill), every routing rule, bf16 and fp16, and the routing cases that break grouped kernels:
every expert hit, experts never hit, an expert only one token picks, tied router scores."""

from __future__ import annotations

import pytest
import torch

from xpuinject_kernels import moe as M

E, H, I = 6, 64, 24  # the fixtures' shape: 6 experts, an expert width that is not a power of two


def weights(dtype, seed=0, e=E, h=H, i=I):
    g = torch.Generator().manual_seed(seed)
    router = (torch.randn(h, e, generator=g) * 0.3).to(dtype)
    gate_up = (torch.randn(e, h, 2 * i, generator=g) / h**0.5).to(dtype)
    down = (torch.randn(e, i, h, generator=g) / i**0.5).to(dtype)
    return router, gate_up, down


def check(x, router, gate_up, down, top_k, rule, device):
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    out = M.moe(*xs, top_k, rule)
    ids, _ = M.route(*[xs[0], xs[1]], top_k, rule)
    ref = M.moe_ref(x, router, gate_up, down, top_k, rule, ids=ids.cpu())
    assert out.dtype == x.dtype and out.shape == x.shape
    err = (out.cpu().double() - ref).abs().max().item()
    # One rounding of the output plus the SwiGLU product's rounding to the activation dtype.
    tol = (2**-7 if x.dtype == torch.bfloat16 else 2**-10) * 4 * ref.abs().max().item() + 1e-3
    assert err <= tol, f"max error {err:.3g} > {tol:.3g}"
    return ids.cpu()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 3, 8, 9, 40])  # decode path up to 8, prefill above
@pytest.mark.parametrize("rule,top_k", [("softmax-topk-norm", 2), ("softmax-topk", 2), ("softmax-topk-norm-fp32", 3)])
def test_matches_fp64(device, dtype, tokens, rule, top_k):
    router, gate_up, down = weights(dtype, seed=tokens)
    x = torch.randn(tokens, H, generator=torch.Generator().manual_seed(7)).to(dtype)
    ids = check(x, router, gate_up, down, top_k, rule, device)
    # Distinct experts per token; the fp64 router agrees wherever the scores are not near-tied.
    assert (ids.sort(-1).values.diff(dim=-1) > 0).all()


def test_every_expert_hit_and_batched_shape(device):
    router, gate_up, down = weights(torch.bfloat16, seed=3)
    x = torch.randn(2, 32, H, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    ids = check(x, router, gate_up, down, 2, "softmax-topk-norm", device)
    assert set(ids.flatten().tolist()) == set(range(E))


@pytest.mark.parametrize("tokens", [4, 33])
def test_experts_never_hit_and_one_token_expert(device, tokens):
    """A router that sends every token to experts 1 and 4, except token 0, which also picks 2:
    experts 0, 3 and 5 are never hit (the prefill blocks past them must not run or write), and
    expert 2 has exactly one row."""
    dtype = torch.bfloat16
    _, gate_up, down = weights(dtype, seed=5)
    router = torch.zeros(H, E)
    router[0, 1], router[0, 4] = 4.0, 3.0
    router[1, 2] = 8.0
    x = torch.zeros(tokens, H)
    x[:, 0] = 1.0
    x[:, 2:] = torch.randn(tokens, H - 2, generator=torch.Generator().manual_seed(2)) * 0.01
    x[0, 1] = 1.0  # token 0: expert 2 scores 8, above 1's 4
    ids = check(x.to(dtype), router.to(dtype), gate_up, down, 2, "softmax-topk-norm", device)
    assert ids[0].tolist() == [2, 1]
    assert (ids[1:] == torch.tensor([1, 4])).all()


@pytest.mark.parametrize("tokens", [2, 12])
def test_tied_scores_resolve_as_torch_topk(device, tokens):
    """Router columns 0, 2, 3 and 5 equal: their scores tie exactly, and the experts picked
    among them are the ones torch.topk picks from the same probabilities on this device. Their
    order is not compared: CUDA's torch.topk orders equal values as its unstable sort leaves
    them, and equal weights summed in another order differ only in the last fp32 bit."""
    dtype = torch.bfloat16
    _, gate_up, down = weights(dtype, seed=9)
    col = torch.randn(H, generator=torch.Generator().manual_seed(4)) * 0.2
    router = torch.zeros(H, E)
    for e in (0, 2, 3, 5):
        router[:, e] = col
    router[:, 1], router[:, 4] = col - 1.0, col - 2.0  # below the tie
    router = router.to(dtype)
    x = torch.randn(tokens, H, generator=torch.Generator().manual_seed(8)).abs().to(dtype)
    ids = check(x, router, gate_up, down, 3, "softmax-topk-norm", device)
    logits = (x.to(device).float() @ router.to(device).float()).to(dtype).float()  # rounded, as stock's
    probs = torch.softmax(logits, dim=-1)
    want = torch.topk(probs, 3, dim=-1).indices.cpu()
    assert torch.equal(ids.sort(-1).values, want.sort(-1).values.to(ids.dtype))
    assert set(ids.flatten().tolist()) <= {0, 2, 3, 5}


def test_route_weights(device):
    router, _, _ = weights(torch.bfloat16, seed=11)
    x = torch.randn(5, H, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    for rule in M.ROUTERS:
        ids, w = M.route(x.to(device), router.to(device), 2, rule)
        rids, rw = M.route_ref(x, router, 2, rule)
        assert torch.equal(ids.cpu(), rids)
        assert w.dtype == torch.float32
        if rule == "softmax-topk-norm-fp32":  # kept fp32: sums to 1 within fp32
            torch.testing.assert_close(w.cpu().double().sum(-1), torch.ones(5, dtype=torch.float64))
            torch.testing.assert_close(w.cpu().double(), rw, rtol=1e-6, atol=1e-6)
        else:  # rounded to bf16, as the stock Qwen3 router rounds them
            assert torch.equal(w.cpu(), w.cpu().to(torch.bfloat16).float())
            torch.testing.assert_close(w.cpu().double(), rw, rtol=2**-8, atol=0)


def test_bad_arguments(device):
    router, gate_up, down = weights(torch.bfloat16)
    x = torch.randn(2, H).to(torch.bfloat16)
    with pytest.raises(ValueError, match="router 'topk-first'"):
        M.moe(x, router, gate_up, down, 2, "topk-first")
    with pytest.raises(ValueError, match="top_k 7: want 1 to 6"):
        M.moe(x, router, gate_up, down, 7, "softmax-topk")
    with pytest.raises(ValueError, match=r"down weight \(6, 64, 24\)"):
        M.moe(x, router, gate_up, down.transpose(1, 2).contiguous(), 2, "softmax-topk")
    strided = torch.empty(E, H, 4 * I, dtype=gate_up.dtype)[:, :, ::2]  # no unit stride anywhere
    with pytest.raises(ValueError, match=r"gate_up weight strides \(\d+, \d+, 2\): want each expert K-major"):
        M.moe(x, router, strided, down, 2, "softmax-topk")


def nmajor(w):
    """The [E, K, N] view of w's values stored N-major (each expert nn.Linear's [N, K])."""
    return w.transpose(1, 2).contiguous().transpose(1, 2)


@pytest.mark.parametrize("tokens,cfg", [
    (1, None), (5, None), (40, None),  # the heuristic's decode configs, and the prefill path
    (3, dict(BLOCK_N=16, BLOCK_K=16, SPLIT_K=2, DOWN_BLOCK_N=32, DOWN_BLOCK_K=16, DOWN_SPLIT_K=3, EW=1, DOWN_EW=1)),
])
def test_n_major_experts_give_the_k_major_output(device, tokens, cfg):
    """Experts stored N-major (the checkpoint's own per-expert layout) read through the same
    kernels by their strides: the K-major weights' output, within an output rounding."""
    router, gate_up, down = weights(torch.bfloat16, seed=70 + tokens, h=80, i=40)
    x = torch.randn(tokens, 80, generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    got = M.moe(xs[0], xs[1], nmajor(xs[2]), nmajor(xs[3]), 3, "softmax-topk-norm", config=cfg)
    want = M.moe(*xs, 3, "softmax-topk-norm", config=cfg)
    ids, _ = M.route(xs[0], xs[1], 3, "softmax-topk-norm")
    ref = M.moe_ref(x, router, gate_up, down, 3, "softmax-topk-norm", ids=ids.cpu())
    scale = ref.abs().max().item()
    assert (got.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * scale + 1e-3
    assert (got.float() - want.float()).abs().max().item() <= 2**-7 * scale


def test_op_traces_with_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        bf = dict(dtype=torch.bfloat16)
        x = torch.empty(3, 5, H, **bf)
        out = M.moe(x, torch.empty(H, E, **bf), torch.empty(E, H, 2 * I, **bf), torch.empty(E, I, H, **bf), 2,
                    "softmax-topk")
        assert out.shape == (3, 5, H) and out.dtype == torch.bfloat16


def stock_router_and_tokens(h, tokens, seed, device="cpu"):
    """transformers' Qwen3-MoE router (top-2, renormalized) in bf16 on device, and bf16 tokens
    with small logits: many of their scores a bf16 rounding apart. Returns the router, the tokens
    and the router's (weights, expert ids) for them, all on device: the router's logits round as
    that device's F.linear rounds them (cuBLAS and the CPU sum in different orders, and a
    near-tie can fall either way)."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    cfg = Qwen3MoeConfig(hidden_size=h, num_experts=E, num_experts_per_tok=2, norm_topk_prob=True)
    stock = Qwen3MoeTopKRouter(cfg)
    with torch.no_grad():
        stock.weight.copy_(torch.randn(E, h, generator=torch.Generator().manual_seed(seed)) * 0.05)
    stock = stock.to(torch.bfloat16).to(device)
    x = (torch.randn(tokens, h, generator=torch.Generator().manual_seed(seed + 1)) * 0.3).to(torch.bfloat16).to(device)
    _, wts, ids = stock(x)
    return stock, x, wts, ids


def test_router_picks_stocks_experts(device):
    """From the same bf16 activations, the kernel's routing is transformers' own router's: the
    logits rounded as its F.linear on the same device rounds them, so near-ties fall the same way."""
    stock, x, wts, ids = stock_router_and_tokens(H, 512, seed=1, device=device)
    got_ids, got_w = M.route(x, stock.weight.t().contiguous(), 2, "softmax-topk-norm")
    assert torch.equal(got_ids, ids)
    torch.testing.assert_close(got_w, wts.float(), rtol=2**-8, atol=0)


def assert_stocks_picks_but_near_ties(got_ids, got_w, stock, x, ids, wts):
    """The kernel's experts and weights are the stock router's on every token, except where the
    stock router's logits of the two differing picks are within one bf16 rounding of each other:
    a router whose fp32 sum runs in another order than cuBLAS's (split over programs) can round
    such a logit to the neighbouring bf16 value, and the near-tie falls the other way."""
    got_ids, ids = got_ids.long(), ids.long()
    same = (got_ids == ids).all(-1)
    logits = torch.nn.functional.linear(x, stock.weight).float()
    for t in (~same).nonzero().flatten().tolist():
        a, b = logits[t, got_ids[t]], logits[t, ids[t]]
        gap = (a - b).abs().max().item()
        assert gap <= 2**-7 * logits[t].abs().max().item(), (t, got_ids[t].tolist(), ids[t].tolist(), gap)
    assert same.float().mean().item() >= 0.9, same.float().mean().item()
    torch.testing.assert_close(got_w[same], wts.float()[same], rtol=2**-8, atol=0)


def test_router_split_k_at_decode_picks_stocks_experts(device, monkeypatch):
    """At decode the router splits the hidden size over programs and sums the slices in a fixed
    order: on 8-token batches of near-tied scores it picks transformers' experts, with
    transformers' weights, but where a near-tie rounds the other way, and repeats bit for bit."""
    # hidden 320: 5 slices of 64 under the interpreter (128 on a GPU: 3, the last one partial)
    stock, x, wts, ids = stock_router_and_tokens(320, 128, seed=5, device=device)
    grids = []
    kernel = M._router_kernel

    class Spy:
        def __getitem__(self, grid):
            grids.append(grid)
            return kernel[grid]

    monkeypatch.setattr(M, "_router_kernel", Spy())
    w = stock.weight.t().contiguous()
    got = [M.route(x[i:i + M.DECODE_MAX_TOKENS], w, 2, "softmax-topk-norm")
           for i in range(0, len(x), M.DECODE_MAX_TOKENS)]
    assert all(g[2] > 1 for g in grids), grids  # the split ran
    assert_stocks_picks_but_near_ties(torch.cat([g[0] for g in got]), torch.cat([g[1] for g in got]), stock, x, ids, wts)
    again = M.route(x[:M.DECODE_MAX_TOKENS], w, 2, "softmax-topk-norm")
    assert torch.equal(again[0], got[0][0]) and torch.equal(again[1], got[0][1])


def _ran(path, fn):
    """fn() with the launch counter of `path` ("moe.decode" / "moe.prefill") checked to move."""
    from xpuinject_kernels import _backend

    before = dict(_backend.launch_counts)
    out = fn()
    assert _backend.launch_counts[path] == before.get(path, 0) + 1, f"{path} did not run"
    return out


@pytest.mark.parametrize("tokens", [1, M.DECODE_MAX_TOKENS, M.DECODE_MAX_TOKENS + 1])
def test_path_by_token_count(device, tokens):
    """T = 1 and T = DECODE_MAX_TOKENS take the decode kernels, one token more the grouped ones."""
    router, gate_up, down = weights(torch.bfloat16, seed=20 + tokens)
    x = torch.randn(tokens, H, generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
    path = "moe.decode" if tokens <= M.DECODE_MAX_TOKENS else "moe.prefill"
    _ran(path, lambda: check(x, router, gate_up, down, 2, "softmax-topk-norm", device))


@pytest.mark.parametrize("tokens", [1, 5, 8, 13])
@pytest.mark.parametrize("e,top_k,h,i,rule", [
    (6, 2, 72, 24, "softmax-topk-norm"),     # hidden off every block size
    (6, 3, 48, 40, "softmax-topk"),          # top-3, inter 40, hidden 48 (one and a half 32-blocks)
    (5, 3, 80, 40, "softmax-topk-norm-fp32"),
])
def test_odd_sizes(device, tokens, e, top_k, h, i, rule):
    router, gate_up, down = weights(torch.bfloat16, seed=e * top_k + tokens, e=e, h=h, i=i)
    x = torch.randn(tokens, h, generator=torch.Generator().manual_seed(30 + tokens)).to(torch.bfloat16)
    check(x, router, gate_up, down, top_k, rule, device)


DECODE_CONFIGS = [
    dict(BLOCK_N=16, BLOCK_K=16, SPLIT_K=1, DOWN_BLOCK_N=16, DOWN_BLOCK_K=16, DOWN_SPLIT_K=1),
    dict(BLOCK_N=32, BLOCK_K=16, SPLIT_K=3, DOWN_BLOCK_N=64, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2),
    # more splits than K steps: clamped to one split per step
    dict(BLOCK_N=16, BLOCK_K=32, SPLIT_K=8, DOWN_BLOCK_N=16, DOWN_BLOCK_K=16, DOWN_SPLIT_K=5, num_warps=2),
    # the CUDA cores' multiply-add (EW) in either kernel or both, split and not, odd K tails
    dict(BLOCK_N=32, BLOCK_K=16, SPLIT_K=3, DOWN_BLOCK_N=64, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2, EW=1, DOWN_EW=1),
    dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=1, DOWN_BLOCK_N=16, DOWN_BLOCK_K=32, DOWN_SPLIT_K=1, EW=1, DOWN_EW=0),
    dict(BLOCK_N=16, BLOCK_K=16, SPLIT_K=2, DOWN_BLOCK_N=32, DOWN_BLOCK_K=16, DOWN_SPLIT_K=3, EW=0, DOWN_EW=1),
]
PREFILL_CONFIGS = [
    dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16),
    dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=8),
    dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=64),
]


@pytest.mark.parametrize("cfg", DECODE_CONFIGS)
@pytest.mark.parametrize("tokens", [1, 7])
def test_forced_decode_config(device, cfg, tokens):
    router, gate_up, down = weights(torch.bfloat16, seed=40 + tokens, h=80, i=40)
    x = torch.randn(tokens, 80, generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    out = _ran("moe.decode", lambda: M.moe(*xs, 3, "softmax-topk-norm", config=cfg))
    ids, _ = M.route(xs[0], xs[1], 3, "softmax-topk-norm")
    ref = M.moe_ref(x, router, gate_up, down, 3, "softmax-topk-norm", ids=ids.cpu())
    assert (out.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * ref.abs().max().item() + 1e-3
    # the split reductions sum in a fixed order: the same bits every time
    assert torch.equal(M.moe(*xs, 3, "softmax-topk-norm", config=cfg), out)
    from xpuinject_kernels import _backend

    assert not _backend.semaphores(xs[0].device, 1).any(), "a reduction left a semaphore counted"
    ew = _backend.launch_counts["moe.decode_ew"]
    M.moe(*xs, 3, "softmax-topk-norm", config=cfg)
    assert _backend.launch_counts["moe.decode_ew"] == ew + bool(cfg.get("EW") or cfg.get("DOWN_EW"))


def test_decode_ew_is_the_dot_path_to_rounding(device):
    """EW multiplies and adds the same exact fp32 products as the dot path, in another order: the
    two outputs differ by at most an output rounding here or there."""
    router, gate_up, down = weights(torch.bfloat16, seed=44, h=80, i=40)
    x = torch.randn(2, 80, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    base = dict(BLOCK_N=16, BLOCK_K=16, SPLIT_K=2, DOWN_BLOCK_N=16, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2)
    dot = M.moe(*xs, 3, "softmax-topk-norm", config=base).float()
    ew = M.moe(*xs, 3, "softmax-topk-norm", config=dict(base, EW=1, DOWN_EW=1)).float()
    assert (ew - dot).abs().max().item() <= 2**-7 * dot.abs().max().item()


@pytest.mark.parametrize("cfg", PREFILL_CONFIGS)
def test_forced_prefill_config(device, cfg):
    router, gate_up, down = weights(torch.bfloat16, seed=50, h=80, i=40)
    x = torch.randn(37, 80, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    out = _ran("moe.prefill", lambda: M.moe(*xs, 3, "softmax-topk", config=cfg))
    ids, _ = M.route(xs[0], xs[1], 3, "softmax-topk")
    ref = M.moe_ref(x, router, gate_up, down, 3, "softmax-topk", ids=ids.cpu())
    assert (out.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * ref.abs().max().item() + 1e-3


def test_config_errors(device):
    router, gate_up, down = weights(torch.bfloat16)
    x = torch.randn(2, H).to(torch.bfloat16).to(device)
    w = [t.to(device) for t in (router, gate_up, down)]
    with pytest.raises(ValueError, match=r"moe decode: unknown config key\(s\) BLOCK_M"):
        M.moe(x, *w, 2, "softmax-topk", config=dict(BLOCK_M=16))  # a prefill key at decode
    with pytest.raises(ValueError, match="config SPLIT_K=0: want a positive integer"):
        M.moe(x, *w, 2, "softmax-topk", config=dict(SPLIT_K=0))
    with pytest.raises(ValueError, match="config EW=2: want 0 or 1"):
        M.moe(x, *w, 2, "softmax-topk", config=dict(EW=2))
    with pytest.raises(ValueError, match=r"moe prefill: unknown config key\(s\) EW"):
        M.moe(torch.randn(40, H).to(torch.bfloat16).to(device), *w, 2, "softmax-topk", config=dict(EW=1))


def test_tuned_config_is_looked_up(device, monkeypatch):
    """A GPU data entry for the class ("moe.decode" / "moe.prefill", keyed by hidden, inter,
    experts, top_k and the token count's power-of-2 bucket) is what the launch takes."""
    from xpuinject_kernels import _backend, gpus

    dec = dict(BLOCK_N=32, BLOCK_K=16, SPLIT_K=4, DOWN_BLOCK_N=16, DOWN_BLOCK_K=16, DOWN_SPLIT_K=1, num_warps=2,
               num_stages=1)
    pre = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)
    key = dict(hidden=H, inter=I, experts=E, top_k=2)
    data = {"tuned": [dict(kernel="moe.decode", key=dict(key, tokens=4), config=dec),
                      dict(kernel="moe.prefill", key=dict(key, tokens=32), config=pre),
                      dict(kernel="moe.decode", key=dict(key, hidden=H + 1, tokens=1), config=dict(dec, BLOCK_N=64))]}
    monkeypatch.setattr(gpus, "device_data", lambda d: data)
    monkeypatch.setattr(M, "_CONFIGS", {})
    dev = torch.device(device)
    assert M.launch_config("decode", dev, H, I, E, 2, 3) == dec  # 3 tokens: bucket 4
    assert M.launch_config("prefill", dev, H, I, E, 2, 17) == pre  # 17 tokens: bucket 32
    heur = M.heuristic_config("decode", _backend.backend(dev), H, I, E, 2, 1, 8)
    assert M.launch_config("decode", dev, H, I, E, 2, 1) == heur  # no entry for bucket 1
    # a config= key overrides the tuned entry's
    assert M.launch_config("decode", dev, H, I, E, 2, 3, dict(SPLIT_K=1)) == dict(dec, SPLIT_K=1)
    router, gate_up, down = weights(torch.bfloat16, seed=60)
    x = torch.randn(3, H, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    monkeypatch.setattr(M, "_CONFIGS", {})
    before = _backend.launch_counts["tuned.moe.decode"]
    check(x, router, gate_up, down, 2, "softmax-topk-norm", device)
    assert _backend.launch_counts["tuned.moe.decode"] == before + 1


def test_heuristic_configs_on_gpu_shapes(monkeypatch):
    """The GPU heuristic (not the interpreter's tiny tiles) on the benchmarked shapes: decode
    puts >= 1.5 weight programs per SM of an H200 (132 SMs) where the shape allows, and prefill's
    row tile follows the rows an expert gets on average, within shared memory."""
    from xpuinject_kernels import _backend

    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    for h, i, e, k, t in [(2048, 768, 128, 8, 1), (2048, 768, 128, 8, 8), (4096, 14336, 8, 2, 1)]:
        c = M.heuristic_config("decode", "cuda", h, i, e, k, t, 132)
        assert t * k * -(-i // c["BLOCK_N"]) * c["SPLIT_K"] >= 1.5 * 132
        assert t * k * -(-h // c["DOWN_BLOCK_N"]) * c["DOWN_SPLIT_K"] >= 1.5 * 132
    q1 = M.heuristic_config("decode", "cuda", 2048, 768, 128, 8, 1, 132)
    assert (q1["SPLIT_K"], q1["DOWN_SPLIT_K"]) == (4, 1)  # 96 gate/up tiles, 256 down tiles
    rows = {t: M.heuristic_config("prefill", "cuda", 2048, 768, 128, 8, t, 132)["BLOCK_M"] for t in (64, 512, 2048)}
    assert rows == {64: 16, 512: 32, 2048: 64}  # 4, 32 and 128 rows per expert on average
    mix = M.heuristic_config("prefill", "cuda", 4096, 14336, 8, 2, 2048, 132)
    assert mix["BLOCK_M"] == 128 and M._prefill_fits(mix)


@pytest.mark.parametrize("tokens", [2, 20])
def test_no_host_sync_or_data_dependent_shape(device, tokens, monkeypatch):
    """A CPU stand-in for CUDA-graph capture: the launcher never reads a tensor on the host
    (item, tolist, bool/int/float of a tensor, .cpu()) nor makes a shape from data (nonzero,
    unique, masked_select)."""
    router, gate_up, down = weights(torch.bfloat16, seed=70)
    x = torch.randn(tokens, H, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    seen = []

    def spy(name, orig):
        def f(*a, **k):
            seen.append(name)
            return orig(*a, **k)
        return f

    for n in ("item", "tolist", "cpu", "nonzero", "unique", "masked_select", "__bool__", "__int__", "__float__",
              "__index__"):
        monkeypatch.setattr(torch.Tensor, n, spy(n, getattr(torch.Tensor, n)))
    for n in ("nonzero", "unique", "masked_select", "argwhere"):
        monkeypatch.setattr(torch, n, spy(n, getattr(torch, n)))
    out = M.moe(*xs, 2, "softmax-topk-norm")
    monkeypatch.undo()
    assert seen == []
    assert torch.isfinite(out).all()


def blocks_ref(ids, experts, block_m):
    """The prefill layout from torch ops (a stable argsort by expert): the contract M._blocks
    keeps, pairs in token order within each expert's run."""
    flat = ids.reshape(-1).long()  # the fused router's ids are int32
    pairs = flat.numel()
    nblocks = -(-pairs // block_m) + experts
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    start = torch.cumsum(counts, 0) - counts
    sorted_e = flat[order]
    rank = torch.arange(pairs) - start[sorted_e]
    rows = torch.full((nblocks * block_m,), -1, dtype=torch.int32)
    rows.scatter_(0, (pad_end - padded)[sorted_e] + rank, order.to(torch.int32))
    bexp = torch.searchsorted(pad_end, torch.arange(nblocks) * block_m, right=True).to(torch.int32)
    return rows, bexp, nblocks


def _routed(tokens, experts, top_k, seed, pick=None):
    """ids [tokens, top_k] of distinct experts per token, drawn from `pick` (default all)."""
    g = torch.Generator().manual_seed(seed)
    pool = torch.tensor(pick if pick is not None else range(experts))
    return torch.stack([pool[torch.randperm(len(pool), generator=g)[:top_k]] for _ in range(tokens)])


LAYOUT_CASES = {
    # experts 2 and 5 never picked: their runs are empty and no block is theirs
    "unpicked experts": (_routed(40, 6, 2, 1, pick=[0, 1, 3, 4]), 6, 16),
    "every expert hit": (_routed(40, 6, 3, 2), 6, 16),
    # expert 3 picked by token 0 alone: a one-row run, 15 rows of padding
    "one-token expert": (torch.cat([torch.tensor([[3, 0]]), _routed(30, 6, 2, 3, pick=[0, 1, 2, 4, 5])]), 6, 16),
    "one token": (torch.tensor([[4, 1]]), 6, 32),
    # 2500 pairs: three count programs, every run spans several blocks, block_m 64
    "pairs above one tile": (_routed(1250, 8, 2, 4), 8, 64),
    # the Qwen3-30B-A3B shape at 2048 tokens: 16384 pairs over 128 experts, with 5 left unpicked
    "qwen3 prefill": (_routed(2048, 128, 8, 5, pick=range(123)), 128, 64),
}


@pytest.mark.parametrize("case", list(LAYOUT_CASES))
def test_layout_matches_torch_construction(device, case):
    """The layout kernels against the argsort construction: the same block count, the same
    expert per block, -1 in the same rows, and each expert's run holds the same pairs (their
    order within a run is the atomics' and may differ)."""
    from xpuinject_kernels import _backend

    ids, experts, block_m = LAYOUT_CASES[case]
    rows, bexp, nblocks = M._blocks(ids.to(device), experts, block_m)
    want_rows, want_bexp, want_n = blocks_ref(ids, experts, block_m)
    rows, bexp = rows.cpu(), bexp.cpu()
    assert nblocks == want_n and rows.shape == want_rows.shape
    assert torch.equal(bexp, want_bexp)
    assert torch.equal(rows == -1, want_rows == -1)
    run = bexp.long().repeat_interleave(block_m)  # each row's expert
    key = lambda r: (run * (ids.numel() + 1) + r.long() + 1).sort().values  # noqa: E731
    assert torch.equal(key(rows), key(want_rows))
    # every pair once, each in a run of its own expert
    taken = rows[rows >= 0].long()
    assert torch.equal(taken.sort().values, torch.arange(ids.numel()))
    assert torch.equal(ids.reshape(-1)[taken], run[rows >= 0])
    assert not _backend.semaphores(torch.device(device), experts + 1).any(), "the counts were not put back to 0"


def test_layout_order_does_not_change_the_output(device, monkeypatch):
    """A prefill through the argsort layout with each run's pairs reversed (the interpreter's
    atomics place them in token order) gives the kernels' output: the order within a run changes
    at most a bf16 rounding."""
    router, gate_up, down = weights(torch.bfloat16, seed=80, h=80, i=40)
    x = torch.randn(45, 80, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    out = _ran("moe.prefill", lambda: M.moe(*xs, 3, "softmax-topk-norm"))

    reversed_runs = []

    def torch_layout(ids, experts, block_m):
        rows, bexp, nblocks = blocks_ref(ids.cpu(), experts, block_m)
        run = bexp.long().repeat_interleave(block_m)
        for e in range(experts):
            at = ((run == e) & (rows >= 0)).nonzero().flatten()
            rows[at] = rows[at].flip(0)
            reversed_runs.append(len(at) > 1)
        return rows.to(ids.device), bexp.to(ids.device), nblocks

    monkeypatch.setattr(M, "_blocks", torch_layout)
    got = M.moe(*xs, 3, "softmax-topk-norm")
    # a row's place in its block may change the fp32 accumulation order of a tile, so an output
    # may round to the neighbouring bf16 value: nearly every element equal, none further than that
    same = got == out
    assert float(same.float().mean()) >= 0.999, int((~same).sum())
    ulp = torch.finfo(torch.bfloat16).eps * out.float().abs().clamp_min(2.0 ** -126)
    assert bool(((got.float() - out.float()).abs() <= ulp).all())
    assert sum(reversed_runs) >= 3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens,top_k,h", [(1, 1, 16), (5, 3, 80), (9, 8, 72)])
def test_topk_sum_in_slot_order(device, dtype, tokens, top_k, h):
    """Each token's top_k rows of y summed in fp32 in slot order and rounded once: the bits of
    that loop in torch, across column tiles (80 and 72 are off the tile)."""
    y = torch.randn(tokens * top_k, h, generator=torch.Generator().manual_seed(top_k)) * 3
    out = torch.full((tokens, h), float("nan"), dtype=dtype, device=device)
    M._topk_sum(y.to(device), top_k, out)
    want = y.view(tokens, top_k, h)[:, 0].clone()
    for j in range(1, top_k):
        want += y.view(tokens, top_k, h)[:, j]
    assert torch.equal(out.cpu(), want.to(dtype))


def topk_lowest_index(probs, k):
    """The top-k that CUDA's torch.topk selects, largest first: a stable descending sort puts
    equal scores in index order."""
    vals, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    return vals[:, :k], ids[:, :k]


@pytest.fixture(params=["chain", "early-sorted"])
def router_mode(request, monkeypatch):
    """The decode router as shipped (its weight tile read before the PDL wait, the top-k by one
    sort) and with both off (XPUINJECT_ROUTER_W_EARLY=0, XPUINJECT_ROUTER_SORT_TOPK=0: the split
    over K steps, the top-k chain)."""
    on = request.param == "early-sorted"
    monkeypatch.setattr(M, "ROUTER_W_EARLY", on)
    monkeypatch.setattr(M, "ROUTER_SORT_TOPK", on)
    return request.param


@pytest.mark.parametrize("tokens,e,top_k", [(1, 6, 2), (3, 6, 3), (8, 128, 8)])
def test_router_selects_its_own_top_k(device, tokens, e, top_k, router_mode):
    """The router launch's own top-k (the decode path's on CUDA) against the sorted probabilities
    of the same launch without it: the same experts and probabilities, largest first, equal
    scores by lowest index. Experts 0, 2 and 3 score exactly alike, so the tie falls inside or
    at the edge of the chosen set; on a GPU the set is also torch.topk's own on the device."""
    g = torch.Generator().manual_seed(tokens * 100 + e)
    router = torch.randn(H, e, generator=g) * 0.2
    router[:, 2] = router[:, 3] = router[:, 0]
    router = router.to(torch.bfloat16).to(device)
    x = torch.randn(tokens, H, generator=g).abs().to(torch.bfloat16).to(device)
    probs = M._router_probs(x, router)
    vals, ids = M.decode_route(x, router, top_k, fused=True)
    assert ids.dtype == torch.int32 and vals.dtype == torch.float32 and ids.shape == (tokens, top_k)
    want_v, want_i = topk_lowest_index(probs.cpu(), top_k)
    assert torch.equal(ids.cpu().long(), want_i)
    assert torch.equal(vals.cpu(), want_v)
    if torch.device(device).type == "cuda":
        tv, ti = torch.topk(probs, top_k, dim=-1)
        assert torch.equal(ti.sort(-1).values.cpu(), ids.long().sort(-1).values.cpu())
        assert torch.equal(tv.cpu(), vals.cpu())


@pytest.mark.parametrize("tokens,e,top_k", [(5, 128, 8), (9, 6, 2), (40, 6, 3), (37, 128, 8)])
@pytest.mark.parametrize("rule", M.ROUTERS)
def test_router_makes_the_routing_weights_in_its_launch(device, tokens, e, top_k, rule, router_mode):
    """Routing from the router launch alone (route(fused=True), the default on CUDA; 5 tokens
    split the hidden size over programs, as at decode): its experts are the ones the launch's probabilities rank first (equal scores by
    lowest index), and its weights are `route`'s torch ops on them (the sum in slot order), bit
    for bit."""
    g = torch.Generator().manual_seed(tokens * 10 + top_k)
    router = torch.randn(H, e, generator=g) * 0.2
    router[:, 2] = router[:, 3] = router[:, 0]  # tied scores
    router = router.to(torch.bfloat16).to(device)
    x = torch.randn(tokens, H, generator=g).abs().to(torch.bfloat16).to(device)
    ids, w = M.route(x, router, top_k, rule, fused=True)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32 and w.shape == (tokens, top_k)
    want_v, want_i = topk_lowest_index(M._router_probs(x, router).cpu(), top_k)
    assert torch.equal(ids.cpu().long(), want_i)
    if rule != "softmax-topk":
        total = want_v[:, 0].clone()
        for j in range(1, top_k):
            total += want_v[:, j]
        want_v = want_v / total[:, None]
    if rule != "softmax-topk-norm-fp32":
        want_v = want_v.to(torch.bfloat16).float()
    assert torch.equal(w.cpu(), want_v)


@pytest.mark.parametrize("rule,top_k", [("softmax-topk-norm", 2), ("softmax-topk", 3)])
def test_prefill_on_the_routers_own_top_k(device, monkeypatch, rule, top_k):
    """The prefill path on the router launch's own top-k and weights (as on CUDA) computes what
    it computes on torch.topk's, bit for bit, where no scores tie."""
    router, gate_up, down = weights(torch.bfloat16, seed=21)
    x = torch.randn(1, 40, H, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).to(device)
    w = [t.to(device) for t in (router, gate_up, down)]
    monkeypatch.setattr(M, "fused_topk", lambda dev: False)
    plain = M.moe(x, *w, top_k, rule)
    monkeypatch.setattr(M, "fused_topk", lambda dev: True)
    assert torch.equal(M.route(x[0], w[0], top_k, rule)[0].long(), M.route(x[0], w[0], top_k, rule, fused=False)[0])
    assert torch.equal(M.moe(x, *w, top_k, rule), plain)


def test_fused_top_k_only_where_torch_topk_breaks_ties_alike(device):
    """The router selects its own top-k on CUDA only: the interpreter and other devices run
    torch.topk, whose tie rule may differ (CPU's does)."""
    assert M.fused_topk(torch.device(device)) == (torch.device(device).type == "cuda")
    assert not M.fused_topk(torch.device("cpu"))


@pytest.mark.parametrize("tokens", [1, 5, M.DECODE_MAX_TOKENS + 3])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_residual_in_the_last_launch(device, tokens, dtype):
    """moe(..., residual=r) is r + moe(...) as two separate bf16/fp16 steps compute it, bit for
    bit, on the decode and the prefill path; a residual of another shape or dtype is refused."""
    router, gate_up, down = weights(dtype, seed=40 + tokens)
    g = torch.Generator().manual_seed(tokens)
    x = torch.randn(1, tokens, H, generator=g).to(dtype).to(device)
    r = (torch.randn(1, tokens, H, generator=g) * 4).to(dtype).to(device)
    w = [t.to(device) for t in (router, gate_up, down)]
    alone = M.moe(x, *w, 2, "softmax-topk-norm")
    fused = M.moe(x, *w, 2, "softmax-topk-norm", residual=r)
    assert torch.equal(fused, r + alone)
    assert not torch.equal(fused, alone)
    with pytest.raises(ValueError, match="residual"):
        M.moe(x, *w, 2, "softmax-topk-norm", residual=r.float())
    with pytest.raises(ValueError, match="residual"):
        M.moe(x, *w, 2, "softmax-topk-norm", residual=r[..., : H // 2])


@pytest.mark.parametrize("tokens", [1, 3, 8, 9])  # the router's norm at decode sizes, add_rms_norm then moe above
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_rms_norm_moe_is_the_two_steps(device, tokens, dtype, monkeypatch, router_mode):
    """add_rms_norm_moe(x, r) runs the post-attention add + RMSNorm in the router's launch: the sum
    it hands the residual add is add_rms_norm's bit for bit, its normalized rows at most one
    rounding apart (the sum of squares in another order), and the output that of add_rms_norm
    followed by moe(..., residual=sum); 9 tokens run those two steps themselves."""
    from xpuinject_kernels.rmsnorm import add_rms_norm

    monkeypatch.setattr(M, "FUSE_MOE_NORM", True)
    router, gate_up, down = weights(dtype, seed=60 + tokens)
    g = torch.Generator().manual_seed(tokens)
    x = torch.randn(1, tokens, H, generator=g).to(dtype).to(device)
    r = (torch.randn(1, tokens, H, generator=g) * 4).to(dtype).to(device)
    nw = (torch.rand(H, generator=g) + 0.5).to(dtype).to(device)
    w = [t.to(device) for t in (router, gate_up, down)]
    s, normed = add_rms_norm(x, r, nw, 1e-6)
    want = M.moe(normed, *w, 2, "softmax-topk-norm", residual=s)
    before = M._backend.launch_counts["add_rms_norm_moe"]
    got = M.add_rms_norm_moe(x, r, nw, 1e-6, *w, 2, "softmax-topk-norm")
    assert M._backend.launch_counts["add_rms_norm_moe"] - before == (tokens <= M.DECODE_MAX_TOKENS)
    if tokens > M.DECODE_MAX_TOKENS:
        assert torch.equal(got, want)
        return
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, atol=2 ** -7 * scale, rtol=2 ** -6)
    # the router's own outputs against the two kernels'
    x2, r2 = x.reshape(-1, H), r.reshape(-1, H)
    s_out, n_out = torch.full_like(x2, float("nan")), torch.full_like(x2, float("nan"))
    probs = M._router_probs(x2, w[0], norm=(r2, nw, 1e-6, s_out, n_out))
    assert torch.equal(s_out, s.reshape(-1, H))
    ulp = (normed.reshape(-1, H).float().abs() * (2 ** -7 if dtype == torch.bfloat16 else 2 ** -10)).clamp_min(1e-30)
    assert ((n_out.float() - normed.reshape(-1, H).float()).abs() <= ulp).all()
    torch.testing.assert_close(probs, M._router_probs(n_out, w[0]), atol=0, rtol=0)


def test_add_rms_norm_moe_traces_as_one_op(device):
    router, gate_up, down = weights(torch.bfloat16, seed=3)
    g = torch.Generator().manual_seed(3)
    x, r = (torch.randn(2, H, generator=g).bfloat16().to(device) for _ in range(2))
    nw = (torch.rand(H, generator=g) + 0.5).bfloat16().to(device)
    w = [t.to(device) for t in (router, gate_up, down)]
    want = M.add_rms_norm_moe(x, r, nw, 1e-6, *w, 2, "softmax-topk-norm")
    fn = torch.compile(lambda *a: M.add_rms_norm_moe(*a, 2, "softmax-topk-norm"), backend="aot_eager",
                       fullgraph=True)
    assert torch.equal(fn(x, r, nw, 1e-6, *w), want)


def test_add_rms_norm_moe_fuses_only_where_launches_do_not_overlap(device, monkeypatch):
    """FUSE_MOE_NORM goes to _backend.fuse_norm (None: fuse on a GPU whose launches do not overlap),
    and the op runs the norm in the router's launch only when it says so."""
    router, gate_up, down = weights(torch.bfloat16, seed=4)
    g = torch.Generator().manual_seed(4)
    x, r = (torch.randn(1, H, generator=g).bfloat16().to(device) for _ in range(2))
    nw = (torch.rand(H, generator=g) + 0.5).bfloat16().to(device)
    w = [t.to(device) for t in (router, gate_up, down)]
    seen = []
    for setting, fuse in ((None, False), (None, True), (False, False), (True, True)):
        monkeypatch.setattr(M, "FUSE_MOE_NORM", setting)
        monkeypatch.setattr(M._backend, "fuse_norm", lambda s, dev, f=fuse: seen.append(s) or (f if s is None else s))
        before = M._backend.launch_counts["add_rms_norm_moe"]
        M.add_rms_norm_moe(x, r, nw, 1e-6, *w, 2, "softmax-topk-norm")
        assert M._backend.launch_counts["add_rms_norm_moe"] - before == fuse, setting
    assert seen == [None, None, False, True]


@pytest.mark.parametrize("tokens,cfg", [
    (1, None), (5, None), (40, None),  # the heuristic's decode configs (tiles as wide as the slabs), and prefill
    # tiles wider and narrower than the slabs, EW on both kernels
    (3, dict(BLOCK_N=32, BLOCK_K=16, SPLIT_K=2, DOWN_BLOCK_N=16, DOWN_BLOCK_K=16, DOWN_SPLIT_K=3, EW=1, DOWN_EW=1)),
    (2, dict(BLOCK_N=32, BLOCK_K=32, SPLIT_K=1, DOWN_BLOCK_N=64, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2)),
])
def test_blocked_experts_give_the_packed_output(device, tokens, cfg):
    """Experts in the blocked layout (each tile of slab columns one contiguous run) read through
    the same kernels: the packed layout's output bit for bit, since only the addresses differ;
    gate/up and down in slabs of their own widths."""
    router, gate_up, down = weights(torch.bfloat16, seed=80 + tokens, h=96, i=48)
    x = torch.randn(tokens, 96, generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    gu_b, dn_b = M.blocked(xs[2], 16), M.blocked(xs[3], 32)
    assert gu_b.shape == (E, 6, 96, 16) and dn_b.shape == (E, 3, 48, 32)
    assert torch.equal(M.unblocked(gu_b), xs[2]) and torch.equal(M.unblocked(dn_b), xs[3])
    got = M.moe(xs[0], xs[1], gu_b, dn_b, 3, "softmax-topk-norm", config=cfg)
    want = M.moe(*xs, 3, "softmax-topk-norm", config=cfg)
    assert torch.equal(got, want)
    ids, _ = M.route(xs[0], xs[1], 3, "softmax-topk-norm")
    ref = M.moe_ref(x, router, gu_b.cpu(), dn_b.cpu(), 3, "softmax-topk-norm", ids=ids.cpu())
    assert (got.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * ref.abs().max().item() + 1e-3


def test_blocked_layout_errors(device):
    router, gate_up, down = weights(torch.bfloat16, h=96, i=40)
    x = torch.randn(2, 96).to(torch.bfloat16)
    with pytest.raises(ValueError, match="80 columns do not split into tiles of 32"):
        M.blocked(gate_up, 32)
    # 16-column tiles split 2 * 40 columns, but one straddles the gate and up halves
    with pytest.raises(ValueError, match=r"blocked tiles of 16 straddle the gate and up halves \(intermediate 40\)"):
        M.moe(x, router, M.blocked(gate_up, 16), down, 2, "softmax-topk")
    with pytest.raises(ValueError, match=r"down weight \(6, 2, 48, 48\): want \[experts=6, intermediate=40, "
                                         r"hidden=96\] \(blocked\)"):
        M.moe(x, router, gate_up, torch.zeros(6, 2, 48, 48, dtype=down.dtype), 2, "softmax-topk")
    with pytest.raises(ValueError, match="a blocked layout must be contiguous"):
        M.moe(x, router, gate_up, M.blocked(down, 48).transpose(2, 3).contiguous().transpose(2, 3), 2, "softmax-topk")


def test_experts_blocked_at_load_where_the_switch_says(monkeypatch):
    """packing.decode_layout: XPUINJECT_MOE_SLAB blocks a MoE layer's experts (both routes attach
    their packed tensors through it) where their columns split into its tiles, gate/up's halves
    each; the packed layout otherwise; a bad value is an error naming the variable."""
    from xpuinject_kernels import packing

    _, gate_up, down = weights(torch.bfloat16, h=96, i=40)
    monkeypatch.delenv("XPUINJECT_MOE_SLAB", raising=False)
    assert packing.decode_layout("SparseMoE", "down_weight", down) is down
    monkeypatch.setenv("XPUINJECT_MOE_SLAB", "32")
    got = packing.decode_layout("SparseMoE", "down_weight", down)
    assert got.shape == (E, 3, 40, 32) and torch.equal(M.unblocked(got), down)
    assert packing.decode_layout("SharedExpertMoE", "gate_up_weight", gate_up) is gate_up  # 40 % 32: as packed
    monkeypatch.setenv("XPUINJECT_MOE_SLAB", "8")
    with pytest.raises(ValueError, match="XPUINJECT_MOE_SLAB='8': want 0 or a power of two from 16 to 1024"):
        packing.decode_layout("SparseMoE", "down_weight", down)
    monkeypatch.setenv("XPUINJECT_MOE_SLAB", "0")
    assert packing.decode_layout("RouterMoE", "down_weight", down) is down


def test_experts_nmajor_at_load_where_the_switch_says(device, monkeypatch):
    """packing.decode_layout: XPUINJECT_MOE_NMAJOR=1 loads a MoE layer's experts as the [E, K, N]
    view of their N-major copy (each expert's rows of contiguous K), the same values, which the
    block reads to the packed layout's output on both paths; with XPUINJECT_MOE_SLAB too it is an
    error naming both."""
    from xpuinject_kernels import packing

    router, gate_up, down = weights(torch.bfloat16, h=96, i=40)
    monkeypatch.delenv("XPUINJECT_MOE_SLAB", raising=False)
    monkeypatch.setenv("XPUINJECT_MOE_NMAJOR", "1")
    got = {r: packing.decode_layout("SparseMoE", r, w) for r, w in (("gate_up_weight", gate_up), ("down_weight", down))}
    for r, w in (("gate_up_weight", gate_up), ("down_weight", down)):
        assert got[r].shape == w.shape and torch.equal(got[r], w) and got[r].stride(1) == 1, r
    o_w = down[0]
    assert packing.decode_layout("Attention", "o_weight", o_w) is o_w  # the experts' switch only
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, down)]
    nm = [xs[0], xs[1], got["gate_up_weight"].to(device), got["down_weight"].to(device)]
    assert nm[2].stride(1) == 1 and nm[3].stride(1) == 1
    for cfg in (dict(BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, DOWN_BLOCK_N=32, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2), None):
        assert torch.equal(M.moe(*nm, 2, "softmax-topk", config=cfg), M.moe(*xs, 2, "softmax-topk", config=cfg))
    monkeypatch.setenv("XPUINJECT_MOE_NMAJOR", "0")
    assert packing.decode_layout("SparseMoE", "down_weight", down) is down
    monkeypatch.setenv("XPUINJECT_MOE_NMAJOR", "1")
    monkeypatch.setenv("XPUINJECT_MOE_SLAB", "32")
    with pytest.raises(ValueError, match="XPUINJECT_MOE_NMAJOR and XPUINJECT_MOE_SLAB both set"):
        packing.decode_layout("SparseMoE", "down_weight", down)


@pytest.mark.parametrize("layout", ["packed", "nmajor"])
@pytest.mark.parametrize("down", [dict(DOWN_BLOCK_N=32, DOWN_BLOCK_K=16), dict(DOWN_BLOCK_N=16, DOWN_BLOCK_K=32, DOWN_EW=1)])
@pytest.mark.parametrize("tokens,rule,top_k", [(1, "softmax-topk-norm", 3), (5, "softmax-topk", 2),
                                               (3, "softmax-topk-norm-fp32", 3)])
def test_down_all_slots_is_split_one_bit_for_bit(device, layout, down, tokens, rule, top_k):
    """DOWN_ALL: each down program runs all of its token's slots and sums them as the one-split
    finishing program does, with no partials or semaphore: the same bits as DOWN_SPLIT_K 1 (with a
    residual too), both down paths, both layouts."""
    router, gate_up, dn = weights(torch.bfloat16, seed=90 + tokens, h=80, i=40)
    x = torch.randn(tokens, 80, generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
    r = torch.randn(tokens, 80, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    xs = [t.to(device) for t in (x, router, gate_up, dn, r)]
    if layout == "nmajor":
        xs[2], xs[3] = nmajor(xs[2]), nmajor(xs[3])
    base = dict(BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, DOWN_SPLIT_K=1, **down)
    from xpuinject_kernels import _backend

    for res in (None, xs[4]):
        want = M.moe(*xs[:4], top_k, rule, config=base, residual=res)
        got = _ran("moe.decode", lambda: M.moe(*xs[:4], top_k, rule, config=dict(base, DOWN_ALL=1), residual=res))
        assert torch.equal(got, want)
        # DOWN_ALL ignores a K split it cannot take
        assert torch.equal(M.moe(*xs[:4], top_k, rule, config=dict(base, DOWN_ALL=1, DOWN_SPLIT_K=3), residual=res),
                           want)
    assert not _backend.semaphores(xs[0].device, 1).any()
