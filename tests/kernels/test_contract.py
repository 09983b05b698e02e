"""contract.json, read as data, against what the Python package does with it: the constants the
kernels use, the layer classes and the attributes they read and pack. The Go side checks the same
file against the registry (kernels/registry_test.go, kernels/contract_test.go)."""

import inspect
import json
from pathlib import Path

import torch
from transformers import LlamaConfig
from transformers.models.levit.modeling_levit import LevitClassificationLayer, LevitConvEmbeddings, MLPLayerWithBN
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm

import xpuinject_kernels
from xpuinject_kernels import attention, contract, layers, packing
from xpuinject_kernels.gemm import EPILOGUES

DATA = json.loads((Path(xpuinject_kernels.__file__).parent / "contract.json").read_text())


def test_constants_are_the_contracts():
    assert attention.SUPPORTED_HEAD_DIMS == tuple(DATA["attention_head_dims"])
    assert EPILOGUES == tuple(DATA["gemm_epilogues"]) == xpuinject_kernels.GEMM_EPILOGUES
    assert contract.DECODE_MAX_TOKENS == DATA["decode_max_tokens"] and contract.MIN_GEMM_DIM == DATA["min_gemm_dim"]
    assert (contract.NAME_ATTR, contract.VENDOR_ATTR) == (DATA["module_attrs"]["name"], DATA["module_attrs"]["vendor"])


def test_every_contract_layer_is_a_layer_class():
    assert set(DATA["layers"]) == set(layers.__all__)
    for name in DATA["layers"]:
        cls = getattr(layers, name)
        assert issubclass(cls, torch.nn.Module) and cls.__init__ is torch.nn.Module.__init__, name
    assert sorted(n for n in DATA["layers"] if DATA["layers"][n]["packed"]) == sorted(packing._PACKERS)


def test_packers_make_exactly_the_contracts_attributes():
    """Packing from a module's own children attaches the packed attributes contract.json names
    (optional biases aside) and reads only the children it lists as sources."""
    cfg = LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=1, vocab_size=97, attention_bias=True)
    cases = {
        "Attention": LlamaAttention(cfg, layer_idx=0),
        "SwiGLUMLP": LlamaMLP(cfg),
        "LinearBN": MLPLayerWithBN(32, 48),
        "BNLinear": LevitClassificationLayer(32, 10),
        "ConvBN": LevitConvEmbeddings(3, 16, kernel_size=3, stride=2, padding=1),
        "Linear": torch.nn.Linear(32, 16),
    }
    for name, module in cases.items():
        module = module.to(torch.bfloat16).eval()
        spec = DATA["layers"][name]
        assert all(isinstance(module._modules.get(s), torch.nn.Module) for s in spec["sources"]), name
        packing.pack(module, name)
        made = set(module._non_persistent_buffers_set)
        assert made <= set(spec["packed"].values()) and {spec["packed"][r] for r in ("weight", "qkv_weight", "gate_up_weight") if r in spec["packed"]} <= made, (name, made)
        assert all(module._buffers[a].dtype == torch.bfloat16 for a in made), name


def test_reads_name_real_attributes():
    """Every attribute a layer's contract entry says it reads exists on a module of a class it
    replaces (dotted names through the child), so a plan's reads can be checked on a model."""
    cfg = LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1)
    modules = {"RMSNorm": LlamaRMSNorm(64), "Attention": LlamaAttention(cfg, 0), "SwiGLUMLP": LlamaMLP(cfg),
               "DecoderLayer": LlamaDecoderLayer(cfg, 0), "ConvBN": LevitConvEmbeddings(3, 16, 3, 2, 1)}
    for name, module in modules.items():
        assert type(module).__name__ in DATA["layers"][name]["classes"]
        for r in DATA["layers"][name]["reads"]:
            obj = module
            for part in r.split("."):
                assert hasattr(obj, part), f"{name}: {type(module).__name__} has no {r}"
                obj = getattr(obj, part)
        # the layer's forward replaces exactly this forward (what kernels' validation checks)
        ref = [p.kind for p in inspect.signature(type(module).forward).parameters.values()]
        assert ref == [p.kind for p in inspect.signature(getattr(layers, name).forward).parameters.values()], name
