"""Accuracy metrics shared by the kernel tests, the accuracy-oracle method: cosine, max/mean abs
error, max/mean rel error with a printed nonzero denominator floor.

    m = metrics.assert_close("rmsnorm bf16 70", out, oracle, atol=1e-2, rtol=1e-2)

prints one line per comparison (run pytest with -s to see them) and returns the Metrics.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch


@dataclasses.dataclass
class Metrics:
    cosine: float
    max_abs: float
    mean_abs: float
    max_rel: float
    mean_rel: float
    floor: float  # denominator floor of the relative errors: |e| is replaced by max(|e|, floor)
    n: int
    nonfinite: int  # elements where actual or expected is NaN/inf (but not both the same inf)

    def line(self) -> str:
        return (
            f"cos={self.cosine:.7f} max_abs={self.max_abs:.3e} mean_abs={self.mean_abs:.3e} "
            f"max_rel={self.max_rel:.3e} mean_rel={self.mean_rel:.3e} (rel floor={self.floor:.1e}) "
            f"n={self.n} nonfinite={self.nonfinite}"
        )


def default_floor(expected: torch.Tensor) -> float:
    """1e-3 of the largest |expected| (at least 1e-6): errors on near-zero elements are reported
    relative to the tensor's scale instead of exploding."""
    e = expected.detach().double()
    finite = e[torch.isfinite(e)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return max(1e-6, 1e-3 * scale)


def compute(actual: torch.Tensor, expected: torch.Tensor, floor: Optional[float] = None) -> Metrics:
    if actual.shape != expected.shape:
        raise AssertionError(f"metrics: shape mismatch: actual {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    a = actual.detach().double().cpu().reshape(-1)
    e = expected.detach().double().cpu().reshape(-1)
    if floor is None:
        floor = default_floor(e)
    both_same = (a == e)  # equal infinities count as matching
    bad = (~torch.isfinite(a) | ~torch.isfinite(e)) & ~both_same
    nonfinite = int(bad.sum())
    ok = torch.isfinite(a) & torch.isfinite(e)
    a_ok, e_ok = a[ok], e[ok]
    if a_ok.numel() == 0:
        return Metrics(float("nan"), float("inf"), float("inf"), float("inf"), float("inf"), floor, a.numel(), nonfinite)
    diff = (a_ok - e_ok).abs()
    rel = diff / e_ok.abs().clamp_min(floor)
    na, ne = a_ok.norm(), e_ok.norm()
    if na == 0 and ne == 0:
        cos = 1.0
    elif na == 0 or ne == 0:
        cos = 0.0
    else:
        cos = float((a_ok @ e_ok) / (na * ne))
    return Metrics(cos, float(diff.max()), float(diff.mean()), float(rel.max()), float(rel.mean()), floor, a.numel(), nonfinite)


def report(name: str, actual: torch.Tensor, expected: torch.Tensor, floor: Optional[float] = None) -> Metrics:
    m = compute(actual, expected, floor)
    print(f"[metrics] {name}: {m.line()}")
    return m


def assert_close(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float = 0.0,
    min_cosine: Optional[float] = None,
    floor: Optional[float] = None,
) -> Metrics:
    """Print the metrics, then assert: no NaN/inf where expected is finite, every element within
    atol + rtol*|expected|, and cosine >= min_cosine when given."""
    m = report(name, actual, expected, floor)
    assert m.nonfinite == 0, f"{name}: {m.nonfinite} non-finite elements (unwritten output?): {m.line()}"
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    tol = atol + rtol * e.abs()
    over = (a - e).abs() > tol
    if bool(over.any()):
        idx = over.nonzero()[0].tolist()
        raise AssertionError(
            f"{name}: {int(over.sum())}/{over.numel()} elements outside atol={atol} rtol={rtol}; "
            f"first at {idx}: actual={float(a[tuple(idx)]):.6g} expected={float(e[tuple(idx)]):.6g}; {m.line()}"
        )
    if min_cosine is not None:
        assert m.cosine >= min_cosine, f"{name}: cosine {m.cosine:.7f} < {min_cosine}: {m.line()}"
    return m


def coord_tensor(shape, *, a: float = 0.37, b: float = 0.11, c: float = 0.05, dtype=torch.float32) -> torch.Tensor:
    """Coordinate-dependent values x[..., i, j] = sin(a*i + b*j + c*k) (k = flat index of leading
    dims): every element distinct, so a swapped row/column or a wrong stride is visible."""
    shape = tuple(shape)
    if len(shape) == 1:
        j = torch.arange(shape[0], dtype=torch.float64)
        return torch.sin(b * j).to(dtype)
    lead = 1
    for s in shape[:-2]:
        lead *= s
    k = torch.arange(lead, dtype=torch.float64).view(-1, 1, 1)
    i = torch.arange(shape[-2], dtype=torch.float64).view(1, -1, 1)
    j = torch.arange(shape[-1], dtype=torch.float64).view(1, 1, -1)
    return torch.sin(a * i + b * j + c * k).reshape(shape).to(dtype)
