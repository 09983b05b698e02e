"""torch.compile of injected fixture models: every kernel is a torch custom op of the package's
namespace, so dynamo traces a whole injected model as one graph (fullgraph=True: any graph break
fails) and the compiled model computes what the eager one computes, bit for bit, for a prefill
and a decode step on a KV cache. aot_eager runs the traced graph through AOTAutograd (fake
tensors, functionalization of the in-place RoPE) without a code generator, which on the CPU
keeps the kernels under Triton's interpreter; on a GPU the same tests run there. inductor and
mode="reduce-overhead" need a GPU (scripts/gpu_runtime_check.py --compiled)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles the same layer code again: without a reset the compiles of earlier
    tests count towards dynamo's recompile limit, which fullgraph=True turns into a failure."""
    torch._dynamo.reset()
    yield


def load(fixture, device, dtype=torch.bfloat16):
    cfg = transformers.AutoConfig.from_pretrained(FIXTURES / fixture)
    model = getattr(transformers, cfg.architectures[0]).from_pretrained(FIXTURES / fixture, dtype=dtype)
    return model.eval().to(device), cfg


def generate_two(model, cfg):
    """Prefill logits and the logits of one decode step fed the prefill's greedy tokens."""
    ids = torch.randint(3, cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(5)).to(model.device)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        step = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return out.logits, step.logits


def launches(llama_odd_pkg):
    return sum(llama_odd_pkg._backend.launch_counts.values())


def test_ops_live_in_the_packages_namespace(llama_odd_pkg):
    ns = llama_odd_pkg._ops.NAMESPACE
    assert ns == llama_odd_pkg.__name__  # the metadata id kernels imports the package under
    for op in ("rms_norm", "add_rms_norm", "apply_rope", "apply_rope_", "rope_cache_write", "gemm", "attention_prefill",
               "attention_decode", "rms_norm_gemm", "add_rms_norm_moe",
               "qkv_rope_cache_write"):
        assert getattr(getattr(torch.ops, ns), op).default is llama_odd_pkg._ops.op(op)
    assert torch.ops.__getattr__(ns).apply_rope_.default._schema.arguments[0].alias_info.is_write
    # the fused cache write declares the caches it writes (functionalization and cudagraphs need it)
    args = torch.ops.__getattr__(ns).rope_cache_write.default._schema.arguments
    assert [a.name for a in args if a.alias_info is not None and a.alias_info.is_write] == ["k_cache", "v_cache"]
    args = torch.ops.__getattr__(ns).qkv_rope_cache_write.default._schema.arguments
    assert [a.name for a in args if a.alias_info is not None and a.alias_info.is_write] == ["k_cache", "v_cache"]


@pytest.mark.parametrize("how", ["inject-packed", "kernelize"])
def test_compiled_text_model_equals_eager(llama_odd_run, llama_odd_pkg, how, device):
    fixture = "llama-odd" if how == "inject-packed" else "qwen3-tiny"
    model, cfg = load(fixture, device)
    if how == "inject-packed":
        summary = llama_odd_pkg.inject(model, packed=llama_odd_run / "packed")
        assert summary["packed_tensors"] > 0
    else:
        summary = llama_odd_pkg.kernelize(model)
    assert summary["replaced"]["Attention"] >= 1 and summary["replaced"]["DecoderLayer"] >= 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    before = launches(llama_odd_pkg)
    if how == "kernelize":  # compiled first: the layers pack the model's own weights inside the trace
        c_pre, c_step = generate_two(compiled, cfg)
        e_pre, e_step = generate_two(model, cfg)
    else:
        e_pre, e_step = generate_two(model, cfg)
        c_pre, c_step = generate_two(compiled, cfg)
    assert launches(llama_odd_pkg) > before
    assert torch.equal(c_pre, e_pre), float((c_pre.float() - e_pre.float()).abs().max())
    assert torch.equal(c_step, e_step), float((c_step.float() - e_step.float()).abs().max())
    stock, _ = load(fixture, device)
    s_pre, _ = generate_two(stock, cfg)
    assert not torch.equal(e_pre, s_pre)  # the injected model is not stock
    assert float((e_pre.float() - s_pre.float()).abs().max()) < 0.25


def test_compiled_vision_model_equals_eager(llama_odd_pkg, device):
    model, cfg = load("levit-tiny", device)
    summary = llama_odd_pkg.kernelize(model)
    assert summary["replaced"]["LinearBN"] >= 1
    x = torch.randn(2, 3, cfg.image_size, cfg.image_size, generator=torch.Generator().manual_seed(2)).bfloat16().to(device)
    with torch.no_grad():
        want = model(pixel_values=x).logits
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(pixel_values=x).logits
    assert torch.equal(got, want)


def test_kernelize_in_torch_compile_mode_binds_every_layer(llama_odd_pkg, device):
    from kernels import Mode

    a, _ = load("qwen3-tiny", device)
    b, _ = load("qwen3-tiny", device)
    inference = llama_odd_pkg.kernelize(a)
    compile_mode = llama_odd_pkg.kernelize(b, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
    assert compile_mode["replaced_modules"] == inference["replaced_modules"] and compile_mode["path"] == "kernels"
    assert all(getattr(llama_odd_pkg.layers, n).can_torch_compile for n in llama_odd_pkg.layers.__all__)
    with pytest.raises(llama_odd_pkg.InjectError, match="inference-only"):  # the layers have no backward
        llama_odd_pkg.kernelize(load("qwen3-tiny", device)[0], mode=Mode.TRAINING | Mode.TORCH_COMPILE)


@pytest.fixture
def marks_restored():
    """mark_transformers_classes marks transformers classes for the process; put them back."""
    import importlib

    saved = {}
    for arch in ("llama", "mistral", "qwen2", "qwen3", "levit"):
        mod = importlib.import_module(f"transformers.models.{arch}.modeling_{arch}")
        for cls in vars(mod).values():
            if isinstance(cls, type):
                saved[cls] = {k: cls.__dict__[k] for k in ("kernel_layer_name", "kernel_condition") if k in cls.__dict__}
    yield
    for cls, attrs in saved.items():
        for k in ("kernel_layer_name", "kernel_condition"):
            if k in attrs:
                setattr(cls, k, attrs[k])
            elif k in cls.__dict__:
                delattr(cls, k)


def test_kernels_kernelize_from_a_local_repository_in_compile_mode(llama_odd_run, llama_odd_pkg, marks_restored, device):
    """What a kernel-hub user writes: the package's marks, a mapping to its local folder (kernels'
    LocalLayerRepository), kernels.kernelize in Mode.INFERENCE | Mode.TORCH_COMPILE; then
    torch.compile traces the kernelized model whole."""
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping

    llama_odd_pkg.mark_transformers_classes()
    model, cfg = load("llama-odd", device)
    repo = llama_odd_run / "package"
    # kernel_mapping returns what use_kernel_mapping takes, as it is
    mapping = llama_odd_pkg.kernel_mapping(repo.resolve(), "llama", devices=(device,))
    assert mapping["xpuinject.Attention"] == {device: LocalLayerRepository(repo.resolve(), layer_name="Attention")}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device=device)
    bound = sorted(p for p, m in model.named_modules() if "forward" in m.__dict__)
    assert bound == sorted(p for p, layer in llama_odd_pkg.supported_bindings(model) if layer != "LMHead")
    e_pre, e_step = generate_two(model, cfg)
    c_pre, c_step = generate_two(torch.compile(model, fullgraph=True, backend="aot_eager"), cfg)
    assert torch.equal(c_pre, e_pre) and torch.equal(c_step, e_step)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_compiled_with_grad_mode_on(llama_odd_run, llama_odd_pkg, cache, device):
    """torch.compile outside no_grad, as a user calls a model by default: the trace sees no
    in-place write to a view autograd records, on the dynamic cache (the rope kernel) and on a
    static one (the fused RoPE + cache write, whose cache counter advances like stock's)."""
    model, cfg = load("llama-odd", device)
    llama_odd_pkg.inject(model, packed=llama_odd_run / "packed")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    ids = torch.randint(3, cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(5)).to(device)
    assert torch.is_grad_enabled()

    def run(m):
        c = transformers.StaticCache(config=cfg, max_cache_len=16) if cache == "static" else transformers.DynamicCache(config=cfg)
        pre = m(input_ids=ids, past_key_values=c, use_cache=True).logits
        step = m(input_ids=pre[:, -1:].argmax(-1), past_key_values=c, use_cache=True).logits
        return pre.detach(), step.detach(), c.get_seq_length()

    c_pre, c_step, c_len = run(compiled)
    e_pre, e_step, e_len = run(model)
    assert int(c_len) == int(e_len) == 10
    assert torch.equal(c_pre, e_pre) and torch.equal(c_step, e_step)


def test_kernel_mapping_and_kernel_config_mapping_for_a_hub_repo(llama_odd_pkg):
    """The two helpers, each in the form its consumer takes: kernels' LayerRepository per device
    for use_kernel_mapping, "repo:Layer" with the Hub arguments for transformers' KernelConfig."""
    from kernels import LayerRepository, use_kernel_mapping

    m = llama_odd_pkg.kernel_mapping("my-org/llama-xpu-kernels", "llama", trust_remote_code=True)
    assert sorted(m) == ["RMSNorm", "xpuinject.Attention", "xpuinject.DecoderLayer", "xpuinject.SwiGLUMLP"]
    want = LayerRepository("my-org/llama-xpu-kernels", layer_name="SwiGLUMLP", version=1, trust_remote_code=True)
    assert m["xpuinject.SwiGLUMLP"] == {"cuda": want, "xpu": want}
    with use_kernel_mapping(m, inherit_mapping=False):  # takes it (no Hub call until kernelize)
        pass
    kc = llama_odd_pkg.kernel_config_mapping("my-org/llama-xpu-kernels", "llama", revision="abc")
    assert kc["xpuinject.SwiGLUMLP"] == ("my-org/llama-xpu-kernels:SwiGLUMLP", {"trust_remote_code": False, "revision": "abc"})
    with pytest.raises(llama_odd_pkg.InjectError, match="kernel_mapping: 'not a repo' is neither"):
        llama_odd_pkg.kernel_mapping("not a repo", "llama")


@pytest.mark.parametrize("how", ["inject", "kernelize"])
def test_inject_and_kernelize_reserve_the_buffers_of_a_first_launch(llama_odd_run, llama_odd_pkg, how, device):
    """The device buffers a kernel takes at its first launch (the semaphores of the reductions
    across programs) exist once the model is injected: a first decode step inside a CUDA-graph
    capture or torch.compile's mode="reduce-overhead" must not allocate them in the graph's pool."""
    be = llama_odd_pkg._backend
    saved = dict(be._SEMAPHORES)  # an earlier test's graphs may hold these buffers' addresses
    be._SEMAPHORES.clear()
    try:
        model, _ = load("llama-odd", device)
        if how == "inject":
            llama_odd_pkg.inject(model, packed=llama_odd_run / "packed")
        else:
            llama_odd_pkg.kernelize(model)
        d = next(model.parameters()).device
        assert list(be._SEMAPHORES) == [(d.type, d.index)]
        assert be._SEMAPHORES[(d.type, d.index)].shape == (be.SEMAPHORES,)
    finally:
        be._SEMAPHORES.clear()
        be._SEMAPHORES.update(saved)


# A fresh process (no buffer of an earlier test): an eager prefill on a static cache, then decode
# steps under torch.compile(mode="reduce-overhead") from the first one on.
_FIRST_DECODE_COMPILED = r"""
import sys, torch, transformers
from pathlib import Path
from kernels import get_local_kernel
pkg = get_local_kernel(Path(sys.argv[1]), backend="cuda")
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.bfloat16).eval().to("cuda")
pkg.inject(model, packed=sys.argv[3])
cache = pkg.runtime.static_cache(model.config, 64)
ids = torch.randint(3, model.config.vocab_size, (1, 9), device="cuda")
with torch.no_grad():
    tok = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
def step(tok, pos):
    out = model(input_ids=tok, position_ids=pos, past_key_values=cache, use_cache=True)
    return out.logits[:, -1].float().argmax(-1, keepdim=True)
fn = torch.compile(step, mode="reduce-overhead", fullgraph=True)
pos = torch.full((1, 1), 9, device="cuda")
with torch.no_grad():
    for _ in range(5):
        tok = fn(tok, pos).clone()
        pos.add_(1)
torch.cuda.synchronize()
print("ok")
"""


def test_a_first_decode_step_compiled_with_cuda_graphs_runs(llama_odd_run, device):
    if device == "cpu":
        pytest.skip("torch.compile's CUDA graphs need a GPU")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _FIRST_DECODE_COMPILED, str(llama_odd_run / "package"),
                        str(FIXTURES / "llama-odd"), str(llama_odd_run / "packed")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
