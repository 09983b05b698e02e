"""The package's kernels as torch custom ops (`torch.library.custom_op`), so that torch.compile,
torch.export and fake-tensor tracing see each kernel as one opaque op with a known output
instead of tracing into Triton's launcher.

Namespace: the package's own module name, as kernel-builder's noarch `_ops.py` names its ops
(`_<name>_<build id>`, huggingface/kernels build2cmake/src/torch/ops_identifier.rs). An emitted
package is imported under its metadata id, `_<module>_<backend>_<digest>` (kernels/importer.py,
inject/emit/emit.go), so two packages in one process never share a namespace; this source tree is
`xpuinject_kernels`. A second import of the same files under the same name (a reload) takes
the next free `<name>_<n>`.

When ops are called: each public kernel function calls its op (`torch.ops.<ns>.<name>`)
whenever a tracer is watching -- torch.compile, export, fake or functional tensors -- and the
op's implementation directly otherwise. Both run the same function; eager skips only the
dispatcher, which costs more than the launch itself (torch 2.11 on a 2-core dev VM: a custom op
whose function returns an empty tensor took 41 us a call, the function alone 3 us,
torch.compiler.is_compiling() 0.3 us), and eager decode steps are bound by the host.

Under inductor each op is a fallback: compiled code calls the op's kernel. The ops are
registered as fallbacks before inductor lowers a graph, the way inductor itself would register
them (torch/_inductor/graph.py GraphLowering.call_function, implicit fallbacks), because inductor's
own path first formats the op's IR arguments for an info log whether or not it is shown, and that
text nests every producer of each argument: an op first met after N decoder layers (the
lm_head's GEMM) formats a text exponential in N (41 MB and 7 s at 5 layers; the 8-layer
Qwen3-30B-A3B shape did not finish compiling in 230 s on an H200).
"""

from __future__ import annotations

import sys
from typing import Callable, Optional, Sequence

import torch

__all__ = ["NAMESPACE", "as_inductor_fallbacks", "call", "define", "op", "traced"]


def _taken(ns: str) -> bool:
    try:
        getattr(getattr(torch.ops, ns), "rms_norm")
    except (AttributeError, RuntimeError):
        return False
    return True


def _namespace() -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in (__package__ or "xpuinject_kernels"))
    ns, n = base, 1
    while _taken(ns):
        n += 1
        ns = f"{base}_{n}"
    return ns


NAMESPACE = _namespace()

_OPS = {}
# Whether every op defined so far is an inductor fallback.
_LOWERED = False


def define(name: str, schema: str, impl: Callable, fake: Callable, mutates: Sequence[str] = ()) -> None:
    """Register `impl` as the op `<NAMESPACE>::<name>` with the given schema (arguments and
    result, e.g. "(Tensor x, float eps) -> Tensor") and `fake`, which returns empty tensors of the
    shapes, dtypes and strides `impl` returns (and checks its arguments the way impl does).
    `mutates` names the Tensor arguments impl writes in place."""
    global _LOWERED
    o = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=tuple(mutates), schema=schema)

    def traced_fake(*args, **kwargs):
        if not _LOWERED:
            as_inductor_fallbacks()
        return fake(*args, **kwargs)

    o.register_fake(traced_fake)
    _OPS[name] = getattr(getattr(torch.ops, NAMESPACE), name).default
    _LOWERED = False


def as_inductor_fallbacks() -> bool:
    """Register every op as an inductor fallback, with the layout constraint inductor's implicit
    fallback gives a custom op (its tag, else torch._functorch.config's default), once inductor is
    loaded; True when they all are. Runs from the fake kernels: inductor traces a graph with fake
    tensors (AOT autograd, inside compile_fx) before it lowers it, and a backend that never loads
    inductor costs nothing. torch APIs that may move: should they, inductor's own path remains."""
    global _LOWERED
    lowering = sys.modules.get("torch._inductor.lowering")
    if lowering is None:
        return False
    try:
        from torch._library.utils import get_layout_constraint_tag

        for o in _OPS.values():
            if o not in lowering.lowerings:
                constraint = lowering.tag_to_layout_constraint(get_layout_constraint_tag(o, with_default=True))
                lowering.make_fallback(o, layout_constraint=constraint, warn=False)
    except (AttributeError, ImportError, TypeError):
        return False
    _LOWERED = True
    return True


def op(name: str):
    """The registered op `torch.ops.<NAMESPACE>.<name>.default`."""
    return _OPS[name]


def call(name: str, *args):
    """Call the op `name` for a tracer. Under no_grad: the kernels are inference-only and have no
    autograd formula, and a trace with grad mode on (torch.compile of a model outside no_grad)
    would otherwise try to differentiate through them. Eager calls never record autograd either
    (the launchers write into fresh tensors), so both compute the same thing."""
    with torch.no_grad():
        return _OPS[name](*args)


def traced(t: Optional[torch.Tensor]) -> bool:
    """Whether a call must go through the op: under torch.compile (dynamo), or with a tensor that
    is not a plain one (fake, functional, proxy-wrapped or any subclass)."""
    return torch.compiler.is_compiling() or type(t) is not torch.Tensor
