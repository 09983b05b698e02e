"""transformers' own kernels route with this package, run as a script (the test runs it with
either kernels release first on sys.path): `python use_kernels_route.py PACKAGE FIXTURE`.

The package marks the classes transformers leaves unmarked (mark_transformers_classes), a
KernelConfig maps every mark to the package's layer through kernels' LocalLayerRepository
(kernel_config_mapping), and the model is loaded with `use_kernels=True` -- where transformers takes
the installed kernels release (5.17: 0.16.x). Where it does not (0.17.x), transformers refuses
use_kernels, and the script runs what `PreTrainedModel.set_use_kernels` runs inside (KernelConfig's
sanitize and compatible mapping, then kernels.kernelize under that mapping), on the same
KernelConfig. Prints one JSON object: the route taken, what was bound, and the checks.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import kernels  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import KernelConfig  # noqa: E402
from transformers.utils import import_utils  # noqa: E402
from transformers.utils import kernel_config as kernel_config_module  # noqa: E402


def cpu_mapping_allowed() -> None:
    """transformers 5.17's KernelConfig maps accelerator devices only (kernel_config.py
    add_to_mapping_local); these kernels run on the CPU only under Triton's interpreter, as here.
    Map "cpu" the way it maps "cuda"; nothing else changes."""
    orig = kernel_config_module.add_to_mapping_local

    def add_to_mapping_local(layer_name, device, repo_name, mode, compatible_mapping):
        orig(layer_name, "cuda" if device == "cpu" else device, repo_name, mode, compatible_mapping)
        if device == "cpu":
            compatible_mapping[layer_name] = {"cpu": compatible_mapping[layer_name]["cuda"]}

    kernel_config_module.add_to_mapping_local = add_to_mapping_local


def main() -> None:
    package, fixture = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    xk = kernels.get_local_kernel(package)
    cfg = transformers.AutoConfig.from_pretrained(fixture)
    cls = getattr(transformers, cfg.architectures[0])
    marked = xk.mark_transformers_classes()
    kc = KernelConfig(xk.kernel_config_mapping(package, cfg.model_type), use_local_kernel=True)
    cpu_mapping_allowed()
    launches = sum(xk._backend.launch_counts.values())
    refused = None
    if import_utils.is_kernels_available():
        # from_pretrained(use_kernels=True, kernel_config=...) with a local package fails inside
        # transformers 5.17 (register_kernel_replacements_and_fusions turns every mapping value
        # into a (repo, metadata) tuple, which create_compatible_mapping's local branch then
        # splits as a string); its public set_use_kernels takes the same KernelConfig after loading.
        route = "set_use_kernels(True, kernel_config)"
        model = cls.from_pretrained(fixture, dtype=torch.bfloat16).eval()
        model.set_use_kernels(True, kc)
    else:
        route = "set_use_kernels steps"
        try:
            cls.from_pretrained(fixture, dtype=torch.bfloat16).set_use_kernels(True, KernelConfig(dict(kc.kernel_mapping), use_local_kernel=True))
        except ValueError as e:
            refused = str(e)
        model = cls.from_pretrained(fixture, dtype=torch.bfloat16).eval()
        kc.sanitize_kernel_mapping(model)
        kc.create_compatible_mapping(model)
        with kernels.use_kernel_mapping(kc.kernel_mapping, inherit_mapping=False):
            kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cpu")
    # the first class with a forward names it (FusedSwiGLUMLP shares SwiGLUMLP's)
    layer_of = {}
    for n in xk.layers.__all__:
        layer_of.setdefault(getattr(xk.layers, n).forward, n)
    bound = sorted((p, layer_of[m.forward.__func__]) for p, m in model.named_modules()
                   if isinstance(m.__dict__.get("forward"), types.MethodType) and m.forward.__func__ in layer_of)
    supported = sorted((p, layer) for p, layer in xk.supported_bindings(model) if layer != "LMHead")

    # The same layers bound by hand, as kernels binds them: the route must compute exactly this.
    ref = cls.from_pretrained(fixture, dtype=torch.bfloat16).eval()
    named = dict(ref.named_modules())
    for p, layer in bound:
        named[p].forward = types.MethodType(getattr(xk.layers, layer).forward, named[p])
    stock = cls.from_pretrained(fixture, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out, want, st = (m(input_ids=ids).logits.float() for m in (model, ref, stock))
    print(json.dumps({
        "kernels": kernels.__version__,
        "transformers_takes_kernels": import_utils.is_kernels_available(),
        "route": route,
        "refused": refused,
        "marked": marked,
        "mapping": sorted(kc.kernel_mapping),
        "bound": bound,
        "supported": supported,
        "kernels_ran": sum(xk._backend.launch_counts.values()) > launches,
        "equal_to_bound_by_hand": bool(torch.equal(out, want)),
        "equal_to_stock": bool(torch.equal(out, st)),
        "max_abs_vs_stock": float((out - st).abs().max()),
        "layers": dict(collections.Counter(layer for _, layer in bound)),
    }))


if __name__ == "__main__":
    main()
