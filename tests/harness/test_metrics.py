"""The eval's accuracy metrics, computed chunk by chunk, equal the same formulas over the whole
tensors: non-finite elements left out, the relative-error floor from the finite reference, KL and
top-1 over rows, perplexity over the next-token labels."""

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "python"))
import eval_driver as D  # noqa: E402


def _whole(x, ref, floor=0.0):
    a, e = x.double().reshape(-1), ref.double().reshape(-1)
    ok = torch.isfinite(a) & torch.isfinite(e)
    a, e = a[ok], e[ok]
    floor = floor if floor > 0 else max(1e-6, 1e-3 * float(e.abs().max()))
    d = (a - e).abs()
    rel = d / e.abs().clamp_min(floor)
    return {"cosine": float((a @ e) / (a.norm() * e.norm())), "max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "max_rel": float(rel.max()), "mean_rel": float(rel.mean()), "rel_floor": floor,
            "nonfinite": int((~ok).sum())}


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 24])
def test_chunked_metrics_equal_the_whole_tensor_formulas(monkeypatch, chunk):
    monkeypatch.setattr(D, "METRICS_CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(3, 11, 50, generator=g)
    x = ref + 0.01 * torch.randn(3, 11, 50, generator=g)
    x[0, 2, 3] = float("nan")
    ref[1, 4, 5] = float("inf")
    got, want = D.error_metrics(x, ref), _whole(x, ref)
    assert got["nonfinite"] == want["nonfinite"] == 2
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k
    assert D.error_metrics(x, ref, floor=0.5)["rel_floor"] == 0.5

    lx, lr = x.clone(), ref.clone()
    lx[0, 2, 3], lr[1, 4, 5] = 0.0, 0.0
    labels = torch.randint(0, 50, (3, 11), generator=g)
    m = D.logits_metrics(lx, lr, labels)
    fx, fr = lx.reshape(-1, 50).double(), lr.reshape(-1, 50).double()
    px, pr = torch.log_softmax(fx, -1), torch.log_softmax(fr, -1)
    assert m["kl"] == pytest.approx(float((pr.exp() * (pr - px)).sum(-1).mean()), rel=1e-12)
    assert m["top1_agreement"] == float((fx.argmax(-1) == fr.argmax(-1)).double().mean())
    nll = torch.nn.functional.cross_entropy(lx[:, :-1].reshape(-1, 50).double(), labels[:, 1:].reshape(-1))
    assert m["perplexity"] == pytest.approx(math.exp(float(nll)), rel=1e-12)


def test_margin_bound_chunked(monkeypatch):
    """The largest change stock makes to the oracle's top-1 minus top-2 margin, over every row,
    whatever the chunking."""
    g = torch.Generator().manual_seed(1)
    o = torch.randn(2, 9, 40, generator=g)
    st = o + 0.05 * torch.randn(2, 9, 40, generator=g)
    fo, fs = o.reshape(-1, 40).double(), st.reshape(-1, 40).double()
    top = fo.topk(2, dim=-1).indices
    om, sm = fo.gather(-1, top), fs.gather(-1, top)
    want = float(((sm[:, 0] - sm[:, 1]) - (om[:, 0] - om[:, 1])).abs().max())
    for chunk in (40, 123, 1 << 24):
        monkeypatch.setattr(D, "METRICS_CHUNK", chunk)
        assert D.margin_bound(st, o) == want


def test_divergence_inputs_are_each_first_divergences_prompt_and_shared_prefix():
    """What the divergence checks will run the first model on, known before they run (so its
    kernels compile ahead): each prompt's first divergence, the prompt and the tokens both runs
    share before it; a prompt whose runs agree has none."""
    prompts = [torch.tensor([[1, 2]]), torch.tensor([[3, 4]]), torch.tensor([[5, 6]])]
    xs = [[7, 8, 9], [10, 11], [12, 13, 14]]
    ys = [[7, 8, 0], [10, 11], [0, 13, 14]]
    got = D.divergence_inputs(xs, ys, prompts)
    assert [(p.tolist(), t) for p, t in got] == [([[1, 2]], [7, 8]), ([[5, 6]], [])]
    for (p, t), k, at in zip(got, (0, 2), (2, 0)):
        assert p is prompts[k] and t == xs[k][:at] and D.first_divergence(xs[k], ys[k]) == at
