"""Evaluation past one device (harness/python/eval_sharded.py):

- the layered fp32 oracle, which reads the checkpoint one unit (embeddings, decoder layer, final
  norm, head) at a time, computes what the whole fp32 model computes: logits, every hidden state
  and greedy tokens, bit for bit, whether its units stay or are read again on every pass;
- `xpuinject eval --gpus 2 --device cpu`: two torchrun workers, each one pipeline stage of the
  bf16 models, over gloo (the code a GPU run takes with NCCL), give the single process's
  eval.json: every accuracy, per-layer and generation figure equal, only the placement differs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"


@pytest.fixture(scope="module")
def sharded():
    spec = importlib.util.spec_from_file_location("eval_sharded_under_test", ROOT / "harness" / "python" / "eval_sharded.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def whole_fp32(path):
    cfg = transformers.AutoConfig.from_pretrained(path)
    cls = getattr(transformers, cfg.architectures[0])
    return cls, cls.from_pretrained(path, dtype=torch.float32).eval()


# llama-odd: tied embeddings and an fp16 checkpoint; llama-sharded: four shards and an index;
# mistral: sliding window; qwen2: biased q/k/v; qwen3: q/k norms
@pytest.mark.parametrize("fixture", ["llama-tiny", "llama-odd", "llama-sharded", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"])
def test_layered_oracle_equals_the_whole_fp32_model(sharded, fixture):
    path = FIXTURES / fixture
    cls, ref = whole_fp32(path)
    vocab = ref.config.vocab_size
    ids = (torch.arange(48) * 37 % vocab).unsqueeze(0)
    want_logits, want_hidden = sharded.forward_text(ref, ids)
    prompts = [ids[:, :8], ids[:, 20:28], ids[:, 30:38]]
    want_tokens = [sharded.greedy_batch(ref, [p], 6)[0] for p in prompts]
    for budget in (0, None):  # every unit read again on every pass; every unit kept
        oracle = sharded.LayeredOracle(cls, path, torch.device("cpu"), budget=budget, tokens=48)
        for _ in range(2):  # a second pass reads the dropped units again
            got_logits, got_hidden = sharded.forward_text(oracle.model, ids)
            assert torch.equal(got_logits, want_logits), (fixture, budget)
            assert len(got_hidden) == len(want_hidden) == ref.config.num_hidden_layers + 1
            for i, (g, w) in enumerate(zip(got_hidden, want_hidden)):
                assert torch.equal(g, w), (fixture, budget, i)
        # batched greedy: one pass per token for all prompts; the same tokens as one at a time
        assert sharded.greedy_batch(oracle.model, prompts, 6) == want_tokens, (fixture, budget)
        p = oracle.placement()
        units = ref.config.num_hidden_layers + 3  # embeddings, layers, final norm, head
        assert p["mode"] == "layered" and p["units"] == units
        if budget == 0:
            # only the embeddings stay; each pass reads the other units again
            assert p["kept_units"] == 1 and p["streamed_loads"] == p["loads"] - 1 >= 3 * (units - 1)
        else:
            assert p["kept_units"] == units and p["loads"] == units and p["streamed_loads"] == 0
        # nothing but the kept units holds memory between passes
        held = {n for n, t in oracle.model.named_parameters() if t.device.type != "meta"}
        assert all(any(n.startswith(u + ".") for u in oracle.kept) for n in held)


def test_layered_oracle_copies_dropped_units_from_host_memory(sharded):
    """Units not kept on the device: the first pass reads them from the checkpoint and holds what
    it read in host memory while host_budget allows; later passes copy those instead of reading
    the checkpoint, with the same logits. A host budget too small for one unit holds nothing."""
    path = FIXTURES / "llama-odd"
    cls, ref = whole_fp32(path)
    ids = (torch.arange(24) * 37 % ref.config.vocab_size).unsqueeze(0)
    want, _ = sharded.forward_text(ref, ids)
    for host, copies in ((1 << 30, True), (1, False)):
        oracle = sharded.LayeredOracle(cls, path, torch.device("cpu"), budget=0, tokens=24, host_budget=host)
        got, _ = sharded.forward_text(oracle.model, ids)
        assert torch.equal(got, want)
        first = oracle.placement()
        assert first["host_loads"] == 0 and first["streamed_loads"] > 0
        got, _ = sharded.forward_text(oracle.model, ids)
        assert torch.equal(got, want)
        p = oracle.placement()
        streamed = p["streamed_loads"] - first["streamed_loads"]
        assert p["host_loads"] == (streamed if copies else 0), (host, p)
        assert (0 < p["host_bytes"] <= host) if copies else p["host_bytes"] == 0
        assert p["host_budget_bytes"] == host
    # on the CPU the device is the host: nothing held twice by default
    assert sharded.LayeredOracle(cls, path, torch.device("cpu"), budget=0).host_budget == 0


def test_layered_oracle_budget_line_is_sized_to_the_model(sharded):
    """The progress line says how much of this model stays, not the free memory of the device."""
    path = FIXTURES / "llama-odd"
    whole = sharded.LayeredOracle(transformers.LlamaForCausalLM, path, torch.device("cpu"), tokens=48)
    sharded.forward_text(whole.model, torch.arange(8).unsqueeze(0))
    # the figure is what the oracle holds once every unit is loaded (the untied head copy too)
    want = whole.placement()["kept_bytes"]
    assert whole.model_bytes == want and 1e6 < want < 3e6  # llama-odd: 1.9 MB, nothing like the device's free memory
    assert whole.budget_line() == f"all {want / 1e6:.1f} MB of its weights fit the device budget and stay after their first load"
    tight = sharded.LayeredOracle(transformers.LlamaForCausalLM, path, torch.device("cpu"), budget=1000, tokens=48)
    assert tight.budget_line() == (f"up to 1.0 kB of its {want / 1e6:.1f} MB of weights stay on the device, "
                                   "the rest is read again each pass")


def test_layered_oracle_says_what_it_will_still_keep(sharded):
    """What the helpers' memory plan must leave free: the bytes the oracle will load and keep on
    its first pass (its budget, at most the model), less what it already holds."""
    path = FIXTURES / "llama-odd"
    whole = sharded.LayeredOracle(transformers.LlamaForCausalLM, path, torch.device("cpu"), tokens=48)
    embed = whole.kept_bytes
    assert 0 < embed < whole.model_bytes
    assert whole.bytes_to_keep() == whole.model_bytes - embed
    sharded.forward_text(whole.model, torch.arange(8).unsqueeze(0))
    assert whole.bytes_to_keep() == 0  # every unit is held now
    part = sharded.LayeredOracle(transformers.LlamaForCausalLM, path, torch.device("cpu"), budget=embed + 5000,
                                 tokens=48)
    assert part.bytes_to_keep() == 5000
    assert sharded.LayeredOracle(transformers.LlamaForCausalLM, path, torch.device("cpu"), budget=0).bytes_to_keep() == 0


def test_layered_oracle_names_a_missing_tensor(sharded, tmp_path):
    from safetensors.torch import load_file, save_file

    model = tmp_path / "m"
    shutil.copytree(FIXTURES / "llama-tiny", model)
    tensors = load_file(model / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    oracle = sharded.LayeredOracle(transformers.LlamaForCausalLM, model, torch.device("cpu"), budget=0)
    with pytest.raises(KeyError, match=r"no tensor 'model.layers.1.mlp.up_proj.weight' \(module 'model.layers.1'"):
        sharded.forward_text(oracle.model, torch.tensor([[3, 4, 5]]))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp("pipeline")
    for fixture in ("llama-tiny", "qwen3-tiny"):
        r = subprocess.run([str(BIN), str(FIXTURES / fixture), "--out", str(out / fixture), "--skip-eval"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    return out


def evaluate(run: Path, fixture: str, out: Path, gpus: int, *extra):
    # torchrun gives each worker one thread; the single process gets one too, so that the CPU's
    # float64 reductions in the metrics sum in the same order
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    r = subprocess.run([str(BIN), "eval", str(FIXTURES / fixture), "--package", str(run / "package"),
                        "--packed", str(run / "packed"), "--out", str(out), "--device", "cpu", "--gpus", str(gpus), *extra],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads((out / "eval.json").read_text()), (out / "report.md").read_text(), r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fixture, extra", [
    ("llama-tiny", ()),
    # attention by the package's kernels (GQA, q/k norms); a shorter text to bound the interpreter's time
    ("qwen3-tiny", ("--tokens", "48", "--gen-tokens", "4")),
])
def test_two_gloo_stages_give_the_single_process_figures(runs, tmp_path, fixture, extra):
    one, _, _ = evaluate(runs / fixture, fixture, tmp_path / "one", 1, *extra)
    two, report, stderr = evaluate(runs / fixture, fixture, tmp_path / "two", 2, *extra)
    assert "on cpu ×2 (pipeline stages, torchrun)" in stderr and "2 pipeline stages (gloo)" in stderr
    assert one["schema"] == two["schema"] == 3
    assert one["device"]["count"] == 1 and two["device"]["count"] == 2
    # the GPU run's comparison script agrees, and finds a 1% change in one figure
    compare = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "compare_evals.py"),
               str(tmp_path / "one" / "eval.json")]
    r = subprocess.run([*compare, str(tmp_path / "two" / "eval.json")], capture_output=True, text=True)
    assert r.returncode == 0 and "largest relative difference 0 " in r.stdout and "equal within tolerance" in r.stdout, r.stdout
    off = json.loads(json.dumps(two))
    off["accuracy"]["injected"]["kl"] *= 1.01
    (tmp_path / "off.json").write_text(json.dumps(off))
    r = subprocess.run([*compare, str(tmp_path / "off.json")], capture_output=True, text=True)
    assert r.returncode == 1 and "| injected kl |" in r.stdout and "**over**" in r.stdout, r.stdout
    p1, p2 = one["device"].pop("placement"), two["device"].pop("placement")
    one["device"].pop("count"), two["device"].pop("count")
    # wall seconds differ from run to run; the pipeline's stages are the single process's, less
    # the graph runtime's generation (one device only)
    t1, t2 = one.pop("timings"), two.pop("timings")
    n1 = [s["stage"] for s in t1["stages"]]
    assert [s["stage"] for s in t2["stages"]] == [n for n in n1 if n != "greedy generation under the graph runtime"]
    assert t2["wall_s"] > 0
    # the graph runtime decodes on one device only: the pipeline says why it left it out
    rt1, rt2 = one["generation"].pop("runtime"), two["generation"].pop("runtime")
    assert rt1["stock"]["vs_eager"]["tokens"] > 0 and rt1["injected"]["vs_eager"]["non_ties"] == 0
    assert set(rt2) == {"graphs", "reason"} and "2 pipeline stages" in rt2["reason"]
    # everything measured is equal: accuracy, per-layer errors, generation and its divergences,
    # the injection summary (the stages' bindings merged), the oracle's perplexity
    assert one == two
    assert one["accuracy"]["injected"]["kl"] > 0 and len(one["layers"]) == 2
    # the placement says which process held what
    for name in ("stock", "injected"):
        assert p1[name]["mode"] == "single" and len(p1[name]["stages"]) == 1
        assert p1[name]["stages"][0]["layers"] == [0, 2]
        st = p2[name]["stages"]
        assert p2[name]["mode"] == "pipeline" and [s["rank"] for s in st] == [0, 1]
        assert [s["layers"] for s in st] == [[0, 1], [1, 2]]
        assert [(s["embeddings"], s["norm"], s["head"]) for s in st] == [(True, False, False), (False, True, True)]
        assert all(s["device"] == "cpu" and s["bytes"] > 0 for s in st)
    # the injected stages hold their packed tensors: together what the single process holds
    assert sum(s["bytes"] for s in p2["injected"]["stages"]) >= p1["injected"]["stages"][0]["bytes"]
    assert p1["oracle"]["mode"] == p2["oracle"]["mode"] == "layered" and p2["oracle"]["rank"] == 0
    assert "Not decoded under the package's graph runtime: 2 pipeline stages" in report
    assert "| injected bf16 | 1 | " in report and "The bf16 models were split into 2 pipeline stages" in report


@pytest.mark.slow
def test_pipeline_latency_code_runs_over_gloo(runs, tmp_path):
    """What a GPU pipeline times: prefill forwards and decode steps under the package's runtime
    (eager, on a StaticCache), every rank taking part, rank 0 reporting."""
    out = tmp_path / "lat.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", str(Path(__file__).with_name("pipeline_latency_worker.py")),
                        str(FIXTURES / "llama-tiny"), str(runs / "llama-tiny"), str(out)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(out.read_text())
    assert got["world"] == 2 and got["errors"] == {} and got["peak"] == 1001  # the larger of the two ranks'
    lat = got["latency"]
    assert [p["tokens"] for p in lat["prefill"]] == [16] and [p["batch"] for p in lat["decode"]] == [1, 2]
    assert all(p["ms"]["stock_eager"] > 0 for p in lat["prefill"] + lat["decode"])


def drivers(marker: str):
    """Pids of live processes whose command line holds marker (Linux /proc)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = next((ln for ln in (p / "status").read_text().splitlines() if ln.startswith("State:")), "")
            except OSError:
                continue
            if marker in cmd and "eval_driver.py" in cmd and "zombie" not in state:
                out.append(int(p.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc to find the workers")
def test_torchrun_workers_die_with_the_cli(runs, tmp_path):
    """kill -9 of the CLI takes torchrun (the harness's child) and its workers, which torchrun puts
    in sessions of their own, with it."""
    import signal
    import time

    out = tmp_path / "killed-eval"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="1")
    cli = subprocess.Popen([str(BIN), "eval", str(FIXTURES / "llama-tiny"), "--package", str(runs / "llama-tiny" / "package"),
                            "--packed", str(runs / "llama-tiny" / "packed"), "--out", str(out), "--device", "cpu", "--gpus", "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    marker = f".{out.name}.xpuinject-"
    deadline = time.time() + 120
    while len(drivers(marker)) < 3 and time.time() < deadline:  # torchrun and its two workers
        time.sleep(0.2)
    live = drivers(marker)
    assert len(live) == 3, f"torchrun and two workers did not start: {live}"
    time.sleep(2)
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    deadline = time.time() + 10
    while drivers(marker) and time.time() < deadline:
        time.sleep(0.2)
    left = drivers(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes outlived the CLI: {left}"
