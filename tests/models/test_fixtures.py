"""The tiny checkpoints in testdata/fixtures load in transformers and have the properties the other
tests rely on (sharding, tied embeddings, odd sizes, non-trivial norm/BatchNorm values, dtypes).

They are made by scripts/make_fixtures.py; test_fixtures_match_generator checks that the committed
files are exactly what the script produces.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"
PROSE = ROOT / "harness" / "python" / "prose.txt"

# name -> (model_type, architecture class, safetensors dtype of the weights)
TEXT = {
    "llama-tiny": ("llama", "LlamaForCausalLM", "F32"),
    "llama-sharded": ("llama", "LlamaForCausalLM", "F32"),
    "llama-odd": ("llama", "LlamaForCausalLM", "F16"),
    "mistral-tiny": ("mistral", "MistralForCausalLM", "F32"),
    "qwen2-tiny": ("qwen2", "Qwen2ForCausalLM", "BF16"),
    "qwen3-tiny": ("qwen3", "Qwen3ForCausalLM", "F32"),
    "gemma2-tiny": ("gemma2", "Gemma2ForCausalLM", "F32"),
    "gemma3-tiny": ("gemma3_text", "Gemma3ForCausalLM", "BF16"),
    "phi3-tiny": ("phi3", "Phi3ForCausalLM", "BF16"),
    "qwen3-moe-tiny": ("qwen3_moe", "Qwen3MoeForCausalLM", "BF16"),
    "mixtral-tiny": ("mixtral", "MixtralForCausalLM", "BF16"),
    "smollm3-tiny": ("smollm3", "SmolLM3ForCausalLM", "BF16"),
    "granite-tiny": ("granite", "GraniteForCausalLM", "BF16"),
    "gemma-tiny": ("gemma", "GemmaForCausalLM", "BF16"),
    "olmo2-tiny": ("olmo2", "Olmo2ForCausalLM", "BF16"),
    "olmo3-tiny": ("olmo3", "Olmo3ForCausalLM", "BF16"),
    "qwen2-moe-tiny": ("qwen2_moe", "Qwen2MoeForCausalLM", "BF16"),
    "glm4-tiny": ("glm4", "Glm4ForCausalLM", "BF16"),
    "glm-tiny": ("glm", "GlmForCausalLM", "BF16"),
    "flex_olmo-tiny": ("flex_olmo", "FlexOlmoForCausalLM", "BF16"),
    "granitemoe-tiny": ("granitemoe", "GraniteMoeForCausalLM", "BF16"),
    "olmoe-tiny": ("olmoe", "OlmoeForCausalLM", "BF16"),
    "ernie4_5-tiny": ("ernie4_5", "Ernie4_5ForCausalLM", "BF16"),
    "seed_oss-tiny": ("seed_oss", "SeedOssForCausalLM", "BF16"),
    "exaone4-tiny": ("exaone4", "Exaone4ForCausalLM", "BF16"),
    "ministral-tiny": ("ministral", "MinistralForCausalLM", "BF16"),
    "hunyuan-tiny": ("hunyuan_v1_dense", "HunYuanDenseV1ForCausalLM", "BF16"),
    "helium-tiny": ("helium", "HeliumForCausalLM", "BF16"),
}
VISION = {"levit-tiny": ("levit", "LevitForImageClassificationWithTeacher", "F32")}
ALL = {**TEXT, **VISION}

SENTENCE = "The keeper wound the clockwork, and the light turned over the harbour all night."


def checkpoint_tensors(folder: Path) -> dict[str, tuple[str, list[int], str]]:
    """name -> (dtype, shape, file) read from the safetensors headers (sharded or not)."""
    files = sorted(folder.glob("*.safetensors"))
    assert files, f"{folder}: no .safetensors files"
    out = {}
    for f in files:
        with safe_open(f, "pt") as st:
            for k in st.keys():
                sl = st.get_slice(k)
                assert k not in out, f"{folder}: tensor {k} stored twice ({out[k][2]} and {f.name})"
                out[k] = (sl.get_dtype(), list(sl.get_shape()), f.name)
    return out


def load(name: str):
    cls = getattr(transformers, ALL[name][1])
    model = cls.from_pretrained(FIXTURES / name)
    model.eval()
    return model


def test_every_fixture_folder_is_known():
    on_disk = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    assert on_disk == sorted(ALL), "fixture folders and this test's table disagree"


def test_fixtures_total_size_budget():
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < 13 * 1024 * 1024, f"testdata/fixtures is {total / 2**20:.2f} MiB, budget is 13 MiB"


def test_dtypes_cover_fp32_fp16_bf16():
    seen = set()
    for name, (_, _, want) in ALL.items():
        dtypes = {d for d, _, _ in checkpoint_tensors(FIXTURES / name).values()}
        if name == "levit-tiny":
            dtypes.discard("I64")  # BatchNorm num_batches_tracked
        assert dtypes == {want}, f"{name}: tensor dtypes {dtypes}, want only {want}"
        seen |= dtypes
    assert {"F32", "F16", "BF16"} <= seen


@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_fixture_loads_and_runs(name):
    model_type, arch, _ = TEXT[name]
    folder = FIXTURES / name
    cfg = AutoConfig.from_pretrained(folder)
    assert cfg.model_type == model_type
    assert cfg.architectures == [arch]

    model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    assert type(model).__name__ == arch

    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == cfg.vocab_size == 512
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        cfg.bos_token_id,
        cfg.eos_token_id,
        cfg.pad_token_id,
    )
    ids = tok(SENTENCE, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == SENTENCE  # byte-level BPE is lossless
    assert 5 < len(ids) < len(SENTENCE)  # merges were learned
    assert all(0 <= i < cfg.vocab_size for i in ids)

    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=x).logits
    assert logits.shape == (1, len(ids), cfg.vocab_size)
    assert torch.isfinite(logits.float()).all()
    # Init range 0.1 makes logits peaked enough that a layout bug changes the argmax.
    assert logits.float().std() > 0.3, f"{name}: logits nearly uniform (std {logits.float().std():.3f})"

    # Weight shapes follow the config (GQA k/v, explicit head_dim).
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    sd = model.state_dict()
    hid, nh, nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    if model_type in ("glm", "glm4"):  # gate/up fused in the checkpoint; q/k/v apart, with biases
        assert sd["model.layers.0.self_attn.q_proj.weight"].shape == (nh * head_dim, hid)
        assert sd["model.layers.0.self_attn.k_proj.bias"].shape == (nkv * head_dim,)
        assert sd["model.layers.0.mlp.gate_up_proj.weight"].shape == (2 * cfg.intermediate_size, hid)
        assert head_dim * nh != hid and cfg.rope_parameters["partial_rotary_factor"] == 0.5
        return
    if model_type == "phi3":  # q/k/v and gate/up fused in the checkpoint
        assert sd["model.layers.0.self_attn.qkv_proj.weight"].shape == ((nh + 2 * nkv) * head_dim, hid)
        assert sd["model.layers.0.mlp.gate_up_proj.weight"].shape == (2 * cfg.intermediate_size, hid)
        return
    assert sd["model.layers.0.self_attn.q_proj.weight"].shape == (nh * head_dim, hid)
    assert sd["model.layers.0.self_attn.k_proj.weight"].shape == (nkv * head_dim, hid)
    assert sd["model.layers.0.self_attn.v_proj.weight"].shape == (nkv * head_dim, hid)
    assert sd["model.layers.0.self_attn.o_proj.weight"].shape == (hid, nh * head_dim)
    if model_type == "granitemoe":  # the experts stacked, under the names its checkpoints use
        experts, w = cfg.num_local_experts, cfg.intermediate_size
        assert sd["model.layers.0.block_sparse_moe.experts.gate_up_proj"].shape == (experts, 2 * w, hid)
        assert sd["model.layers.0.block_sparse_moe.experts.down_proj"].shape == (experts, hid, w)
        assert sd["model.layers.0.block_sparse_moe.router.weight"].shape == (experts, hid)
    elif model_type in ("qwen3_moe", "mixtral", "qwen2_moe", "olmoe", "flex_olmo"):  # layer 0 is sparse (experts checked below)
        experts = getattr(cfg, "num_experts", None) or cfg.num_local_experts
        assert sd["model.layers.0.mlp.gate.weight"].shape == (experts, hid)
        if model_type == "qwen2_moe":  # and carries a shared expert beside the routed ones
            s = cfg.shared_expert_intermediate_size
            assert sd["model.layers.0.mlp.shared_expert.gate_proj.weight"].shape == (s, hid)
            assert sd["model.layers.0.mlp.shared_expert_gate.weight"].shape == (1, hid)
    else:
        assert sd["model.layers.0.mlp.gate_proj.weight"].shape == (cfg.intermediate_size, hid)
    assert sd["lm_head.weight"].shape == (cfg.vocab_size, hid)


@pytest.mark.parametrize("name", sorted(TEXT))
def test_norm_weights_and_biases_are_not_init_values(name):
    model = load(name)
    norms = [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")]
    # 2 per layer (Gemma 2, 3 and GLM-4: 4) + final norm, plus q_norm/k_norm per layer for qwen3, gemma3, the
    # OLMos, FlexOlmo, EXAONE 4 and HunYuan
    cfg = model.config
    gemma = cfg.model_type.startswith("gemma")
    qk = cfg.model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2", "olmo3", "olmoe", "exaone4", "hunyuan_v1_dense", "flex_olmo")
    per_layer = (4 if cfg.model_type in ("gemma2", "gemma3_text", "glm4") else 2) + (2 if qk else 0)
    assert len(norms) == per_layer * cfg.num_hidden_layers + 1
    for n, m in norms:
        w = m.weight.float()
        if gemma:  # Gemma scales by 1 + weight, which starts at 0
            assert not torch.all(w == 0) and w.abs().max() <= 0.3 and w.std() > 0.01, f"{name}: {n}.weight not around 0"
            continue
        assert not torch.all(w == 1), f"{name}: {n}.weight is all ones"
        assert 0.75 <= w.min() and w.max() <= 1.25 and w.std() > 0.01, f"{name}: {n}.weight not around 1"
    biases = [(n, p) for n, p in model.named_parameters() if n.endswith(".bias")]
    if cfg.model_type in ("qwen2", "qwen2_moe", "glm", "glm4", "helium"):
        assert {n.rsplit(".", 2)[-2] for n, _ in biases} == {"q_proj", "k_proj", "v_proj"}
    elif cfg.model_type in ("seed_oss", "hunyuan_v1_dense"):  # all four attention projections biased
        assert {n.rsplit(".", 2)[-2] for n, _ in biases} == {"q_proj", "k_proj", "v_proj", "o_proj"}
    else:
        assert biases == []
    for n, p in biases:
        assert p.float().abs().min() > 0 or p.float().std() > 0.01, f"{name}: {n} is zero"


def test_sharded_fixture_has_index_covering_every_tensor():
    folder = FIXTURES / "llama-sharded"
    shards = sorted(folder.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2
    assert not (folder / "model.safetensors").exists()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    wm = index["weight_map"]
    tensors = checkpoint_tensors(folder)
    assert set(wm) == set(tensors), "weight_map and shard contents disagree"
    for k, (_, _, fname) in tensors.items():
        assert wm[k] == fname, f"weight_map puts {k} in {wm[k]}, it is in {fname}"
    assert set(wm.values()) == {s.name for s in shards}
    # total_size counts the tensor bytes
    nbytes = sum(math.prod(shape) * 4 for _, shape, _ in tensors.values())
    assert index["metadata"]["total_size"] == nbytes
    # Same shapes as llama-tiny, different weights (different seed).
    tiny = checkpoint_tensors(FIXTURES / "llama-tiny")
    assert {k: v[1] for k, v in tiny.items()} == {k: v[1] for k, v in tensors.items()}
    a, b = load("llama-tiny"), load("llama-sharded")
    assert not torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)


def test_odd_fixture_shape_and_tied_embeddings():
    cfg = AutoConfig.from_pretrained(FIXTURES / "llama-odd")
    h = cfg.hidden_size
    assert h & (h - 1) != 0, f"hidden_size {h} is a power of two"
    assert cfg.num_attention_heads % 2 == 1
    assert cfg.tie_word_embeddings is True
    stored = checkpoint_tensors(FIXTURES / "llama-odd")
    assert "lm_head.weight" not in stored and "model.embed_tokens.weight" in stored
    model = load("llama-odd")
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_qwen3_and_mistral_specifics():
    q3 = AutoConfig.from_pretrained(FIXTURES / "qwen3-tiny")
    assert q3.head_dim * q3.num_attention_heads != q3.hidden_size  # explicit head_dim matters
    m = load("qwen3-tiny")
    assert m.model.layers[0].self_attn.q_norm.weight.shape == (q3.head_dim,)
    mi = AutoConfig.from_pretrained(FIXTURES / "mistral-tiny")
    assert mi.sliding_window == 32 < mi.max_position_embeddings


@pytest.mark.parametrize("name,block,names", [
    ("qwen3-moe-tiny", "mlp", ("gate_proj", "up_proj", "down_proj")),
    ("mixtral-tiny", "block_sparse_moe", ("w1", "w3", "w2")),
])
def test_moe_fixtures_store_experts_as_the_hub_does(name, block, names):
    """Each expert is its own 2D tensors on disk (transformers stacks them at load), and the
    router spreads the prose's tokens over every expert, each token to distinct experts."""
    cfg = AutoConfig.from_pretrained(FIXTURES / name)
    experts = getattr(cfg, "num_local_experts", None) or cfg.num_experts
    width = cfg.moe_intermediate_size if name.startswith("qwen3") else cfg.intermediate_size
    assert experts == 6 and width & (width - 1) != 0
    with safe_open(FIXTURES / name / "model.safetensors", "pt") as f:
        keys = set(f.keys())
        gate, up, down = (f"model.layers.0.{block}.experts.5.{n}.weight" for n in names)
        assert f.get_slice(gate).get_shape() == [width, cfg.hidden_size]
        assert f.get_slice(up).get_shape() == [width, cfg.hidden_size]
        assert f.get_slice(down).get_shape() == [cfg.hidden_size, width]
    assert not any("gate_up_proj" in k for k in keys)
    model = load(name)
    layer0 = model.model.layers[0].mlp
    assert tuple(layer0.experts.gate_up_proj.shape) == (experts, 2 * width, cfg.hidden_size)
    tok = AutoTokenizer.from_pretrained(FIXTURES / name)
    ids = torch.tensor([tok(PROSE.read_text()[:2000])["input_ids"][:256]])
    hit = torch.zeros(experts, dtype=torch.long)

    def count(_, args, out):
        _, _, idx = out
        assert (idx.sort(-1).values.diff(dim=-1) > 0).all()
        hit.add_(torch.bincount(idx.flatten(), minlength=experts))

    h = layer0.gate.register_forward_hook(count)
    with torch.no_grad():
        model(input_ids=ids)
    h.remove()
    assert (hit > 0).all(), hit.tolist()


def test_granitemoe_fixture_stores_experts_stacked():
    """GraniteMoE's checkpoint holds each projection's experts in one tensor (input_linear: each
    expert's gate rows then its up rows; output_linear; router.layer), as its published checkpoints
    do, and the router spreads the prose's tokens over every expert."""
    cfg = AutoConfig.from_pretrained(FIXTURES / "granitemoe-tiny")
    e, w, h = cfg.num_local_experts, cfg.intermediate_size, cfg.hidden_size
    assert e == 5 and cfg.num_experts_per_tok == 3 and w & (w - 1) != 0
    with safe_open(FIXTURES / "granitemoe-tiny" / "model.safetensors", "pt") as f:
        keys = set(f.keys())
        stacked = f.get_tensor("model.layers.1.block_sparse_moe.input_linear.weight")
        assert list(stacked.shape) == [e, 2 * w, h]
        assert f.get_slice("model.layers.1.block_sparse_moe.output_linear.weight").get_shape() == [e, h, w]
        assert f.get_slice("model.layers.1.block_sparse_moe.router.layer.weight").get_shape() == [e, h]
    assert not any(".experts." in k for k in keys)
    model = load("granitemoe-tiny")
    moe = model.model.layers[1].block_sparse_moe
    assert torch.equal(moe.experts.gate_up_proj, stacked)  # renamed at load, not restacked
    tok = AutoTokenizer.from_pretrained(FIXTURES / "granitemoe-tiny")
    ids = torch.tensor([tok(PROSE.read_text()[:2000])["input_ids"][:256]])
    hit = torch.zeros(e, dtype=torch.long)

    def count(_, args, out):  # out: (top-k ids, weights, logits)
        hit.add_(torch.bincount(out[0].flatten(), minlength=e))

    h = moe.router.register_forward_hook(count)
    with torch.no_grad():
        model(input_ids=ids)
    h.remove()
    assert (hit > 0).all(), hit.tolist()


def test_levit_fixture_loads_and_runs():
    folder = FIXTURES / "levit-tiny"
    cfg = AutoConfig.from_pretrained(folder)
    assert cfg.model_type == "levit" and cfg.num_labels == 10
    model = load("levit-tiny")
    assert type(model).__name__ == "LevitForImageClassificationWithTeacher"
    g = torch.Generator().manual_seed(0)
    pixels = torch.randn(2, 3, cfg.image_size, cfg.image_size, generator=g)
    with torch.no_grad():
        out = model(pixel_values=pixels)
    assert out.logits.shape == (2, 10)
    assert out.cls_logits.shape == out.distillation_logits.shape == (2, 10)
    torch.testing.assert_close(out.logits, (out.cls_logits + out.distillation_logits) / 2)
    assert torch.isfinite(out.logits).all()
    # The logits must depend on the image (stock init + random BN stats made them nearly constant).
    assert (out.logits[0] - out.logits[1]).abs().max() > 0.1

    pre = json.loads((folder / "preprocessor_config.json").read_text())
    assert pre["image_processor_type"] == "LevitImageProcessor"
    assert pre["crop_size"] == {"height": cfg.image_size, "width": cfg.image_size}
    assert len(pre["image_mean"]) == len(pre["image_std"]) == 3


def test_levit_batchnorm_stats_are_not_identity():
    model = load("levit-tiny")
    # Attention biases (gathered per head and position by attention_bias_idxs) are not left at 0.
    ab = [(n, p) for n, p in model.named_parameters() if n.endswith("attention_biases")]
    assert len(ab) >= 3
    for n, p in ab:
        assert p.std() > 0.1, f"{n} is (nearly) constant"
    bns = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    # 4 conv-BN in the patch embedding, BN after every Linear, BN in both classifier heads
    assert len(bns) > 20
    for n, m in bns:
        assert not torch.all(m.running_mean == 0), f"{n}.running_mean is all 0"
        assert not torch.all(m.running_var == 1), f"{n}.running_var is all 1"
        assert torch.all(m.running_var > 0), f"{n}.running_var has a non-positive entry"
        assert not torch.all(m.weight == 1), f"{n}.weight is all 1"
        assert not torch.all(m.bias == 0), f"{n}.bias is all 0"
        assert (m.running_var - 1).abs().max() > 0.1, f"{n}.running_var is ~1"
        assert m.running_mean.std() > 0.02 and m.running_var.std() > 0.02, f"{n}: stats nearly constant"
        assert m.num_batches_tracked.item() > 0


def test_prose_is_long_enough_for_perplexity():
    text = PROSE.read_text(encoding="utf-8")
    assert len(text.split()) >= 2000
    assert text.isascii()
    tok = AutoTokenizer.from_pretrained(FIXTURES / "llama-tiny")
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    assert n >= 2000, f"prose.txt is {n} tokens with the fixture tokenizer"


def test_fixtures_match_generator():
    """The committed fixtures are byte-for-byte what scripts/make_fixtures.py writes."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_fixtures.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"make_fixtures.py --check failed:\n{r.stderr[-4000:]}"
    assert "check ok: 30 fixture(s)" in r.stderr  # testdata/fixtures/* and testdata/quantized/llama-tiny-fp8
