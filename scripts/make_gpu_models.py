"""Random-weight models shaped like the presets (Llama-3.2-1B, Llama-3.1-8B, Qwen2.5-0.5B,
Qwen3-0.6B, Mistral-7B), Gemma-2-2B, Phi-3-mini, Ministral-8B, Hunyuan-7B, helium-1-2b, FlexOlmo-7x7B, SmolLM3-3B, a Granite-3-2B-sized model,
a Granite-3B-A800M-sized MoE, GLM-4-9B,
Qwen3-30B-A3B and LeViT-128S, made by
transformers from configs on the GPU machine (no downloads there), for `xpuinject` pipeline runs.

    python scripts/make_gpu_models.py OUT_DIR
        [--only llama1b,llama8b,qwen2,qwen3,mistral7b,gemma2b,gemma7b,olmo2_7b,exaone4,ministral8b,hunyuan7b,helium2b,flexolmo,glm4_9b,qwen2moe,olmoe,phi3mini,smollm3,granite2b,granitemoe3b,qwen3moe30b,
        levit128s] [--layers N]

--layers keeps the decoder shapes but only N decoder layers (quick checks; the folder name gets
"-<N>l"). --config-only writes each model's config.json alone (no weights: any machine, at once),
e.g. for benchmarks/routes.py --tune-config.
Gemma-2-2B and Phi-3-mini-4k-instruct follow their published configs (testdata/published/), in bf16.
Llama-3.2-1B's published config (hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64,
intermediate 8192, vocab 128256, llama3 rope scaling, tied embeddings), saved in bf16 like the
real checkpoint; the fixture tokenizer (vocab 512) is copied in, its ids are valid inputs.
LeViT-128S is LevitConfig's default shape (hidden [128, 256, 384], heads [4, 6, 8], depths
[4, 4, 4], 224x224, 1000 labels) with the distillation head, in fp32, BatchNorm statistics
and affine parameters randomized (not 0/1) so folding is exercised.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def llama1b(out: Path, layers=None):
    _llama(out, transformers.LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers or 16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, rope_parameters=LLAMA3_ROPE,
    ))


def llama8b(out: Path, layers=None):
    """Llama-3.1-8B's published config: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128,
    intermediate 14336, vocab 128256, untied embeddings."""
    _llama(out, transformers.LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers or 32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, rope_parameters=LLAMA3_ROPE,
    ))


def gemma2b(out: Path, layers=None):
    """google/gemma-2-2b's config: hidden 2304, 26 layers, 8 heads, 4 KV heads, head_dim 256,
    intermediate 9216, vocab 256000, sliding window 4096 on alternate layers, soft-capping 50 / 30,
    tied embeddings. Norm weights drawn around 0 (Gemma scales by 1 + w)."""
    _llama(out, transformers.Gemma2Config(
        hidden_size=2304, intermediate_size=9216, num_hidden_layers=layers or 26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, vocab_size=256000, max_position_embeddings=8192, rms_norm_eps=1e-6,
        query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.Gemma2ForCausalLM, norm=(-0.2, 0.2))


def gemma7b(out: Path, layers=None):
    """gemma-7b's shape (GemmaConfig's defaults): hidden 3072, 28 layers, 16 heads, 16 KV heads,
    head_dim 256, intermediate 24576, vocab 256000, tied embeddings, with the published
    checkpoints' hidden_act "gelu" (the exact gelu). Norm weights drawn around 0 (1 + w)."""
    _llama(out, transformers.GemmaConfig(
        num_hidden_layers=layers or 28, hidden_act="gelu", max_position_embeddings=8192,
        bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.GemmaForCausalLM, norm=(-0.2, 0.2))


def olmo2_7b(out: Path, layers=None):
    """OLMo-2-1124-7B's shape as Olmo2Config's defaults give it (the checkpoint its class names):
    hidden 4096, 32 layers, 32 heads (no GQA), intermediate 11008, vocab 50304, untied embeddings."""
    _llama(out, transformers.Olmo2Config(
        num_hidden_layers=layers or 32, max_position_embeddings=4096, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.Olmo2ForCausalLM)


def exaone4(out: Path, layers=None):
    """Exaone4Config's defaults: hidden 4096, 32 layers, 32 heads (no GQA), intermediate 16384, vocab
    102400, every fourth layer global with no RoPE and the others sliding over 4096 keys, untied
    embeddings."""
    _llama(out, transformers.Exaone4Config(
        num_hidden_layers=layers or 32, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.Exaone4ForCausalLM)


def ministral8b(out: Path, layers=None):
    """A Ministral-8B-shaped model (mistralai/Ministral-8B-Instruct-2410's sizes): hidden 4096, 36
    layers, 32 heads, 8 KV heads, head_dim 128, intermediate 12288, vocab 131072, untied
    embeddings, RoPE base 1e8; layer_types slide three layers of four, the fourth in full, over
    512 keys (the published 32768 would never bind at the eval's 1024 tokens)."""
    n = layers or 36
    _llama(out, transformers.MinistralConfig(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=n, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=131072, max_position_embeddings=32768, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 1e8}, sliding_window=512, layer_types=["full_attention" if i % 4 == 3 else "sliding_attention" for i in range(n)],
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.MinistralForCausalLM)


def hunyuan7b(out: Path, layers=None):
    """A Hunyuan-7B-sized dense model: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128,
    intermediate 14336, vocab 128167, tied embeddings, the q/k norms after RoPE, and the RoPE base
    scaled by alpha 1000 (dynamic RoPE within its 32768 positions)."""
    _llama(out, transformers.HunYuanDenseV1Config(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers or 32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=128167, max_position_embeddings=32768, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0},
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.HunYuanDenseV1ForCausalLM)


def helium2b(out: Path, layers=None):
    """helium-1-2b's shape (HeliumConfig's defaults): hidden 2560, 24 layers, 20 heads (no GQA),
    head_dim 128, intermediate 7040, vocab 48000, untied embeddings, every norm rounding once after
    its weight, RoPE over adjacent channel pairs."""
    _llama(out, transformers.HeliumConfig(
        num_hidden_layers=layers or 24, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.HeliumForCausalLM)


def glm4_9b(out: Path, layers=None):
    """GLM-4-9B-0414's shape as Glm4Config's defaults give it: hidden 4096, 40 layers, 32 heads,
    2 KV heads, head_dim 128 (64 channels rotating in adjacent pairs), intermediate 13696, vocab
    151552, q/k/v biases, untied embeddings."""
    _llama(out, transformers.Glm4Config(
        num_hidden_layers=layers or 40, max_position_embeddings=8192, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.Glm4ForCausalLM)


def phi3mini(out: Path, layers=None):
    """microsoft/Phi-3-mini-4k-instruct's config: hidden 3072, 32 layers, 32 heads (no GQA),
    head_dim 96, intermediate 8192, vocab 32064, sliding window 2047, untied embeddings."""
    _llama(out, transformers.Phi3Config(
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=layers or 32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096, original_max_position_embeddings=4096,
        rms_norm_eps=1e-5, sliding_window=2047, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.Phi3ForCausalLM)


def smollm3(out: Path, layers=None):
    """SmolLM3-3B's shape (SmolLM3Config's defaults): hidden 2048, 36 layers, 16 heads, 4 KV heads,
    head_dim 128, intermediate 11008, vocab 128256, every fourth layer NoPE, tied embeddings."""
    _llama(out, transformers.SmolLM3Config(
        num_hidden_layers=layers or 36, max_position_embeddings=8192, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.SmolLM3ForCausalLM)


def granite2b(out: Path, layers=None):
    """A Granite-3-2B-sized model: hidden 2048, 40 layers, 32 heads, 8 KV heads, head_dim 64,
    intermediate 8192, vocab 49155, tied embeddings, and Granite 3's four scalars (embedding 12,
    attention 1/64, residual 0.22, logits 8)."""
    _llama(out, transformers.GraniteConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers or 40, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=49155, max_position_embeddings=8192, rms_norm_eps=1e-5,
        embedding_multiplier=12.0, attention_multiplier=0.015625, residual_multiplier=0.22, logits_scaling=8.0,
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    ), cls=transformers.GraniteForCausalLM)


def qwen2(out: Path, layers=None):
    """Qwen/Qwen2.5-0.5B's config (the qwen2 preset): hidden 896, 24 layers, 14 heads, 2 KV heads,
    head_dim 64, intermediate 4864, vocab 151936, q/k/v biases, tied embeddings."""
    _llama(out, transformers.Qwen2Config(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=layers or 24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=1,
    ), cls=transformers.Qwen2ForCausalLM)


def qwen3(out: Path, layers=None):
    """Qwen/Qwen3-0.6B's config (the qwen3 preset): hidden 1024, 28 layers, 16 heads, 8 KV heads,
    head_dim 128, intermediate 3072, vocab 151936, q/k RMSNorms, tied embeddings."""
    _llama(out, transformers.Qwen3Config(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers or 28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=1,
    ), cls=transformers.Qwen3ForCausalLM)


def mistral7b(out: Path, layers=None):
    """mistralai/Mistral-7B-v0.1's config (the mistral preset): hidden 4096, 32 layers, 32 heads,
    8 KV heads, head_dim 128, intermediate 14336, vocab 32000, sliding window 4096, untied."""
    _llama(out, transformers.MistralConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers or 32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=32000, max_position_embeddings=32768, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, sliding_window=4096,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    ), cls=transformers.MistralForCausalLM)


def qwen3moe30b(out: Path, layers=None):
    """Qwen/Qwen3-30B-A3B's config: hidden 2048, 48 layers, 32 heads, 4 KV heads, head_dim 128,
    128 experts of width 768, top 8 renormalized (norm_topk_prob), every layer sparse, vocab
    151936, untied embeddings, rope_theta 1e6. Built in bf16 on the device (fp32 would need 122 GB
    for the full model); save_pretrained writes each expert's 2D tensors, as the Hub has them."""
    cfg = transformers.Qwen3MoeConfig(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], num_hidden_layers=layers or 48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    _llama(out, cfg, cls=transformers.Qwen3MoeForCausalLM, dtype=torch.bfloat16)


def qwen2moe(out: Path, layers=None):
    """Qwen1.5-MoE-A2.7B's shape as Qwen2MoeConfig's defaults give it: hidden 2048, 24 layers, 16
    heads (no GQA), 60 experts of width 1408, top 4 without renormalization, a shared expert of
    width 5632 in every layer, vocab 151936, untied embeddings. Built in bf16 on the device."""
    cfg = transformers.Qwen2MoeConfig(num_hidden_layers=layers or 24, bos_token_id=0, eos_token_id=1)
    _llama(out, cfg, cls=transformers.Qwen2MoeForCausalLM, dtype=torch.bfloat16)


def olmoe(out: Path, layers=None):
    """OlmoeConfig's defaults: hidden 2048, 16 layers, 16 heads (no GQA), 64 experts of width 2048
    (intermediate_size), top 8 without renormalization, q/k norms over the whole projection, vocab
    50304, untied embeddings. Built in bf16 on the device."""
    cfg = transformers.OlmoeConfig(num_hidden_layers=layers or 16, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    _llama(out, cfg, cls=transformers.OlmoeForCausalLM, dtype=torch.bfloat16)


def flexolmo(out: Path, layers=None):
    """FlexOlmoConfig's defaults (FlexOlmo-7x7B-1T's shape): hidden 4096, 32 layers, 32 heads (no
    GQA), 7 experts of width 11008 (intermediate_size), top 5 without renormalization, OLMo 2's
    post-norm block and q/k norms, vocab 100352, untied embeddings. Built in bf16 on the device."""
    cfg = transformers.FlexOlmoConfig(num_hidden_layers=layers or 32, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    _llama(out, cfg, cls=transformers.FlexOlmoForCausalLM, dtype=torch.bfloat16)


def granitemoe3b(out: Path, layers=None):
    """A Granite-3B-A800M-sized MoE: hidden 1536, 32 layers, 24 heads, 8 KV heads, head_dim 64,
    40 experts of width 512 (intermediate_size), top 8, vocab 49155, tied embeddings, Granite 3's
    four scalars (embedding 12, attention 1/64, residual 0.22, logits 6); save_pretrained writes
    the experts stacked, as GraniteMoE checkpoints hold them. Built in bf16 on the device."""
    cfg = transformers.GraniteMoeConfig(
        hidden_size=1536, intermediate_size=512, num_hidden_layers=layers or 32, num_attention_heads=24,
        num_key_value_heads=8, num_local_experts=40, num_experts_per_tok=8, vocab_size=49155,
        max_position_embeddings=4096, rms_norm_eps=1e-6, embedding_multiplier=12.0, attention_multiplier=0.015625,
        residual_multiplier=0.22, logits_scaling=6.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1,
        pad_token_id=2)
    _llama(out, cfg, cls=transformers.GraniteMoeForCausalLM, dtype=torch.bfloat16)


CONFIG_ONLY = False


def _llama(out: Path, cfg, cls=transformers.LlamaForCausalLM, norm=(0.8, 1.2), dtype=torch.float32):
    if CONFIG_ONLY:
        cfg.architectures = [cls.__name__]
        cfg.save_pretrained(out)
        return
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            model = cls(cfg)
    finally:
        torch.set_default_dtype(prev)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(*norm)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = ROOT / "testdata" / "fixtures" / "llama-tiny" / f
        if src.exists():
            shutil.copy(src, out / f)


def levit128s(out: Path, layers=None):
    cfg = transformers.LevitConfig(num_labels=1000)
    if CONFIG_ONLY:
        cfg.save_pretrained(out)
        return
    torch.manual_seed(0)
    model = transformers.LevitForImageClassificationWithTeacher(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
    model.save_pretrained(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="llama1b,levit128s")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers of the decoder shapes (default: the real count)")
    ap.add_argument("--config-only", action="store_true", help="write each model's config.json, no weights")
    a = ap.parse_args()
    global CONFIG_ONLY
    CONFIG_ONLY = a.config_only
    makers = {"llama1b": llama1b, "llama8b": llama8b, "qwen2": qwen2, "qwen3": qwen3, "mistral7b": mistral7b,
              "gemma2b": gemma2b, "gemma7b": gemma7b, "olmo2_7b": olmo2_7b, "exaone4": exaone4, "ministral8b": ministral8b, "hunyuan7b": hunyuan7b, "helium2b": helium2b, "flexolmo": flexolmo, "glm4_9b": glm4_9b, "olmoe": olmoe, "phi3mini": phi3mini, "smollm3": smollm3, "granite2b": granite2b,
              "granitemoe3b": granitemoe3b, "qwen3moe30b": qwen3moe30b, "qwen2moe": qwen2moe,
              "levit128s": levit128s}
    for name in a.only.split(","):
        t = time.time()
        d = Path(a.out) / (name + (f"-{a.layers}l" if a.layers and name != "levit128s" else ""))
        d.mkdir(parents=True, exist_ok=True)
        makers[name](d, a.layers)
        print(f"made {name} in {d} ({time.time() - t:.1f}s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
