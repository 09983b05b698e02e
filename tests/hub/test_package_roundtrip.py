"""Round trip through the test Hub, as a user with only `kernels`, `transformers` and
`huggingface_hub` would take it:

1. `xpuinject org/llama-odd --push` (HF_ENDPOINT at cmd/hubtestserver, which serves the fixture
   as a Hub model): fetch, plan, pack, package, eval on the CPU, then publish the kernel package
   (repo type kernel) and the packed weights (a model repo).
2. A fresh Python process with xpuinject's sources off sys.path (`python -I -S`, cwd a temp dir,
   site-packages added by hand so the editable install's finder never runs, and
   `xpuinject_kernels` asserted not importable) downloads both repos and runs the packed card's
   usage snippet as written (device "cpu" for "cuda": the kernels run under the Triton
   interpreter): get_kernel(..., trust_remote_code=True) and inject(model, packed=<repo id>).
3. Its logits equal those of the local route (the run folder's package via get_local_kernel and
   its packed folder) bit for bit, and are within the pipeline's accuracy thresholds of stock.

Then the bad inputs, each with the message a user needs: packed weights made for another model,
packed weights whose plan is not the package's, a repo that does not exist, and a private repo
with no token.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"
TOKEN = "hf_roundTripToken"
SOURCE = "org/llama-odd"
KERNEL = "org/xpuinject-llama-odd"
PACKED = KERNEL + "-packed"
SITE = os.path.realpath(site.getsitepackages()[0])

# Runs first in every fresh process: site-packages by hand (no .pth, so no editable finder), and
# proof that the xpuinject sources are not what the process can import.
PRELUDE = textwrap.dedent(
    f"""\
    import sys
    sys.path.append({SITE!r})
    import importlib.util, json, os
    assert importlib.util.find_spec("xpuinject_kernels") is None, "xpuinject_kernels is importable"
    assert not any("kernels/python" in p or "harness/python" in p for p in sys.path), sys.path
    assert not any(k.startswith("__editable__") for k in sys.modules), "an editable finder ran"
    import torch, transformers
    from huggingface_hub import hf_hub_download, snapshot_download
    IDS = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(5))
    def logits(model):
        with torch.no_grad():
            return model(input_ids=IDS).logits.float()
    """
)

HUB_ROUTE = PRELUDE + textwrap.dedent(
    """\
    out = sys.argv[1]
    kernel_snap = snapshot_download(%(kernel)r, repo_type="kernel", revision="v1")
    packed_snap = snapshot_download(%(packed)r)
    card = open(hf_hub_download(%(packed)r, "README.md")).read()
    snippet = card.split("```python\\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(snippet.replace('"cuda"', '"cpu"'), scope)  # the card's usage, as written, on the CPU
    model, xpuinject = scope["model"], scope["xpuinject"]
    from transformers import AutoModelForCausalLM
    stock = AutoModelForCausalLM.from_pretrained(%(source)r, revision=%(revision)r, dtype=torch.bfloat16).eval()
    oracle = AutoModelForCausalLM.from_pretrained(%(source)r, revision=%(revision)r, dtype=torch.float32).eval()
    torch.save({"injected": logits(model), "stock": logits(stock), "oracle": logits(oracle)}, out)
    print(json.dumps({
        "snippet": snippet,
        "card": card,
        "package_file": xpuinject.__file__,
        "kernel_snapshot": kernel_snap,
        "packed_snapshot": sorted(os.listdir(packed_snap)),
        "released": type(model.model.layers[0].self_attn.q_proj).__name__,
        "bound": model.model.layers[0].forward.__func__.__qualname__,
    }))
    """
)

LOCAL_ROUTE = PRELUDE + textwrap.dedent(
    """\
    from kernels import get_local_kernel
    from transformers import AutoModelForCausalLM
    run, out = sys.argv[1], sys.argv[2]
    xpuinject = get_local_kernel(__import__("pathlib").Path(run) / "package", backend="cuda" if torch.version.cuda else None)
    model = AutoModelForCausalLM.from_pretrained(%(source)r, revision=%(revision)r, dtype=torch.bfloat16).eval()
    summary = xpuinject.inject(model, packed=run + "/packed")
    torch.save({"injected": logits(model)}, out)
    print(json.dumps(summary))
    """
)

BAD_INPUTS = PRELUDE + textwrap.dedent(
    """\
    from kernels import get_kernel
    from transformers import AutoModelForCausalLM
    token = sys.argv[1]
    xpuinject = get_kernel(%(kernel)r, version=1, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(%(source)r, revision=%(revision)r, dtype=torch.bfloat16).eval()
    cases = {
        "private, no token": dict(packed=%(other_plan)r),
        "other model": dict(packed=%(other_model)r, token=token),
        "other plan": dict(packed=%(other_plan)r, token=token),
        "missing repo": dict(packed="org/no-such-packed", token=token),
    }
    errors = {}
    for name, kw in cases.items():
        try:
            xpuinject.inject(model, **kw)
            errors[name] = None
        except xpuinject.InjectError as e:
            errors[name] = str(e)
    untouched = not any("forward" in m.__dict__ for m in model.modules())
    summary = xpuinject.inject(model, packed=%(packed)r, token=token)  # the right one still works
    print(json.dumps({"errors": errors, "untouched": untouched, "replaced": summary["replaced"]}))
    """
)


def fresh_python(script: str, cwd: Path, env: dict, *args) -> dict:
    path = cwd / "script.py"
    path.write_text(script)
    r = subprocess.run([sys.executable, "-I", "-S", str(path), *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-6000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def clean_env(home: Path, **extra) -> dict:
    """No PYTHON* or HF_* from the test's environment: only what a user's shell would set. Not
    HF_HUB_DISABLE_TELEMETRY: with it kernels 0.17.2 hands huggingface_hub an empty user agent,
    which ends the User-Agent header in "; " and httpx refuses to send it (kernels hf_hub.py
    _get_hf_api; the same header bug as huggingface/kernels pull request 510)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TRITON_INTERPRET": "1", "HF_HOME": str(home / "hf"),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    env.update(extra)
    return env


def xpuinject(env: dict, *args, timeout=600):
    r = subprocess.run([str(BIN), *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-6000:]
    return r


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    tmp = tmp_path_factory.mktemp("roundtrip")
    server_bin = tmp / "hubtestserver"
    subprocess.run(["go", "build", "-o", str(server_bin), "./cmd/hubtestserver"], cwd=ROOT, check=True,
                   env=dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-buildvcs=false"))
    srv = subprocess.Popen([str(server_bin), "--repo", f"{SOURCE}={FIXTURES / 'llama-odd'}", "--token", TOKEN],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = srv.stdout.readline().strip()
        if not url.startswith("http://"):
            pytest.fail(f"hubtestserver did not start: {url!r} {srv.stderr.read()}")
        yield url, tmp
    finally:
        srv.stdin.close()  # it exits when its stdin closes
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


@pytest.fixture(scope="module")
def published(hub):
    """The pipeline with --push, plus two more packed repos for the bad-input cases."""
    url, tmp = hub
    env = clean_env(tmp / "publisher", HF_ENDPOINT=url, HF_TOKEN=TOKEN)
    run = tmp / "run"
    r = xpuinject(env, SOURCE, "--push", "--repo-id", KERNEL, "--device", "cpu", "--out", run)
    assert f"published  {url}/{PACKED} (packed weights)" in r.stdout, r.stdout
    plan = (run / "packed" / "plan.yaml").read_text()
    revision = re.search(r"revision: ([0-9a-f]{40})", plan).group(1)
    # packed weights for another model (a local fixture), and for the same model with another plan (private)
    xpuinject(env, FIXTURES / "llama-tiny", "--skip-eval", "--out", tmp / "other-model")
    xpuinject(env, "push", tmp / "other-model", "--repo-id", "org/other-model", "--source-repo-id", "org/llama-tiny")
    xpuinject(env, SOURCE, "--skip-eval", "--disable", "add-rmsnorm", "--out", tmp / "other-plan")
    xpuinject(env, "push", tmp / "other-plan", "--repo-id", "org/other-plan", "--private")
    return url, tmp, run, revision


def test_published_package_works_without_xpuinject(published):
    url, tmp, run, revision = published
    names = dict(kernel=KERNEL, packed=PACKED, source=SOURCE, revision=revision)
    (tmp / "user").mkdir()
    user_env = clean_env(tmp / "user", HF_ENDPOINT=url)  # a public repo: no token needed
    hub_out = fresh_python(HUB_ROUTE % names, tmp / "user", user_env, tmp / "hub.pt")
    (tmp / "local").mkdir()
    local_out = fresh_python(LOCAL_ROUTE % names, tmp / "local", clean_env(tmp / "local", HF_ENDPOINT=url), run, tmp / "local.pt")

    # the card's snippet names what was published, and it ran as written
    assert f'get_kernel("{KERNEL}", version=1, trust_remote_code=True)' in hub_out["snippet"]
    assert f'inject(model, packed="{PACKED}")' in hub_out["snippet"]
    assert f'from_pretrained("{SOURCE}", revision="{revision}"' in hub_out["snippet"]
    assert hub_out["package_file"].startswith(hub_out["kernel_snapshot"]) and str(tmp / "user") in hub_out["package_file"]
    assert hub_out["packed_snapshot"] == ["README.md", "config.json", "generation_config.json", "model.safetensors", "plan.yaml",
                                          "tokenizer.json", "tokenizer_config.json"]
    assert hub_out["released"] == "Released" and hub_out["bound"] == "DecoderLayer.forward"
    assert local_out["packed"].endswith("/packed") and local_out["replaced"] == {"Attention": 1, "DecoderLayer": 1, "LMHead": 1, "RMSNorm": 3, "SwiGLUMLP": 1}

    via_hub, local = torch.load(tmp / "hub.pt"), torch.load(tmp / "local.pt")
    assert torch.equal(via_hub["injected"], local["injected"]), "the Hub route computes other logits than the local route"
    inj, st, ref = via_hub["injected"], via_hub["stock"], via_hub["oracle"]
    assert not torch.equal(inj, st)

    def err(x):
        lp, lq = torch.log_softmax(ref.double(), -1), torch.log_softmax(x.double(), -1)
        return {"mean_abs": float((x - ref).abs().mean()), "kl": float((lp.exp() * (lp - lq)).sum(-1).mean()),
                "top1": float((x.argmax(-1) == ref.argmax(-1)).double().mean())}

    e_inj, e_st = err(inj), err(st)
    cos = torch.nn.functional.cosine_similarity(inj.flatten(), ref.flatten(), dim=0).item()
    assert cos >= 0.999 and e_inj["mean_abs"] <= 1.5 * e_st["mean_abs"] and e_inj["kl"] <= 1.5 * e_st["kl"], (cos, e_inj, e_st)
    assert e_inj["top1"] >= e_st["top1"] - 0.05, (e_inj, e_st)

    # the packed card names the source and records the eval of the run that published it
    card = hub_out["card"]
    assert f"The weights of `{SOURCE}` (revision `{revision}`)" in card
    assert "## Evaluation of the run that packed these weights (cpu, kernels under the Triton interpreter)" in card
    assert re.search(r"\| mean_abs \| [0-9.e-]+ \| [0-9.e-]+ \| [0-9.]+ \|", card), card
    assert "Latency was not measured: " in card


def test_bad_packed_inputs_are_named(published):
    url, tmp, run, revision = published
    names = dict(kernel=KERNEL, packed=PACKED, source=SOURCE, revision=revision,
                 other_model="org/other-model-packed", other_plan="org/other-plan-packed")
    (tmp / "bad").mkdir()
    out = fresh_python(BAD_INPUTS % names, tmp / "bad", clean_env(tmp / "bad", HF_ENDPOINT=url), TOKEN)
    e = out["errors"]
    print(json.dumps(e, indent=1))
    assert re.search(r"the packed weights in org/other-model-packed were made for \S+/llama-tiny \(llama\), "
                     rf"this package's plan for {SOURCE}@{revision} \(llama\)", e["other model"] or ""), e["other model"]
    assert re.search(r"the packed weights in org/other-plan-packed were packed from another plan than this package's "
                     r"\(their plan.yaml sha256 .*\): layers\[\d+\] \(model.layers.0.post_attention_layernorm\): kernel 'add-rmsnorm' here, 'rmsnorm'",
                     e["other plan"] or ""), e["other plan"]
    assert e["missing repo"] and "no repository org/no-such-packed on " + url in e["missing repo"] \
        and "that this token can read" in e["missing repo"], e["missing repo"]
    assert e["private, no token"] and "or it is private or gated and no Hub token is set" in e["private, no token"] \
        and "HF_TOKEN" in e["private, no token"], e["private, no token"]
    assert out["untouched"], "a refused inject changed the model"
    assert out["replaced"] == {"Attention": 1, "DecoderLayer": 1, "LMHead": 1, "RMSNorm": 3, "SwiGLUMLP": 1}
