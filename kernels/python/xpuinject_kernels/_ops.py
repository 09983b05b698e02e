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
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

__all__ = ["NAMESPACE", "call", "define", "op", "traced"]


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


def define(name: str, schema: str, impl: Callable, fake: Callable, mutates: Sequence[str] = ()) -> None:
    """Register `impl` as the op `<NAMESPACE>::<name>` with the given schema (arguments and
    result, e.g. "(Tensor x, float eps) -> Tensor") and `fake`, which returns empty tensors of the
    shapes, dtypes and strides `impl` returns (and checks its arguments the way impl does).
    `mutates` names the Tensor arguments impl writes in place."""
    o = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=tuple(mutates), schema=schema)
    o.register_fake(fake)
    _OPS[name] = getattr(getattr(torch.ops, NAMESPACE), name).default


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
