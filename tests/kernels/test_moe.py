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
    among them are the ones torch.topk picks from the same probabilities on this device."""
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
    assert torch.equal(ids, want)
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


def test_op_traces_with_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        bf = dict(dtype=torch.bfloat16)
        x = torch.empty(3, 5, H, **bf)
        out = M.moe(x, torch.empty(H, E, **bf), torch.empty(E, H, 2 * I, **bf), torch.empty(E, I, H, **bf), 2,
                    "softmax-topk")
        assert out.shape == (3, 5, H) and out.dtype == torch.bfloat16


def test_router_picks_stocks_experts(device):
    """From the same bf16 activations, the kernel's routing is transformers' own router's: the
    logits rounded as its F.linear rounds them, so near-ties fall the same way."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    cfg = Qwen3MoeConfig(hidden_size=H, num_experts=E, num_experts_per_tok=2, norm_topk_prob=True)
    stock = Qwen3MoeTopKRouter(cfg)
    with torch.no_grad():
        stock.weight.copy_(torch.randn(E, H, generator=torch.Generator().manual_seed(1)) * 0.05)
    stock = stock.to(torch.bfloat16)
    # many tokens, small logits: many scores a bf16 rounding apart
    x = (torch.randn(512, H, generator=torch.Generator().manual_seed(2)) * 0.3).to(torch.bfloat16)
    _, wts, ids = stock(x)
    got_ids, got_w = M.route(x.to(device), stock.weight.t().contiguous().to(device), 2, "softmax-topk-norm")
    assert torch.equal(got_ids.cpu(), ids)
    torch.testing.assert_close(got_w.cpu(), wts.float(), rtol=2**-8, atol=0)
