"""A MoE layer's decode tail in three launches (moe.o_proj_moe): the o projection with the residual
add, whose tiles also store the router's share of the new residual (gemv.py's router epilogue);
gate/up, each program routing its pair from those shares and normalizing the residual as it
reads it; down. Against an fp64 reference of the same formula, at every token count of the
decode path, each routing rule, bf16 and fp16, split and unsplit tiles, tied router scores; the
layers take it at decode and give what the unfused launches give, up to rounding."""

from __future__ import annotations

import pytest
import torch
import triton
import transformers

from xpuinject_kernels import gemv as G
from xpuinject_kernels import moe as M
from xpuinject_kernels.gemm import gemm
from xpuinject_kernels.rmsnorm import rms_norm

from test_moe import E, H, I, weights
from test_moe_layers import FIXTURES

K = 48  # the attention output's width (heads x head_dim), not the hidden size
EPS = 1e-6


@pytest.fixture
def routed(monkeypatch):
    monkeypatch.setattr(M, "FUSE_ROUTER", True)


def operands(dtype, tokens, seed, bias=False, e=E):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, K, generator=g).to(dtype)
    o_w = (torch.randn(K, H, generator=g) / K**0.5).to(dtype)
    r = (torch.randn(tokens, H, generator=g) * 2).to(dtype)
    nw = (torch.rand(H, generator=g) + 0.5).to(dtype)
    b = (torch.randn(H, generator=g) * 0.1).to(dtype) if bias else None
    return x, o_w, b, r, nw, weights(dtype, seed=seed, e=e)


def reference(x, o_w, b, r, nw, router_w, gate_up, down, top_k, rule, ids=None):
    """fp64: s = residual + x @ o_w (+ b) rounded once; the router's logits rstd(s) * (s * w) @ Wr
    unrounded; the experts on the norm's output rounded as the kernels round it. ids: the
    kernel's picks (where fp64 and fp32 order a near-tie apart). Returns (out, ids, probs)."""
    dtype = x.dtype
    acc = r.double() + x.double() @ o_w.double() + (0 if b is None else b.double())
    s = acc.to(dtype)
    rstd = 1 / torch.sqrt(s.double().pow(2).mean(-1, keepdim=True) + EPS)
    probs = torch.softmax(rstd * ((s.double() * nw.double()) @ router_w.double()), dim=-1)
    if ids is None:
        ids = torch.topk(probs, top_k, dim=-1).indices
    vals = probs.gather(1, ids.long())
    if rule != "softmax-topk":
        vals = vals / vals.sum(-1, keepdim=True)
    xn = (nw.float() * (s.float() * rstd.float()).to(dtype).float()).to(dtype).double()
    out = s.double().clone()
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            gu = xn[t] @ gate_up[e].double()
            out[t] += vals[t, j] * ((torch.nn.functional.silu(gu[:I]) * gu[I:]) @ down[e].double())
    return out, ids, probs


def margin(probs, top_k):
    """The gap between each token's k-th and (k+1)-th probability."""
    p = probs.sort(-1, descending=True).values
    return p[:, top_k - 1] - p[:, top_k]


@pytest.mark.parametrize("tokens", [1, 3, M.DECODE_MAX_TOKENS])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rule,top_k", [("softmax-topk-norm", 2), ("softmax-topk", 2), ("softmax-topk-norm-fp32", 3)])
def test_routed_decode_matches_fp64(device, routed, tokens, dtype, rule, top_k):
    x, o_w, b, r, nw, (router_w, gate_up, down) = operands(dtype, tokens, seed=10 + tokens, bias=tokens == 3)
    dev = [t if t is None else t.to(device) for t in (x, o_w, b, r, nw, router_w, gate_up, down)]
    before = M._backend.launch_counts["o_proj_moe"]
    out = M.o_proj_moe(*dev[:5], EPS, *dev[5:], top_k, rule)
    assert M._backend.launch_counts["o_proj_moe"] - before == 1
    assert out.dtype == dtype and out.shape == r.shape
    ref, ids, probs = reference(x, o_w, b, r, nw, router_w, gate_up, down, top_k, rule)
    # the kernel's experts are fp64's wherever the k-th and next scores are not near-tied
    got_ids, _ = routed_ids(dev, top_k, rule)
    clear = margin(probs, top_k) > 1e-4
    assert clear.any()
    assert torch.equal(got_ids[clear].sort(-1).values, ids[clear].sort(-1).values.int())
    ref, _, _ = reference(x, o_w, b, r, nw, router_w, gate_up, down, top_k, rule, ids=got_ids)
    err = (out.cpu().double() - ref).abs().max().item()
    tol = (2**-7 if dtype == torch.bfloat16 else 2**-10) * 4 * ref.abs().max().item() + 1e-3
    assert err <= tol, f"max error {err:.3g} > {tol:.3g}"


def routed_ids(dev, top_k, rule, gemv_cfg=None, cfg=None):
    """The routed decode's own launches (o_proj_moe's), returning (expert ids, output)."""
    x, o_w, b, r, nw, router_w, gate_up, down = dev
    t = x.shape[0]
    s2 = torch.empty_like(r)
    s2, parts, sq = G.gemv(x, o_w, b, r, s2, "residual", config=gemv_cfg, router=(nw, router_w))
    out = torch.empty_like(r)
    cfg = cfg or M.launch_config("decode", x.device, H, I, router_w.shape[1], top_k, t)
    ids, _ = M._decode(s2, router_w, gate_up, down, top_k, rule, out, cfg, s2, routed=(parts, sq, nw, EPS))
    return ids.cpu(), out


@pytest.mark.parametrize("tokens,gemv_cfg,cfg", [
    # the o projection's K in three splits (the router's share in the last split's epilogue), and
    # EW at one row; gate/up in splits, in one, and on the CUDA cores
    (2, dict(BLOCK_N=16, BLOCK_K=16, SPLIT_K=3), dict(BLOCK_N=16, BLOCK_K=16, SPLIT_K=3, DOWN_BLOCK_N=32,
                                                      DOWN_BLOCK_K=16, DOWN_SPLIT_K=2)),
    (1, dict(BLOCK_N=32, BLOCK_K=16, SPLIT_K=2, EW=1), dict(BLOCK_N=32, BLOCK_K=32, SPLIT_K=1, DOWN_BLOCK_N=16,
                                                             DOWN_BLOCK_K=16, DOWN_SPLIT_K=1, EW=1, DOWN_EW=1)),
    (5, dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=1), None),
])
def test_router_share_and_launch_configs(device, tokens, gemv_cfg, cfg):
    """The o projection's output with the router's share is its residual epilogue's, bit for bit
    (the same tiles and sums); the shares add up to the fp64 logits and sums of squares; any
    tile and split layout of either launch gives the reference's output."""
    dtype, top_k, rule = torch.bfloat16, 2, "softmax-topk-norm"
    x, o_w, b, r, nw, (router_w, gate_up, down) = operands(dtype, tokens, seed=30 + tokens)
    dev = [t if t is None else t.to(device) for t in (x, o_w, b, r, nw, router_w, gate_up, down)]
    gc = triton.Config(gemv_cfg, num_warps=4, num_stages=1)
    s2, parts, sq = G.gemv(dev[0], dev[1], None, dev[3], torch.empty_like(dev[3]), "residual", config=gc,
                           router=(dev[4], dev[5]))
    plain = G.gemv(dev[0], dev[1], None, dev[3], torch.empty_like(dev[3]), "residual", config=gc)
    assert torch.equal(s2, plain)
    assert parts.shape == (triton.cdiv(H, gemv_cfg["BLOCK_N"]), tokens, E) and sq.shape == parts.shape[:2]
    s = s2.cpu().double()
    torch.testing.assert_close(sq.sum(0).cpu().double(), s.pow(2).sum(-1), rtol=1e-6, atol=0)
    want = (s * nw.double()) @ router_w.double()
    torch.testing.assert_close(parts.sum(0).cpu().double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    c = None if cfg is None else dict(cfg, num_warps=4, num_stages=1)
    ids, out = routed_ids(dev, top_k, rule, gemv_cfg=gc, cfg=c)
    ref, _, _ = reference(x, o_w, b, r, nw, router_w, gate_up, down, top_k, rule, ids=ids)
    assert (out.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * ref.abs().max().item() + 1e-3


@pytest.fixture(params=[False, True], ids=["sort", "rank"])
def by_rank(request, monkeypatch):
    """The routed gate/up's top-k by one sort of the keys, or by each key's rank."""
    monkeypatch.setattr(M, "ROUTE_BY_RANK", request.param)
    return request.param


def test_tied_router_scores_pick_the_lowest_index(device, routed, by_rank):
    """Router columns 1, 2 and 4 equal and columns 0, 3 and 5 zero: every token's logits are
    L, L, L for experts 1, 2, 4 (equal sums of the same products) and exactly 0 for the rest.
    The top-2 is then experts 1 and 2 where L > 0 and 0 and 3 where L < 0: largest first, equal
    scores by lowest index, the set CUDA's torch.topk picks."""
    dtype = torch.bfloat16
    x, o_w, b, r, nw, (router_w, gate_up, down) = operands(dtype, 6, seed=50)
    router_w = router_w.clone()
    router_w[:, [0, 3, 5]] = 0
    router_w[:, 2] = router_w[:, 1]
    router_w[:, 4] = router_w[:, 1]
    dev = [t if t is None else t.to(device) for t in (x, o_w, b, r, nw, router_w, gate_up, down)]
    ids, out = routed_ids(dev, 2, "softmax-topk-norm")
    _, _, probs = reference(x, o_w, b, r, nw, router_w, gate_up, down, 2, "softmax-topk-norm", ids=ids)
    lead = probs[:, 1] > probs[:, 0]
    assert lead.any() and (~lead).any()  # both cases among the tokens
    want = torch.where(lead[:, None], torch.tensor([1, 2]), torch.tensor([0, 3])).int()
    assert torch.equal(ids, want), ids
    ref, _, _ = reference(x, o_w, b, r, nw, router_w, gate_up, down, 2, "softmax-topk-norm", ids=ids)
    assert (out.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * ref.abs().max().item() + 1e-3


def test_experts_sorted_past_a_power_of_two(device, routed, by_rank):
    """Routing over 24 experts (32 keys, 8 of them padding) and top-5: the picks are fp64's
    where not near-tied, and the output the reference's."""
    dtype, top_k, rule = torch.bfloat16, 5, "softmax-topk-norm"
    x, o_w, b, r, nw, (router_w, gate_up, down) = operands(dtype, 3, seed=60, e=24)
    dev = [t if t is None else t.to(device) for t in (x, o_w, b, r, nw, router_w, gate_up, down)]
    ids, out = routed_ids(dev, top_k, rule)
    want, ref_ids, probs = reference(x, o_w, b, r, nw, router_w, gate_up, down, top_k, rule)
    clear = margin(probs, top_k) > 1e-4
    assert torch.equal(ids[clear].sort(-1).values, ref_ids[clear].sort(-1).values.int())
    ref, _, _ = reference(x, o_w, b, r, nw, router_w, gate_up, down, top_k, rule, ids=ids)
    assert (out.cpu().double() - ref).abs().max().item() <= 2**-7 * 4 * ref.abs().max().item() + 1e-3


def test_rank_and_sort_pick_alike(device, routed, monkeypatch):
    """The top-k by rank and by sort: the same experts in the same slots and the same output,
    bit for bit, at 8 tokens over 24 experts, top-5."""
    x, o_w, b, r, nw, (router_w, gate_up, down) = operands(torch.bfloat16, M.DECODE_MAX_TOKENS, seed=70, e=24)
    dev = [t if t is None else t.to(device) for t in (x, o_w, b, r, nw, router_w, gate_up, down)]
    got = {}
    for rank in (False, True):
        monkeypatch.setattr(M, "ROUTE_BY_RANK", rank)
        got[rank] = routed_ids(dev, 5, "softmax-topk-norm")
    assert torch.equal(got[False][0], got[True][0])
    assert torch.equal(got[False][1], got[True][1])


@pytest.mark.parametrize("tokens,setting", [(M.DECODE_MAX_TOKENS + 1, True), (2, False)])
def test_unrouted_is_the_three_steps(device, monkeypatch, tokens, setting):
    """Past the decode path's sizes, or with XPUINJECT_FUSE_ROUTER=0, o_proj_moe is the o
    projection's residual epilogue, rms_norm and moe(..., residual=s), bit for bit."""
    monkeypatch.setattr(M, "FUSE_ROUTER", setting)
    x, o_w, b, r, nw, w = operands(torch.bfloat16, tokens, seed=70)
    x, o_w, r, nw, *w = (t.to(device) for t in (x, o_w, r, nw, *w))
    s = gemm(x, o_w, residual=r, epilogue="residual")
    want = M.moe(rms_norm(s, nw, EPS), *w, 2, "softmax-topk-norm", residual=s)
    before = M._backend.launch_counts["o_proj_moe"]
    assert torch.equal(M.o_proj_moe(x, o_w, None, r, nw, EPS, *w, 2, "softmax-topk-norm"), want)
    assert M._backend.launch_counts["o_proj_moe"] == before


def test_o_proj_moe_traces_as_one_op(device, routed):
    x, o_w, b, r, nw, w = operands(torch.bfloat16, 2, seed=80)
    x, o_w, r, nw, *w = (t.to(device) for t in (x, o_w, r, nw, *w))
    want = M.o_proj_moe(x, o_w, None, r, nw, EPS, *w, 2, "softmax-topk-norm")
    fn = torch.compile(lambda *a: M.o_proj_moe(*a, 2, "softmax-topk-norm"), backend="aot_eager", fullgraph=True)
    assert torch.equal(fn(x, o_w, None, r, nw, EPS, *w), want)


def test_bad_operands_name_what_is_wrong(device):
    x, o_w, b, r, nw, w = operands(torch.bfloat16, 1, seed=90)
    with pytest.raises(ValueError, match=r"o weight \(48, 64\) does not match the attention output \(1, 40\)"):
        M.o_proj_moe(x[:, :40], o_w, None, r, nw, EPS, *w, 2, "softmax-topk-norm")
    with pytest.raises(ValueError, match=r"residual \(1, 32\)"):
        M.o_proj_moe(x, o_w, None, r[:, :32], nw, EPS, *w, 2, "softmax-topk-norm")
    with pytest.raises(ValueError, match=r"norm weight \(32,\)"):
        M.o_proj_moe(x, o_w, None, r, nw[:32], EPS, *w, 2, "softmax-topk-norm")
    with pytest.raises(ValueError, match=r"o bias \(32,\)"):
        M.o_proj_moe(x, o_w, nw[:32], r, nw, EPS, *w, 2, "softmax-topk-norm")
    with pytest.raises(ValueError, match="router 'top1'"):
        M.o_proj_moe(x, o_w, None, r, nw, EPS, *w, 2, "top1")
    with pytest.raises(ValueError, match="the router's share follows the plain residual epilogue, not 'none'"):
        G.gemv(x, o_w, None, None, torch.empty_like(r), "none", router=(nw, w[0]))


@pytest.mark.parametrize("name", ["qwen3-moe-tiny", "mixtral-tiny"])
def test_layers_route_in_o_proj_at_decode(llama_odd_pkg, name, device, monkeypatch):
    """A kernelized model's decode step on a static cache takes the routed tail in each sparse
    layer (Qwen3-MoE's DecoderLayer, Mixtral's MoEDecoderLayer) and gives the unfused launches'
    logits up to rounding; its prefill does not take it."""
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.bfloat16).eval().to(device)
    llama_odd_pkg.kernelize(model)
    sparse = {"qwen3-moe-tiny": 1, "mixtral-tiny": 2}[name]  # qwen3-moe-tiny's layer 1 is dense
    # more tokens than the decode path takes: the prefill does not route in o_proj
    ids = torch.randint(3, 500, (1, M.DECODE_MAX_TOKENS + 4), generator=torch.Generator().manual_seed(6)).to(device)

    def step(setting):
        monkeypatch.setattr(llama_odd_pkg.moe, "FUSE_ROUTER", setting)
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
        with torch.no_grad():
            before = llama_odd_pkg._backend.launch_counts["o_proj_moe"]
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            assert llama_odd_pkg._backend.launch_counts["o_proj_moe"] == before
            before = llama_odd_pkg._backend.launch_counts["o_proj_moe"]
            nxt = model(input_ids=out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
        return out.logits.float(), nxt.logits.float(), llama_odd_pkg._backend.launch_counts["o_proj_moe"] - before

    pre_r, step_r, n_r = step(True)
    pre_u, step_u, n_u = step(False)
    assert (n_r, n_u) == (sparse, 0)
    assert torch.equal(pre_r, pre_u)
    assert (step_r - step_u).abs().max().item() <= 0.02 * step_u.abs().max().item()
    assert step_r.argmax(-1).equal(step_u.argmax(-1))
