#!/usr/bin/env python3
"""Generate the tiny test checkpoints under testdata/fixtures/ (and testdata/quantized/).

Every fixture is built by transformers' own model classes from a small config, with fixed seeds,
and written with ``save_pretrained`` (safetensors). testdata/quantized/ holds checkpoints the
planner must refuse with a clear error: llama-tiny-fp8 is llama-tiny's decoder Linear weights
quantized to FP8 (e4m3) with 128x128 block scales (`<name>_scale_inv`) and a config.json
`quantization_config`, as transformers' FineGrainedFP8 checkpoints are laid out. Text fixtures share one byte-level BPE
tokenizer trained on harness/python/prose.txt (the project's own text, also the eval's default). Run from anywhere:

    .venv/bin/python scripts/make_fixtures.py            # (re)write testdata/fixtures/
    .venv/bin/python scripts/make_fixtures.py --check    # regenerate into a temp dir, compare
    .venv/bin/python scripts/make_fixtures.py --only llama-tiny --out /tmp/fx

Weights are not left at transformers' init values where init is degenerate: every norm weight
(RMSNorm, q/k norms, BatchNorm) is drawn around 1 instead of exactly 1, every bias and BatchNorm
shift is random instead of 0, and BatchNorm running stats are random (variance positive), so
folding and norm kernels are checked against numbers that can be wrong.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PROSE = ROOT / "harness" / "python" / "prose.txt"
FIXTURES = ROOT / "testdata" / "fixtures"
QUANTIZED = ROOT / "testdata" / "quantized"

VOCAB_SIZE = 512  # tokenizer vocab == model vocab_size for every text fixture
# ids 0..3, added first by the trainer. "<|endoftext|>" is there because AutoTokenizer loads a
# qwen2 checkpoint with Qwen2Tokenizer, whose default unk token it is; if it were missing that class
# would append it and the tokenizer would outgrow the model's vocab.
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|endoftext|>"]
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
# Larger than transformers' 0.02 so a 64-wide model gives peaked, non-uniform logits
# (about 1/sqrt(hidden), the scale of trained weights); layout bugs then move top-1 tokens.
TEXT_INIT_RANGE = 0.1


def log(msg: str) -> None:
    print(f"make_fixtures: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer():
    """Train the shared byte-level BPE tokenizer on prose.txt and wrap it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = PROSE.read_text(encoding="utf-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Paragraph-sized pieces; the trainer's result depends only on their content.
    tok.train_from_iterator([p for p in text.split("\n") if p.strip()], trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"make_fixtures: tokenizer vocab is {tok.get_vocab_size()}, want {VOCAB_SIZE}")
    for want_id, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != want_id:
            raise SystemExit(f"make_fixtures: special token {name} got id {tok.token_to_id(name)}, want {want_id}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=512,
    )


# ---------------------------------------------------------------------------------------------
# weight randomisation


def randomize_degenerate(model, seed: int, fan_in_init: bool = False) -> None:
    """Replace init values that would hide bugs (norm weight 1, bias 0, BN stats 0/1).

    fan_in_init redraws Linear/Conv weights with std 1/sqrt(fan_in): LeViT's stock init (std 0.02)
    shrinks the signal through its 4 patch convs and ~10 Linear+BN layers until the logits no
    longer depend on the image, which would let any layer bug pass unnoticed.
    """
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)

    def uniform(t, lo, hi):
        return (torch.rand(t.shape, generator=g, dtype=torch.float32) * (hi - lo) + lo).to(t.dtype)

    with torch.no_grad():
        for name, mod in sorted(model.named_modules(), key=lambda kv: kv[0]):
            cls = type(mod).__name__
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.weight.copy_(uniform(mod.weight, 0.5, 1.5))
                mod.bias.copy_(uniform(mod.bias, -0.5, 0.5))
                mod.running_mean.copy_(uniform(mod.running_mean, -0.5, 0.5))
                mod.running_var.copy_(uniform(mod.running_var, 0.5, 2.0))
                mod.num_batches_tracked.fill_(100)
            elif cls.startswith("Gemma") and cls.endswith("RMSNorm"):
                # Gemma's norms scale by (1 + weight) and start at weight 0: draw around 0, with
                # more bits than bf16 keeps next to 1, so folding 1 + w in bf16 would show.
                mod.weight.copy_(uniform(mod.weight, -0.3, 0.3))
            elif cls.endswith("RMSNorm") or isinstance(mod, nn.LayerNorm):
                mod.weight.copy_(uniform(mod.weight, 0.8, 1.2))
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(uniform(mod.bias, -0.1, 0.1))
            elif isinstance(mod, nn.Linear) and mod.bias is not None:
                mod.bias.copy_(uniform(mod.bias, -0.1, 0.1))
            if fan_in_init and isinstance(mod, (nn.Linear, nn.Conv2d)):
                w = mod.weight
                fan_in = w[0].numel()
                w.copy_(torch.randn(w.shape, generator=g, dtype=torch.float32).to(w.dtype) / fan_in**0.5)
        # LeViT's learned attention biases start at 0; the kernels gather them by index, so they
        # must differ per position and head for a wrong gather to show.
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("attention_biases"):
                p.copy_(uniform(p, -1.0, 1.0))


# ---------------------------------------------------------------------------------------------
# fixtures


@dataclass(frozen=True)
class Fixture:
    name: str
    seed: int
    build: Callable[[int], object]  # seed -> model (fp32)
    dtype: str = "float32"
    text: bool = True
    max_shard_size: str | None = None
    quantize: str | None = None  # "fp8": written under testdata/quantized/, see quantize_fp8


def _text_common() -> dict:
    return dict(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=512,
        initializer_range=TEXT_INIT_RANGE,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        rms_norm_eps=1e-6,
    )


def _seeded(seed: int, make, fan_in_init: bool = False):
    import torch

    torch.manual_seed(seed)
    model = make()
    model.eval()
    randomize_degenerate(model, seed + 1, fan_in_init)
    return model


def build_llama_tiny(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA: 2 query heads per kv head
        tie_word_embeddings=False,
        **_text_common(),
    )
    return _seeded(seed, lambda: LlamaForCausalLM(cfg))


def build_llama_odd(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=160,  # not a power of two
        intermediate_size=416,
        num_hidden_layers=1,
        num_attention_heads=5,  # odd head count
        num_key_value_heads=5,
        head_dim=32,
        tie_word_embeddings=True,  # lm_head shares embed_tokens.weight
        **_text_common(),
    )
    return _seeded(seed, lambda: LlamaForCausalLM(cfg))


def build_mistral_tiny(seed: int):
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=32,  # shorter than a perplexity chunk, so the window matters
        tie_word_embeddings=False,
        **_text_common(),
    )
    return _seeded(seed, lambda: MistralForCausalLM(cfg))


def build_qwen2_tiny(seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        **_text_common(),
    )
    return _seeded(seed, lambda: Qwen2ForCausalLM(cfg))


def build_qwen3_tiny(seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # explicit and != hidden/heads (16): q_proj is 64 -> 128
        tie_word_embeddings=False,
        **_text_common(),
    )
    return _seeded(seed, lambda: Qwen3ForCausalLM(cfg))


def build_qwen3_moe_tiny(seed: int):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(
        hidden_size=64,
        intermediate_size=48,  # the dense layer's MLP
        moe_intermediate_size=24,  # one expert's width, not a power of two
        num_experts=6,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        mlp_only_layers=[1],  # layer 1 keeps a dense Qwen3MoeMLP
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        tie_word_embeddings=True,  # the budget: experts take the bytes
        **_text_common(),
    )
    return _seeded(seed, lambda: Qwen3MoeForCausalLM(cfg))


def build_qwen2_moe_tiny(seed: int):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    cfg = Qwen2MoeConfig(
        hidden_size=64,
        intermediate_size=48,
        moe_intermediate_size=24,  # one expert's width, not a power of two
        shared_expert_intermediate_size=40,  # the shared expert's
        num_experts=5,
        num_experts_per_tok=3,
        norm_topk_prob=False,  # Qwen2MoeConfig's default: the top-k probabilities as they are
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,  # Qwen2MoeConfig has no head_dim: 64 / 2
        tie_word_embeddings=True,  # the budget: experts take the bytes
        **_text_common(),
    )
    return _seeded(seed, lambda: Qwen2MoeForCausalLM(cfg))


def build_olmoe_tiny(seed: int):
    from transformers import OlmoeConfig, OlmoeForCausalLM

    cfg = OlmoeConfig(
        hidden_size=64,
        intermediate_size=24,  # one expert's width (OLMoE has no moe_intermediate_size), not a power of two
        num_experts=5,
        num_experts_per_tok=2,
        norm_topk_prob=False,  # OlmoeConfig's default, as OLMoE-1B-7B publishes it
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,  # k_norm spans 32 channels, q_norm all 64
        tie_word_embeddings=True,  # the budget: experts take the bytes
        **_text_common(),
    )
    return _seeded(seed, lambda: OlmoeForCausalLM(cfg))


def build_mixtral_tiny(seed: int):
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(
        hidden_size=64,
        intermediate_size=24,  # one expert's width, not a power of two
        num_local_experts=6,
        num_experts_per_tok=3,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        tie_word_embeddings=True,
        **_text_common(),
    )
    return _seeded(seed, lambda: MixtralForCausalLM(cfg))


def build_gemma2_tiny(seed: int):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(
        hidden_size=96,
        intermediate_size=128,
        num_hidden_layers=2,  # layer_types default: sliding, full
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        head_dim=80,
        query_pre_attn_scalar=64,  # != head_dim: the attention scale is its own field
        sliding_window=16,  # shorter than the eval's sequences
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
        **_text_common(),
    )
    return _seeded(seed, lambda: Gemma2ForCausalLM(cfg))


def build_gemma3_tiny(seed: int):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(
        hidden_size=96,
        intermediate_size=128,
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        num_attention_heads=3,
        num_key_value_heads=1,
        head_dim=96,
        query_pre_attn_scalar=96,
        sliding_window=16,
        tie_word_embeddings=True,
        **_text_common(),
    )
    return _seeded(seed, lambda: Gemma3ForCausalLM(cfg))


def build_gemma_tiny(seed: int):
    from transformers import GemmaConfig, GemmaForCausalLM

    cfg = GemmaConfig(
        hidden_size=96,
        intermediate_size=104,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3 (gemma-2b has one KV head)
        head_dim=80,
        hidden_act="gelu",  # the exact gelu, as the published gemma-2b and gemma-7b configs name it
        tie_word_embeddings=True,
        **_text_common(),
    )
    return _seeded(seed, lambda: GemmaForCausalLM(cfg))


def build_olmo2_tiny(seed: int):
    from transformers import Olmo2Config, Olmo2ForCausalLM

    cfg = Olmo2Config(
        hidden_size=96,  # head_dim 32 = 96 / 3 (Olmo2Config has no head_dim)
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=3,  # as OLMo 2 1B to 13B: k_norm then spans three heads, as q_norm does
        tie_word_embeddings=False,  # Olmo2Config's default
        **_text_common(),
    )
    return _seeded(seed, lambda: Olmo2ForCausalLM(cfg))


def build_olmo3_tiny(seed: int):
    from transformers import Olmo3Config, Olmo3ForCausalLM

    cfg = Olmo3Config(
        hidden_size=64,  # head_dim 32 = 64 / 2 (Olmo3Config has no head_dim)
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=16,  # shorter than the eval's sequences
        tie_word_embeddings=False,
        **_text_common(),
    )
    return _seeded(seed, lambda: Olmo3ForCausalLM(cfg))


def build_exaone4_tiny(seed: int):
    from transformers import Exaone4Config, Exaone4ForCausalLM

    cfg = Exaone4Config(
        hidden_size=96,  # head_dim 32 = 96 / 3 (Exaone4Config has no head_dim)
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        sliding_window=16,  # shorter than the eval's sequences
        sliding_window_pattern=2,  # layer 0 sliding with RoPE, layer 1 global NoPE
        tie_word_embeddings=True,  # as EXAONE-4.0-1.2B
        **_text_common(),
    )
    return _seeded(seed, lambda: Exaone4ForCausalLM(cfg))


def build_phi3_tiny(seed: int):
    from transformers import Phi3Config, Phi3ForCausalLM

    cfg = Phi3Config(
        hidden_size=240,  # head_dim 80 = 240 / 3 (Phi3Config has no head_dim)
        intermediate_size=192,
        num_hidden_layers=1,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        tie_word_embeddings=True,  # as Phi-4-mini
        **_text_common(),
    )
    return _seeded(seed, lambda: Phi3ForCausalLM(cfg))


def build_glm4_tiny(seed: int):
    from transformers import Glm4Config, Glm4ForCausalLM

    cfg = Glm4Config(
        hidden_size=96,
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        head_dim=80,  # not hidden / heads: Glm4Config's head_dim is its own field
        # Glm4Config's default partial_rotary_factor 0.5: 40 of each head's 80 channels rotate,
        # in adjacent pairs; attention_bias defaults to true (q/k/v biases)
        tie_word_embeddings=False,
        **_text_common(),
    )
    return _seeded(seed, lambda: Glm4ForCausalLM(cfg))


def build_glm_tiny(seed: int):
    from transformers import GlmConfig, GlmForCausalLM

    cfg = GlmConfig(
        hidden_size=96,
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        head_dim=64,  # its own field; partial_rotary_factor 0.5: 32 channels rotate in adjacent pairs
        tie_word_embeddings=True,  # the budget (glm-4-9b-chat-hf's are untied)
        **_text_common(),
    )
    return _seeded(seed, lambda: GlmForCausalLM(cfg))


def build_flex_olmo_tiny(seed: int):
    from transformers import FlexOlmoConfig, FlexOlmoForCausalLM

    cfg = FlexOlmoConfig(
        hidden_size=96,  # head_dim 32 = 96 / 3 (FlexOlmoConfig has no head_dim)
        intermediate_size=40,  # each expert's width, not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3: k_norm spans one head, q_norm three
        num_experts=5,
        num_experts_per_tok=3,  # without renormalization (norm_topk_prob false, the default)
        tie_word_embeddings=True,  # the budget
        **_text_common(),
    )
    return _seeded(seed, lambda: FlexOlmoForCausalLM(cfg))


def build_granitemoe_tiny(seed: int):
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

    cfg = GraniteMoeConfig(
        hidden_size=96,  # head_dim 32 = 96 / 3 (GraniteMoeConfig has no head_dim)
        intermediate_size=40,  # each expert's width, not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        num_local_experts=5,
        num_experts_per_tok=3,
        embedding_multiplier=12.0,  # Granite 3's four scalars, as granite-tiny's
        residual_multiplier=0.22,
        attention_multiplier=0.0625,
        logits_scaling=2.0,
        tie_word_embeddings=True,  # the budget
        **_text_common(),
    )
    return _seeded(seed, lambda: GraniteMoeForCausalLM(cfg))


def build_ernie4_5_tiny(seed: int):
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    cfg = Ernie4_5Config(
        hidden_size=96,
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        head_dim=32,  # every channel rotates, in adjacent pairs
        use_bias=False,  # as the published ERNIE 4.5 configs (biased MLPs stay on the stock path)
        tie_word_embeddings=True,  # Ernie4_5Config's default
        **_text_common(),
    )
    return _seeded(seed, lambda: Ernie4_5ForCausalLM(cfg))


def build_seed_oss_tiny(seed: int):
    from transformers import SeedOssConfig, SeedOssForCausalLM

    cfg = SeedOssConfig(
        hidden_size=64,
        intermediate_size=120,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=5,  # head_dim 32 of its own: q is 160 wide, wider than hidden
        num_key_value_heads=1,  # GQA ratio 5
        head_dim=32,
        attention_bias=True,  # q/k/v biases (the default) ...
        attention_out_bias=True,  # ... and o_proj's, which the published config leaves off
        tie_word_embeddings=True,  # the budget
        **_text_common(),
    )
    return _seeded(seed, lambda: SeedOssForCausalLM(cfg))


def build_ministral_tiny(seed: int):
    from transformers import MinistralConfig, MinistralForCausalLM

    cfg = MinistralConfig(
        hidden_size=96,
        intermediate_size=104,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        head_dim=64,  # of its own, hidden / heads is 32: q is 192 wide, twice hidden
        layer_types=["full_attention", "sliding_attention"],
        sliding_window=16,  # shorter than the eval's sequences
        tie_word_embeddings=True,  # the budget
        **_text_common(),
    )
    return _seeded(seed, lambda: MinistralForCausalLM(cfg))


def build_hunyuan_tiny(seed: int):
    from transformers import HunYuanDenseV1Config, HunYuanDenseV1ForCausalLM

    cfg = HunYuanDenseV1Config(
        hidden_size=64,
        intermediate_size=72,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=6,  # head_dim 32 of its own: q is 192 wide, three times hidden
        num_key_value_heads=2,  # GQA ratio 3
        head_dim=32,
        attention_bias=True,  # all four projections biased (the published configs leave them off)
        # the published configs' RoPE: the base scaled once by alpha
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0},
        tie_word_embeddings=True,  # the budget
        **_text_common(),
    )
    return _seeded(seed, lambda: HunYuanDenseV1ForCausalLM(cfg))


def build_helium_tiny(seed: int):
    from transformers import HeliumConfig, HeliumForCausalLM

    cfg = HeliumConfig(
        hidden_size=96,
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        num_attention_heads=3,  # head_dim 32: o_proj takes hidden x hidden
        num_key_value_heads=1,  # GQA ratio 3 (the published model has none)
        head_dim=32,
        attention_bias=True,  # q/k/v biases, which the published config leaves off
        tie_word_embeddings=True,  # the budget
        **_text_common(),
    )
    return _seeded(seed, lambda: HeliumForCausalLM(cfg))


def build_smollm3_tiny(seed: int):
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    cfg = SmolLM3Config(
        hidden_size=64,
        intermediate_size=88,  # not a power of two
        num_hidden_layers=2,
        no_rope_layers=[1, 0],  # layer 1 is a NoPE layer
        use_sliding_window=True,
        sliding_window=16,  # on the NoPE layer (layer_types' default), shorter than the eval's sequences
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3
        head_dim=32,  # 3 heads of 32 over a hidden of 64
        tie_word_embeddings=True,  # as SmolLM3-3B
        **_text_common(),
    )
    return _seeded(seed, lambda: SmolLM3ForCausalLM(cfg))


def build_granite_tiny(seed: int):
    from transformers import GraniteConfig, GraniteForCausalLM

    cfg = GraniteConfig(
        hidden_size=96,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,  # GQA ratio 3, head_dim 32
        embedding_multiplier=12.0,  # Granite 3's four scalars
        residual_multiplier=0.22,
        attention_multiplier=0.0625,
        logits_scaling=2.0,  # Granite 3 divides by 8 or 16; 2 keeps these random logits peaked
        tie_word_embeddings=True,
        **_text_common(),
    )
    return _seeded(seed, lambda: GraniteForCausalLM(cfg))


LEVIT_IMAGE_SIZE = 64


def build_levit_tiny(seed: int):
    from transformers import LevitConfig, LevitForImageClassificationWithTeacher

    cfg = LevitConfig(
        image_size=LEVIT_IMAGE_SIZE,
        patch_size=16,
        hidden_sizes=[32, 48, 64],
        num_attention_heads=[2, 3, 4],
        key_dim=[16, 16, 16],
        depths=[1, 1, 1],
        mlp_ratio=[2, 2, 2],
        attention_ratio=[2, 2, 2],
        num_labels=10,
    )
    model = _seeded(seed, lambda: LevitForImageClassificationWithTeacher(cfg), fan_in_init=True)
    calibrate_batchnorm(model, seed + 2, (3, LEVIT_IMAGE_SIZE, LEVIT_IMAGE_SIZE))
    return model


def calibrate_batchnorm(model, seed: int, image_shape: tuple[int, int, int], batches: int = 4) -> None:
    """Set BatchNorm running stats to the statistics of the activations they actually see.

    Random running stats (from randomize_degenerate) do not match the activations, so the BN shifts
    swamp the signal and the logits hardly depend on the image. Running the model in train mode
    over a few seeded random batches (momentum None = exact average) gives stats that are far from
    0/1 yet normalise real activations, like a trained checkpoint's. BN weight/bias stay random.
    """
    import torch
    from torch import nn

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    g = torch.Generator().manual_seed(seed)
    channel_mean = torch.tensor([0.4, -0.3, 0.1]).view(1, 3, 1, 1)
    # In float64, rounded once at the end: float32 convolutions round differently on different
    # CPUs (oneDNN picks its code path by instruction set), which would make the bytes machine-made.
    model.double().train()
    with torch.no_grad():
        for _ in range(batches):
            # Per-channel offsets (fixed, plus per-image jitter): real normalised images are not
            # zero-mean, and zero-mean inputs would leave the first BN's running_mean at ~0.
            offset = channel_mean + 0.3 * torch.randn((16, image_shape[0], 1, 1), generator=g)
            model(pixel_values=(torch.randn((16, *image_shape), generator=g) + offset).double())
    model.float().eval()
    for m in bns:
        m.momentum = 0.1  # nn.BatchNorm default, as saved in no file but restored for tidiness


FIXTURE_LIST = [
    Fixture("llama-tiny", 1001, build_llama_tiny),
    Fixture("llama-sharded", 1002, build_llama_tiny, max_shard_size="200KB"),
    Fixture("llama-odd", 1003, build_llama_odd, dtype="float16"),
    Fixture("mistral-tiny", 1004, build_mistral_tiny),
    Fixture("qwen2-tiny", 1005, build_qwen2_tiny, dtype="bfloat16"),
    Fixture("qwen3-tiny", 1006, build_qwen3_tiny),
    Fixture("levit-tiny", 1007, build_levit_tiny, text=False),
    Fixture("gemma2-tiny", 1008, build_gemma2_tiny),
    Fixture("gemma3-tiny", 1009, build_gemma3_tiny, dtype="bfloat16"),
    Fixture("phi3-tiny", 1010, build_phi3_tiny, dtype="bfloat16"),
    # save_pretrained writes each expert as 2D tensors, as the Hub publishes them (Mixtral's
    # under block_sparse_moe.experts.N.w1/w2/w3): transformers' conversion runs in reverse.
    Fixture("qwen3-moe-tiny", 1011, build_qwen3_moe_tiny, dtype="bfloat16"),
    Fixture("mixtral-tiny", 1012, build_mixtral_tiny, dtype="bfloat16"),
    Fixture("smollm3-tiny", 1013, build_smollm3_tiny, dtype="bfloat16"),
    Fixture("granite-tiny", 1014, build_granite_tiny, dtype="bfloat16"),
    Fixture("gemma-tiny", 1015, build_gemma_tiny, dtype="bfloat16"),
    Fixture("olmo2-tiny", 1016, build_olmo2_tiny, dtype="bfloat16"),
    Fixture("olmo3-tiny", 1017, build_olmo3_tiny, dtype="bfloat16"),
    Fixture("qwen2-moe-tiny", 1018, build_qwen2_moe_tiny, dtype="bfloat16"),
    Fixture("glm4-tiny", 1019, build_glm4_tiny, dtype="bfloat16"),
    Fixture("olmoe-tiny", 1020, build_olmoe_tiny, dtype="bfloat16"),
    Fixture("ernie4_5-tiny", 1021, build_ernie4_5_tiny, dtype="bfloat16"),
    Fixture("seed_oss-tiny", 1022, build_seed_oss_tiny, dtype="bfloat16"),
    Fixture("exaone4-tiny", 1023, build_exaone4_tiny, dtype="bfloat16"),
    Fixture("ministral-tiny", 1024, build_ministral_tiny, dtype="bfloat16"),
    Fixture("hunyuan-tiny", 1025, build_hunyuan_tiny, dtype="bfloat16"),
    Fixture("helium-tiny", 1026, build_helium_tiny, dtype="bfloat16"),
    Fixture("glm-tiny", 1027, build_glm_tiny, dtype="bfloat16"),
    # save_pretrained writes each expert as 2D tensors (OLMoE's conversion in reverse)
    Fixture("flex_olmo-tiny", 1028, build_flex_olmo_tiny, dtype="bfloat16"),
    # the experts stacked in one tensor a projection, as GraniteMoE checkpoints store them
    Fixture("granitemoe-tiny", 1029, build_granitemoe_tiny, dtype="bfloat16"),
    Fixture("llama-tiny-fp8", 1001, build_llama_tiny, dtype="bfloat16", text=False, quantize="fp8"),
]

FP8_BLOCK = 128  # the block size of FineGrainedFP8 / DeepSeek-V3-style checkpoints


def quantize_fp8(folder: Path) -> None:
    """Rewrite a saved checkpoint the way FP8 checkpoints are laid out: each decoder Linear
    weight in float8_e4m3fn with one float32 `<name>_scale_inv` per 128x128 block (the
    dequantized weight is fp8 * scale_inv), and config.json's quantization_config."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    ts = load_file(str(path))
    fmax = torch.finfo(torch.float8_e4m3fn).max
    for name in sorted(ts):
        if ".layers." not in name or not name.endswith("_proj.weight"):
            continue
        w = ts[name].float()
        n, k = w.shape
        rows, cols = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
        scale = torch.empty(rows, cols)
        q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
        for i in range(rows):
            for j in range(cols):
                blk = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
                s = blk.abs().max().clamp(min=1e-12) / fmax
                scale[i, j] = s
                q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = (blk / s).to(torch.float8_e4m3fn)
        ts[name] = q
        ts[name + "_scale_inv"] = scale
    save_file(ts, str(path), metadata={"format": "pt"})
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def fixture_dir(fx: Fixture, out: Path) -> Path:
    """Where a fixture goes: out/<name>, or for a quantized one out's sibling quantized/<name>
    (testdata/quantized/: they are not loadable, and every loadable fixture is globbed)."""
    return out.parent / "quantized" / fx.name if fx.quantize else out / fx.name


def write_fixture(fx: Fixture, dest: Path, tokenizer) -> None:
    """Write one fixture into dest (replaced atomically: built beside it, then renamed)."""
    import torch

    model = fx.build(fx.seed)
    dtype = getattr(torch, fx.dtype)
    if dtype != torch.float32:
        model = model.to(dtype)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{fx.name}.", dir=dest.parent))
    try:
        kwargs = {}
        if fx.max_shard_size:
            kwargs["max_shard_size"] = fx.max_shard_size
        model.save_pretrained(tmp, **kwargs)
        if fx.quantize == "fp8":
            (tmp / "generation_config.json").unlink(missing_ok=True)
            quantize_fp8(tmp)
        elif fx.text:
            tokenizer.save_pretrained(tmp)
        else:
            write_levit_preprocessor(tmp / "preprocessor_config.json")
        old = dest.with_name(f".{fx.name}.old")
        if dest.exists():
            if old.exists():
                shutil.rmtree(old)
            dest.rename(old)
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.rename(dest)
        if old.exists():
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_levit_preprocessor(path: Path) -> None:
    """Write the preprocessor_config.json that LevitImageProcessor.save_pretrained would write.

    LevitImageProcessor needs Pillow or torchvision, neither of which is in requirements.txt, so the
    file is written from the class's own defaults (transformers/models/levit/image_processing_levit.py:
    bicubic resample, ImageNet mean/std, shortest_edge resize then center crop) scaled to the
    fixture's image size. Loading it with AutoImageProcessor needs Pillow.
    """
    from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    cfg = {
        "crop_size": {"height": LEVIT_IMAGE_SIZE, "width": LEVIT_IMAGE_SIZE},
        "do_center_crop": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": list(IMAGENET_DEFAULT_MEAN),
        "image_processor_type": "LevitImageProcessor",
        "image_std": list(IMAGENET_DEFAULT_STD),
        "resample": 3,  # PILImageResampling.BICUBIC
        "rescale_factor": 1 / 255,
        "size": {"shortest_edge": LEVIT_IMAGE_SIZE},
    }
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compare_trees(want: Path, got: Path) -> list[str]:
    """Differences between the committed fixture tree and a fresh one (names + bytes)."""
    problems = []
    want_files = sorted(p.relative_to(want) for p in want.rglob("*") if p.is_file())
    got_files = sorted(p.relative_to(got) for p in got.rglob("*") if p.is_file())
    if want_files != got_files:
        problems.append(f"file lists differ: committed {want_files} vs regenerated {got_files}")
    for rel in sorted(set(want_files) & set(got_files)):
        a, b = want / rel, got / rel
        if a.suffix == ".json":
            ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
            # transformers writes its own version into configs; that alone is not a difference.
            for j in (ja, jb):
                if isinstance(j, dict):
                    j.pop("transformers_version", None)
            if ja != jb:
                problems.append(f"{rel}: JSON content differs")
        elif not filecmp.cmp(a, b, shallow=False):
            problems.append(f"{rel}: bytes differ (sha256 {sha256(a)[:12]} vs {sha256(b)[:12]})")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIXTURES, help="output folder (default testdata/fixtures)")
    ap.add_argument("--only", action="append", help="fixture name to build (repeatable)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --out")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    names = {f.name for f in FIXTURE_LIST}
    if args.only and not set(args.only) <= names:
        ap.error(f"unknown fixture(s) {sorted(set(args.only) - names)}; known: {sorted(names)}")
    chosen = [f for f in FIXTURE_LIST if not args.only or f.name in args.only]

    if args.check:
        with tempfile.TemporaryDirectory(prefix="fixtures-check-") as td:
            fresh = Path(td)
            tokenizer = train_tokenizer()
            bad = []
            for fx in chosen:
                want, got = fixture_dir(fx, args.out), fixture_dir(fx, fresh / "fixtures")
                write_fixture(fx, got, tokenizer)
                if not want.is_dir():
                    bad.append(f"{fx.name}: missing from {want.parent}")
                    continue
                bad += [f"{fx.name}/{p}" for p in compare_trees(want, got)]
            for b in bad:
                log(f"check: {b}")
            if bad:
                log(f"check FAILED: {len(bad)} difference(s); rerun scripts/make_fixtures.py and commit")
                return 1
            log(f"check ok: {len(chosen)} fixture(s) identical to {args.out}")
            return 0

    tokenizer = train_tokenizer()
    for fx in chosen:
        dest = fixture_dir(fx, args.out)
        write_fixture(fx, dest, tokenizer)
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        log(f"wrote {dest} ({size / 1024:.0f} KiB, {fx.dtype}{', ' + fx.quantize if fx.quantize else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
