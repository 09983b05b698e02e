"""Kernel-hub layers bound to real transformers modules (the way kernelize binds them), with the
packed attributes computed here in torch or packed by the layers from the module's own weights,
compared with the original forward; plus the real `kernels` package's layer validation on every
class."""

import pytest
import torch
from kernels.layer.layer import _replace_forward, _validate_layer
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, Qwen2Config, Qwen3Config
from transformers.models.levit.modeling_levit import LevitClassificationLayer, LevitConvEmbeddings, MLPLayerWithBN
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm
from transformers.models.mistral.modeling_mistral import MistralRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm

import metrics
from xpuinject_kernels import _backend, layers
from xpuinject_kernels.contract import packed_attr

BF16_ULP = 2.0**-7


def bind(module, layer_cls):
    """Exactly what kernels.kernelize does to a module: forward = MethodType(layer.forward, module)."""
    _replace_forward(module, layer_cls)
    return module


def llama_cfg(**kw):
    base = dict(hidden_size=64, intermediate_size=88, num_attention_heads=4, num_key_value_heads=2,
                num_hidden_layers=2, vocab_size=97, max_position_embeddings=64, rms_norm_eps=1e-5)
    base.update(kw)
    return LlamaConfig(**base)


def coord_like(t, a, b, scale):
    return (scale * metrics.coord_tensor(tuple(t.shape), a=a, b=b)).to(t.dtype)


def pack_mlp(mlp):
    """What the Go packer writes for a SwiGLU MLP: [gate | up] concatenated on the output dim,
    transposed to K-major, bf16."""
    gu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], dim=0)  # [2I, H]
    attach(mlp, "SwiGLUMLP", "gate_up_weight", gu.t().contiguous().to(torch.bfloat16))
    attach(mlp, "SwiGLUMLP", "down_weight", mlp.down_proj.weight.t().contiguous().to(torch.bfloat16))
    if mlp.gate_proj.bias is not None:
        attach(mlp, "SwiGLUMLP", "gate_up_bias", torch.cat([mlp.gate_proj.bias, mlp.up_proj.bias]).to(torch.bfloat16))
        attach(mlp, "SwiGLUMLP", "down_bias", mlp.down_proj.bias.to(torch.bfloat16))


def attach(module, layer, role, t):
    """What injection does with an offline-packed tensor: the attribute contract.json names."""
    setattr(module, packed_attr(layer, role), t)


LAYER_TARGETS = [
    (layers.RMSNorm, LlamaRMSNorm),
    (layers.RMSNorm, MistralRMSNorm),
    (layers.RMSNorm, Qwen2RMSNorm),
    (layers.RMSNorm, Qwen3RMSNorm),
    (layers.SwiGLUMLP, LlamaMLP),
    (layers.SwiGLUMLP, Qwen3MLP),
    (layers.Linear, nn.Linear),
    (layers.LMHead, nn.Linear),
    (layers.LinearBN, MLPLayerWithBN),
    (layers.BNLinear, LevitClassificationLayer),
    (layers.ConvBN, LevitConvEmbeddings),
]


@pytest.mark.parametrize("layer_cls,target", LAYER_TARGETS, ids=lambda c: c.__name__)
def test_kernels_package_validates_layer(layer_cls, target):
    # raises TypeError on an __init__, extra members or a forward signature mismatch
    _validate_layer(check_cls=target, cls=layer_cls, repo=f"xpuinject:{layer_cls.__name__}")
    assert layer_cls.has_backward is False


def test_kernels_validation_rejects_bad_layers():
    """The validator we rely on really checks what we think it checks."""

    class WithInit(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, hidden_states):
            return hidden_states

    class WithHelper(nn.Module):
        def helper(self):
            return 1

        def forward(self, hidden_states):
            return hidden_states

    class WrongArity(nn.Module):
        def forward(self, hidden_states, extra):
            return hidden_states

    for bad in (WithInit, WithHelper, WrongArity):
        with pytest.raises(TypeError):
            _validate_layer(check_cls=LlamaRMSNorm, cls=bad, repo="bad")


@pytest.mark.parametrize("norm_cls", [LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm])
def test_rmsnorm_layer(device, norm_cls):
    torch.manual_seed(1)
    ref = norm_cls(70, eps=1e-6).to(torch.bfloat16).to(device)
    with torch.no_grad():
        ref.weight.copy_(coord_like(ref.weight, 0.0, 0.3, 0.5) + 1.0)
    mod = norm_cls(70, eps=1e-6).to(torch.bfloat16).to(device)
    mod.load_state_dict(ref.state_dict())
    bind(mod, layers.RMSNorm)
    x = (3.0 * metrics.coord_tensor((2, 5, 70))).to(torch.bfloat16).to(device)
    before = _backend.launch_counts["rms_norm"]
    y = mod(x)
    assert _backend.launch_counts["rms_norm"] == before + 1, "the Triton kernel did not run"
    metrics.assert_close(f"layer RMSNorm ({norm_cls.__name__})", y, ref(x), atol=1e-6, rtol=BF16_ULP)


@pytest.mark.parametrize("mlp_bias", [False, True])
def test_swiglu_mlp_layer(device, mlp_bias):
    torch.manual_seed(2)
    cfg = llama_cfg(mlp_bias=mlp_bias)
    ref = LlamaMLP(cfg).to(torch.bfloat16).to(device).eval()
    mod = LlamaMLP(cfg).to(torch.bfloat16).to(device).eval()
    mod.load_state_dict(ref.state_dict())
    pack_mlp(mod)
    bind(mod, layers.SwiGLUMLP)
    x = torch.randn(3, 7, 64).to(torch.bfloat16).to(device)
    before = _backend.launch_counts["gemm.swiglu"], _backend.launch_counts["gemm.bias" if mlp_bias else "gemm.none"]
    with torch.no_grad():
        y, y_ref = mod(x), ref(x)
        # fp32 end-to-end reference from the same (bf16) weights and input
        y32 = nn.functional.linear(
            nn.functional.silu(nn.functional.linear(x.float(), ref.gate_proj.weight.float(), None if not mlp_bias else ref.gate_proj.bias.float()))
            * nn.functional.linear(x.float(), ref.up_proj.weight.float(), None if not mlp_bias else ref.up_proj.bias.float()),
            ref.down_proj.weight.float(), None if not mlp_bias else ref.down_proj.bias.float())
    after = _backend.launch_counts["gemm.swiglu"], _backend.launch_counts["gemm.bias" if mlp_bias else "gemm.none"]
    assert after == (before[0] + 1, before[1] + 1), "expected one swiglu GEMM and one down GEMM"
    assert y.shape == y_ref.shape == (3, 7, 64) and y.dtype == torch.bfloat16
    scale = y32.abs().max().item()
    # stock bf16 rounds gate, up, silu and the product; we round the intermediate once: both are
    # a few bf16 ulps from fp32
    metrics.assert_close(f"layer SwiGLUMLP bias={mlp_bias} vs LlamaMLP bf16", y, y_ref, atol=2e-2 * scale, rtol=2e-2, min_cosine=0.999)
    m_ours = metrics.assert_close(f"layer SwiGLUMLP bias={mlp_bias} vs fp32", y, y32, atol=2e-2 * scale, rtol=2e-2, min_cosine=0.9995)
    m_base = metrics.report(f"stock bf16 LlamaMLP bias={mlp_bias} vs fp32", y_ref, y32)
    # injected error no worse than ~stock bf16's own error
    assert m_ours.mean_abs <= 1.5 * m_base.mean_abs + 1e-6, (m_ours.line(), m_base.line())


def test_swiglu_mlp_layer_packs_its_own_weights(device):
    """Bound without packed tensors, the layer packs gate|up and down from the module's own
    projections on first use: the same tensors and output as the torch-packed module."""
    torch.manual_seed(2)
    ref = LlamaMLP(llama_cfg()).to(torch.bfloat16).to(device)
    mod = LlamaMLP(llama_cfg()).to(torch.bfloat16).to(device)
    mod.load_state_dict(ref.state_dict())
    pack_mlp(ref)
    bind(ref, layers.SwiGLUMLP)
    bind(mod, layers.SwiGLUMLP)
    x = torch.randn(1, 5, 64).to(torch.bfloat16).to(device)
    with torch.no_grad():
        want, got = ref(x), mod(x)
    assert torch.equal(mod.xpuinject_gate_up_weight, ref.xpuinject_gate_up_weight)
    assert torch.equal(mod.xpuinject_down_weight, ref.xpuinject_down_weight)
    assert "xpuinject_down_weight" in mod._non_persistent_buffers_set and "xpuinject_down_weight" not in mod.state_dict()
    assert torch.equal(got, want)
    mod2 = LlamaMLP(llama_cfg(hidden_act="gelu")).to(torch.bfloat16).to(device)
    pack_mlp(mod2)
    bind(mod2, layers.SwiGLUMLP)
    with pytest.raises(RuntimeError, match="hidden_act='gelu'"):
        mod2(torch.randn(1, 2, 64).to(torch.bfloat16).to(device))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_layer(device, bias):
    torch.manual_seed(3)
    ref = nn.Linear(70, 45, bias=bias).to(torch.bfloat16).to(device)
    mod = nn.Linear(70, 45, bias=bias).to(torch.bfloat16).to(device)
    mod.load_state_dict(ref.state_dict())
    attach(mod, "Linear", "weight", mod.weight.t().contiguous())
    if bias:
        attach(mod, "Linear", "bias", mod.bias.detach().clone())
    bind(mod, layers.Linear)
    # 21 rows (past gemv.MAX_M: the tiled kernel), K=70: misaligned rows -> block pointers
    x = (2.0 * metrics.coord_tensor((3, 7, 70))).to(torch.bfloat16).to(device)
    before = _backend.launch_counts["gemm.blockptr"]
    with torch.no_grad():
        y, y_ref = mod(x), ref(x)
    assert _backend.launch_counts["gemm.blockptr"] == before + 1
    y32 = nn.functional.linear(x.float(), ref.weight.float(), ref.bias.float() if bias else None)
    scale = y32.abs().max().item()
    metrics.assert_close(f"layer Linear bias={bias} vs nn.Linear bf16", y, y_ref, atol=1e-2 * scale, rtol=2 * BF16_ULP)
    metrics.assert_close(f"layer Linear bias={bias} vs fp32", y, y32, atol=1e-2 * scale, rtol=BF16_ULP, min_cosine=0.9999)
    # without the packed tensor the layer packs it from the module's own weight: same output
    delattr(mod, packed_attr("Linear", "weight"))
    if bias:
        delattr(mod, packed_attr("Linear", "bias"))
    with torch.no_grad():
        assert torch.equal(mod(x), y)


def test_lm_head_layer_returns_fp32_logits(device):
    """LMHead reads the nn.Linear weight in place (weight.t(): a tied embedding needs no copy) and
    returns the fp32 accumulator: within fp32 summation noise of the exact product of its bf16
    operands, where stock's bf16 logits are a rounding away."""
    torch.manual_seed(5)
    head = nn.Linear(72, 300, bias=False).to(torch.bfloat16).to(device)
    ref = nn.Linear(72, 300, bias=False).to(torch.bfloat16).to(device)
    ref.load_state_dict(head.state_dict())
    bind(head, layers.LMHead)
    x = (3.0 * metrics.coord_tensor((2, 5, 72))).to(torch.bfloat16).to(device)
    with torch.no_grad():
        y, y_stock = head(x), ref(x)
    assert y.dtype == torch.float32 and y.shape == (2, 5, 300)
    exact = x.double() @ head.weight.double().t()
    scale = exact.abs().max().item()
    metrics.assert_close("LMHead vs exact", y, exact, atol=1e-5 * scale, rtol=1e-5)
    assert (y_stock.double() - exact).abs().max().item() > 10 * (y.double() - exact).abs().max().item()


def test_lm_head_keeps_the_order_of_logits_that_bf16_ties(device):
    """The greedy-divergence mechanism on real weights, reduced to one position: two candidates
    the exact product orders 0.06 apart at |logit| ~ 20, where bf16's spacing is 0.125. Stock's
    bf16 logits tie, and argmax takes the lower token id (the wrong one); LMHead's fp32 logits
    keep the exact order."""
    hidden = 64
    x = torch.zeros(1, hidden, dtype=torch.bfloat16)
    x[0, 0] = 1.0
    x[0, 1] = 1.0 / 64
    w = torch.zeros(8, hidden, dtype=torch.bfloat16)
    w[3, 0] = 20.0  # token 3: 20.0
    w[5, 0], w[5, 1] = 20.0, 4.0  # token 5: 20.0 + 4/64 = 20.0625, the true argmax
    x = x.to(device)
    head = nn.Linear(hidden, 8, bias=False).to(torch.bfloat16).to(device)
    with torch.no_grad():
        head.weight.copy_(w)
        stock = head(x)
    assert stock[0, 3] == stock[0, 5] and int(stock.argmax()) == 3  # the bf16 tie, lower id wins
    bind(head, layers.LMHead)
    with torch.no_grad():
        y = head(x)
    assert float(y[0, 5] - y[0, 3]) == pytest.approx(0.0625) and int(y.argmax()) == 5


def random_bn(bn):
    with torch.no_grad():
        n = bn.num_features
        bn.weight.copy_(1.0 + 0.3 * torch.sin(torch.arange(n) * 0.7))
        bn.bias.copy_(0.2 * torch.cos(torch.arange(n) * 0.3))
        bn.running_mean.copy_(0.5 * torch.sin(torch.arange(n) * 0.9))
        bn.running_var.copy_(0.5 + torch.rand(n))


def test_linear_bn_layer_levit(device):
    torch.manual_seed(4)
    ref = MLPLayerWithBN(48, 80).eval()
    random_bn(ref.batch_norm)
    mod = MLPLayerWithBN(48, 80).eval()
    mod.load_state_dict(ref.state_dict())
    # BN folded offline (fp32), then packed K-major bf16: what the Go packer writes
    fused = torch.nn.utils.fuse_linear_bn_eval(ref.linear, ref.batch_norm)
    attach(mod, "LinearBN", "weight", fused.weight.detach().t().contiguous().to(torch.bfloat16).to(device))
    attach(mod, "LinearBN", "bias", fused.bias.detach().to(torch.bfloat16).to(device))
    mod.to(device)
    bind(mod, layers.LinearBN)
    x = torch.randn(2, 16, 48)
    before = _backend.launch_counts["gemm.bias"]
    with torch.no_grad():
        y = mod(x.to(torch.bfloat16).to(device))
        y_ref = ref(x)  # fp32 LeViT: the user's quality
        y_ref_bf16 = ref.to(torch.bfloat16)(x.to(torch.bfloat16)).float()
    assert _backend.launch_counts["gemm.bias"] == before + 1
    assert y.shape == (2, 16, 80)
    scale = y_ref.abs().max().item()
    m = metrics.assert_close("layer LinearBN vs fp32 MLPLayerWithBN", y, y_ref, atol=3e-2 * scale, rtol=3e-2, min_cosine=0.9995)
    m_base = metrics.report("stock bf16 MLPLayerWithBN vs fp32", y_ref_bf16, y_ref)
    assert m.mean_abs <= 2.0 * m_base.mean_abs + 1e-6, (m.line(), m_base.line())
    mod.train()
    with pytest.raises(RuntimeError, match="training mode"):
        mod(x.to(torch.bfloat16).to(device))
    # bound to a bf16 module with no packed tensors, the layer folds the BatchNorm itself
    own = MLPLayerWithBN(48, 80).eval()
    own.load_state_dict(ref.state_dict())
    own = bind(own.to(torch.bfloat16).to(device), layers.LinearBN)
    with torch.no_grad():
        y_own = own(x.to(torch.bfloat16).to(device))
    m_own = metrics.assert_close("layer LinearBN packed from its own bf16 weights vs fp32", y_own, y_ref, atol=3e-2 * scale,
                                 rtol=3e-2, min_cosine=0.9995)
    assert m_own.mean_abs <= 2.0 * m_base.mean_abs + 1e-6, (m_own.line(), m_base.line())


def test_conv_bn_layer_levit_embedding(device):
    """LevitConvEmbeddings: the BatchNorm folded into the convolution (torch's own fusion here, the
    layer's fold when nothing was attached); stock conv2d runs on the folded bf16 tensors."""
    torch.manual_seed(6)
    ref = LevitConvEmbeddings(3, 16, kernel_size=3, stride=2, padding=1).eval()
    random_bn(ref.batch_norm)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        y_ref = ref(x)
        y_ref_bf16 = ref.to(torch.bfloat16)(x.to(torch.bfloat16)).float()
    ref.float()
    fused = torch.nn.utils.fuse_conv_bn_eval(ref.convolution, ref.batch_norm)
    attached = LevitConvEmbeddings(3, 16, kernel_size=3, stride=2, padding=1).eval()
    attached.load_state_dict(ref.state_dict())
    attach(attached, "ConvBN", "weight", fused.weight.detach().to(torch.bfloat16).to(device))
    attach(attached, "ConvBN", "bias", fused.bias.detach().to(torch.bfloat16).to(device))
    own = LevitConvEmbeddings(3, 16, kernel_size=3, stride=2, padding=1).eval()
    own.load_state_dict(ref.state_dict())
    m_base = metrics.report("stock bf16 LevitConvEmbeddings vs fp32", y_ref_bf16, y_ref)
    for name, mod in (("attached", attached), ("own", own.to(torch.bfloat16))):
        bind(mod.to(device), layers.ConvBN)
        with torch.no_grad():
            y = mod(x.to(torch.bfloat16).to(device))
        assert y.dtype == torch.bfloat16 and y.shape == y_ref.shape
        m = metrics.assert_close(f"layer ConvBN ({name}) vs fp32", y, y_ref, atol=3e-2 * y_ref.abs().max().item(),
                                 rtol=3e-2, min_cosine=0.9995)
        assert m.mean_abs <= 2.0 * m_base.mean_abs + 1e-6, (m.line(), m_base.line())
    own.train()
    with pytest.raises(RuntimeError, match="training mode"):
        own(x.to(torch.bfloat16).to(device))


def test_bn_linear_layer_levit_head(device):
    torch.manual_seed(5)
    ref = LevitClassificationLayer(64, 10).eval()
    random_bn(ref.batch_norm)
    mod = LevitClassificationLayer(64, 10).eval()
    mod.load_state_dict(ref.state_dict())
    # BN then Linear: W' = W diag(s), b' = b + W (beta - s*mu), s = gamma / sqrt(var + eps)
    bn, lin = ref.batch_norm, ref.linear
    s = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)
    w_f = lin.weight.detach().double() * s[None, :]
    b_f = lin.bias.detach().double() + lin.weight.detach().double() @ (bn.bias.detach().double() - s * bn.running_mean.double())
    attach(mod, "BNLinear", "weight", w_f.t().contiguous().to(torch.bfloat16).to(device))
    attach(mod, "BNLinear", "bias", b_f.to(torch.bfloat16).to(device))
    mod.to(device)
    bind(mod, layers.BNLinear)
    x = torch.randn(3, 64)
    before = _backend.launch_counts["gemm.bias"]
    with torch.no_grad():
        y = mod(x.to(torch.bfloat16).to(device))
        y_ref = ref(x)
    assert _backend.launch_counts["gemm.bias"] == before + 1
    assert y.shape == (3, 10)
    scale = y_ref.abs().max().item()
    metrics.assert_close("layer BNLinear vs fp32 LevitClassificationLayer", y, y_ref, atol=3e-2 * scale, rtol=3e-2, min_cosine=0.9995)


def test_tiny_llama_end_to_end(device):
    """All RMSNorms and MLPs of a tiny bf16 Llama replaced: logits stay close to stock bf16."""
    torch.manual_seed(6)
    cfg = llama_cfg()
    ref = LlamaForCausalLM(cfg).to(torch.bfloat16).to(device).eval()
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).to(device).eval()
    model.load_state_dict(ref.state_dict())
    n_norm = n_mlp = 0
    for name, m in model.named_modules():
        if isinstance(m, LlamaRMSNorm):
            bind(m, layers.RMSNorm)
            n_norm += 1
        elif isinstance(m, LlamaMLP):
            m.xpuinject_name = name
            pack_mlp(m)
            bind(m, layers.SwiGLUMLP)
            n_mlp += 1
    assert (n_norm, n_mlp) == (2 * cfg.num_hidden_layers + 1, cfg.num_hidden_layers)
    ids = torch.tensor([[1, 5, 9, 13, 17, 21, 25, 29]], device=device)
    before = _backend.launch_counts["rms_norm"], _backend.launch_counts["gemm.swiglu"]
    with torch.no_grad():
        logits = model(ids).logits.float()
        logits_ref = ref(ids).logits.float()
    assert _backend.launch_counts["rms_norm"] - before[0] == n_norm
    assert _backend.launch_counts["gemm.swiglu"] - before[1] == n_mlp
    m = metrics.report("tiny llama logits injected vs stock bf16", logits, logits_ref)
    assert m.cosine > 0.999, m.line()
    assert (logits.argmax(-1) == logits_ref.argmax(-1)).float().mean() >= 0.75


@pytest.mark.parametrize("cfg_cls,mlp_mod", [(MistralConfig, "mistral"), (Qwen2Config, "qwen2"), (Qwen3Config, "qwen3")])
def test_swiglu_mlp_other_archs(device, cfg_cls, mlp_mod):
    import importlib

    modeling = importlib.import_module(f"transformers.models.{mlp_mod}.modeling_{mlp_mod}")
    mlp_cls = getattr(modeling, f"{mlp_mod.capitalize()}MLP")
    cfg = cfg_cls(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    ref = mlp_cls(cfg).to(torch.bfloat16).to(device).eval()
    mod = mlp_cls(cfg).to(torch.bfloat16).to(device).eval()
    mod.load_state_dict(ref.state_dict())
    pack_mlp(mod)
    bind(mod, layers.SwiGLUMLP)
    x = torch.randn(2, 5, 64).to(torch.bfloat16).to(device)
    with torch.no_grad():
        y, y_ref = mod(x), ref(x)
    scale = y_ref.float().abs().max().item()
    metrics.assert_close(f"layer SwiGLUMLP vs {mlp_cls.__name__}", y, y_ref, atol=2e-2 * scale, rtol=2e-2, min_cosine=0.999)
