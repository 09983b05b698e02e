"""Greedy selection in one launch (greedy.py) against the torch ops it replaces: the first
maximum across vocabulary chunks (ties), finished rows, EOS, the step counters; semaphores end at 0."""

import pytest
import torch

from xpuinject_kernels import _backend
from xpuinject_kernels.greedy import BLOCK, greedy_select


def torch_select(logits, unfinished, n_gen, out, cur, pad, eos, tok):
    """runtime._select's torch path, greedy mode."""
    nxt = logits.float().argmax(-1)
    alive = unfinished.clone()
    n_gen.add_(alive.any().long())
    nxt = torch.where(alive, nxt, pad)
    out.index_copy_(1, (cur + 1).view(1), nxt[:, None])
    unfinished.logical_and_(~(nxt[:, None] == eos[None, :]).any(-1))
    tok.copy_(nxt[:, None])
    cur.add_(1)


def state(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    return dict(unfinished=torch.tensor([True, False, True][:b]), n_gen=torch.tensor(4),
                out=torch.randint(0, 9, (b, s), generator=g), cur=torch.tensor(5), pad=torch.tensor(2),
                eos=torch.tensor([7, -1, -1, -1]), tok=torch.zeros(b, 1, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("v", [BLOCK * 2 + 37, 500])
def test_greedy_select_matches_the_torch_ops(device, dtype, v):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, v, generator=g)
    # row 0: a tie across chunks (the first wins); row 2: its maximum is an EOS id
    logits[0, v - 3] = logits[0, 11] = 9.0
    logits[2, 7] = 12.0
    logits = logits.to(dtype)
    a, b = state(3, 12, 0), state(3, 12, 0)
    torch_select(logits, **a)
    moved = {k: t.to(device) for k, t in b.items()}
    greedy_select(logits.to(device), **moved)
    for k in a:
        assert torch.equal(a[k], moved[k].cpu()), k
    assert int(moved["out"][0, 6]) == 11 and int(moved["out"][1, 6]) == 2 and not bool(moved["unfinished"][2])
    assert int(_backend.semaphores(torch.device(device), 1).abs().sum()) == 0


@pytest.mark.parametrize("alive, top", [(True, 11), (True, 7), (False, 11)])
def test_greedy_select_one_row(device, alive, top):
    """Batch 1: the first of maxima tied in one lane across chunks and across lanes, an EOS maximum
    finishing the row, a finished row's pad."""
    v = BLOCK * 3 + 37
    logits = torch.randn(1, v, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    logits[0, [top, top + BLOCK, top + 2 * BLOCK + 1, v - 3]] = 9.0  # same lane, other lanes, the tail
    a = state(1, 12, 0)
    a["unfinished"] = torch.tensor([alive])
    b = {k: t.clone() for k, t in a.items()}
    torch_select(logits, **a)
    moved = {k: t.to(device) for k, t in b.items()}
    greedy_select(logits.to(device), **moved)
    for k in a:
        assert torch.equal(a[k], moved[k].cpu()), k
    assert int(moved["tok"]) == (top if alive else 2) and int(moved["cur"]) == 6
    assert bool(moved["unfinished"]) == (alive and top != 7) and int(moved["n_gen"]) == 4 + alive
    assert int(_backend.semaphores(torch.device(device), 1).abs().sum()) == 0


def test_greedy_select_all_finished_does_not_count_a_step(device):
    s = state(2, 8, 3)
    s["unfinished"] = torch.tensor([False, False])
    s = {k: t.to(device) for k, t in s.items()}
    greedy_select(torch.randn(2, 300).to(device), **s)
    assert int(s["n_gen"]) == 4 and int(s["cur"]) == 6 and s["tok"].flatten().tolist() == [2, 2]


def test_greedy_select_checks_state(device):
    s = {k: t.to(device) for k, t in state(2, 8, 3).items()}
    with pytest.raises(ValueError, match="state shapes"):
        greedy_select(torch.randn(3, 300).to(device), **s)
