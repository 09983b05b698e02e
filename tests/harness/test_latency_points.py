"""The eval driver's --latency-points presets: which prefill lengths, decode batches and vision
batches each times, an explicit --prefill or --decode-batches replacing the preset's list, and
what eval.json records about it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "python"))
import eval_driver as d  # noqa: E402
import latency as L  # noqa: E402

REQUIRED = ["--model", "m", "--package", "p", "--packed", "k", "--out", "o"]


def parse(*extra):
    return d.parse_args(REQUIRED + list(extra))


@pytest.mark.parametrize("extra, prefill, decode, flags, record", [
    ((), "512", "1", [], {"points": "quick", "full_adds": {"decode": [8]}}),
    (("--latency-points", "quick"), "512", "1", [], {"points": "quick", "full_adds": {"decode": [8]}}),
    (("--latency-points", "full"), "512", "1,8", [], {"points": "full"}),
    # an explicit list wins over the preset; the preset still fills the other one
    (("--prefill", "128,2048"), "128,2048", "1", ["--prefill"],
     {"points": "quick", "points_flags": ["--prefill"], "full_adds": {"decode": [8]}}),
    (("--decode-batches", "4"), "512", "4", ["--decode-batches"],
     {"points": "quick", "points_flags": ["--decode-batches"]}),
    (("--latency-points", "full", "--decode-batches", "2"), "512", "2", ["--decode-batches"],
     {"points": "full", "points_flags": ["--decode-batches"]}),
    (("--prefill", "64", "--decode-batches", "1,8", "--latency-points", "full"), "64", "1,8",
     ["--prefill", "--decode-batches"], {"points": "full", "points_flags": ["--prefill", "--decode-batches"]}),
])
def test_points_resolve_from_the_preset_and_the_flags(extra, prefill, decode, flags, record):
    args = parse(*extra)
    assert (args.prefill, args.decode_batches, args.points_flags) == (prefill, decode, flags)
    assert L.points_record(args, vision=False) == record


def test_vision_points_follow_the_preset_only():
    assert L.points_record(parse(), vision=True) == {"points": "quick", "full_adds": {"forward": [1]}}
    assert L.points_record(parse("--latency-points", "full"), vision=True) == {"points": "full"}
    # --prefill and --decode-batches time a decoder; a vision model's batches are the preset's
    assert L.points_record(parse("--decode-batches", "4"), vision=True) == {
        "points": "quick", "full_adds": {"forward": [1]}}


def test_an_unknown_preset_names_the_flag(capsys):
    with pytest.raises(SystemExit) as e:
        parse("--latency-points", "all")
    assert e.value.code == 2
    assert "argument --latency-points: invalid choice: 'all'" in capsys.readouterr().err


def measured_labels(monkeypatch):
    labels = []

    def measure_point(paths, names, label, fn, row, n):
        labels.append(label)
        row["ratios"] = {}
    monkeypatch.setattr(L, "measure_point", measure_point)
    return labels


@pytest.mark.parametrize("points, want", [
    ("quick", ["prefill 512", "decode batch 1"]),
    ("full", ["prefill 512", "decode batch 1", "decode batch 8"]),
])
def test_llm_latency_times_the_preset_points(monkeypatch, points, want):
    labels = measured_labels(monkeypatch)
    model = SimpleNamespace(forward=lambda input_ids: None)
    paths = SimpleNamespace(stock=model, rt=SimpleNamespace(cache_bucket=lambda n: 1024))
    args = parse("--latency-points", points, "--decode-steps", "4")
    rows = L.latency(paths, ("stock_eager",), SimpleNamespace(vocab_size=100), torch.device("cpu"), args)
    assert labels == want
    assert [r["tokens"] for r in rows["prefill"]] == [512]
    assert [r["batch"] for r in rows["decode"]] == [int(w.split()[-1]) for w in want[1:]]


@pytest.mark.parametrize("points, want", [("quick", [32]), ("full", [1, 32])])
def test_vision_latency_times_the_preset_batches(monkeypatch, points, want):
    labels = measured_labels(monkeypatch)
    stock = torch.nn.Linear(2, 2).to(torch.bfloat16)
    paths = SimpleNamespace(stock=stock)
    args = parse("--latency-points", points)
    got = L.vision_latency(paths, ("stock_eager",), SimpleNamespace(image_size=8), torch.device("cpu"), args,
                           lambda n, size, seed: torch.zeros(n, 3, size, size))
    assert labels == [f"batch {b}" for b in want]
    assert [r["batch"] for r in got["forward"]] == want
