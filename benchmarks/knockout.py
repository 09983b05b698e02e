"""Knock launches out of an injected model's decode step, to bound what fusing them away can save.

A launch that is knocked out does not run at all: its output is left as it was (the step's
numbers are wrong by design). The step's time without it is the floor any fusion of that launch
into a neighbour can reach, since a fused form still does the launch's work somewhere. Used by
profile_decode.py (KNOCK_OUT=name[,name...] in its environment), and so by ab_step.py's variants:

    ab_step.py MODEL RUN --variant shipped --variant no-router:KNOCK_OUT=router ...

  input-norm   every rms_norm launch returns its input (the decoder layers' input norms, the
               final norm, and q/k norms wherever they run in a launch of their own)
  post-norm    every add_rms_norm launch (the post-attention add + RMSNorm) returns its inputs
               (residual, attention output)
  router       the MoE router launch: every layer routes to experts 0..top_k-1 with equal
               weights, from tensors made once, outside the step
  attn-reduce  the decode attention's split reduce (its cache-length advance goes with it, so the
               step reads the same keys every time)
"""

from __future__ import annotations

import contextlib
import sys

NAMES = ("input-norm", "post-norm", "router", "attn-reduce")


def parse(text: str) -> list:
    """'a,b' -> ['a', 'b'], every name one of NAMES."""
    names = [n.strip() for n in (text or "").replace("+", ",").split(",") if n.strip()]
    bad = [n for n in names if n not in NAMES]
    if bad:
        raise ValueError(f"KNOCK_OUT: unknown {', '.join(bad)} (want a comma-separated subset of {', '.join(NAMES)})")
    return names


def _sub(pkg, name: str):
    """The package's own submodule `name` (a package carries its own copy of the kernels)."""
    mod = sys.modules.get(f"{pkg.__name__}.{name}")
    if mod is None:
        raise RuntimeError(f"knockout: the package {pkg.__name__} has no module {name!r}")
    return mod


def _modules(pkg) -> list:
    prefix = pkg.__name__ + "."
    return [m for n, m in sorted(sys.modules.items()) if n.startswith(prefix) and m is not None]


class _NoLaunch:
    """Stands in for a @triton.jit kernel: kernel[grid](...) launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def apply(pkg, names: list) -> list:
    """Patch the loaded package so the named launches do not run; returns what was patched as
    (module, attribute, what it held), for restore()."""
    import torch

    done = []

    def patch(mod, attr, value):
        done.append((mod, attr, getattr(mod, attr)))
        setattr(mod, attr, value)

    def everywhere(attr, value):
        # the module that defines it and every module that imported it by name (a call site that
        # imports it per call reads the defining module's)
        real = getattr(_sub(pkg, "rmsnorm"), attr)
        for mod in _modules(pkg):
            if getattr(mod, attr, None) is real:
                patch(mod, attr, value)

    for name in names:
        if name == "input-norm":
            everywhere("rms_norm", lambda x, weight, eps, config=None: x)
        elif name == "post-norm":
            everywhere("add_rms_norm", lambda x, residual, weight, eps, config=None: (residual, x))
        elif name == "router":
            moe = _sub(pkg, "moe")
            made = {}

            def fixed_route(x2, router_w, top_k, fused=None, norm=None):
                key = (x2.shape[0], top_k, x2.device)
                if key not in made:
                    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                        raise RuntimeError("knockout: the router's stand-in made its tensors during a capture; "
                                           "run a warm-up step first")
                    t = x2.shape[0]
                    ids = torch.arange(top_k, dtype=torch.int32, device=x2.device).repeat(t, 1)
                    vals = torch.full((t, top_k), 1.0 / top_k, dtype=torch.float32, device=x2.device)
                    made[key] = (vals, ids)
                return made[key]
            patch(moe, "decode_route", fixed_route)
        elif name == "attn-reduce":
            patch(_sub(pkg, "attention"), "_decode_reduce_kernel", _NoLaunch())
    return done


def describe(patched: list) -> str:
    return ", ".join(f"{mod.__name__.rsplit('.', 1)[-1]}.{attr}" for mod, attr, _ in patched)


def restore(patched: list) -> None:
    for mod, attr, old in reversed(patched):
        setattr(mod, attr, old)


@contextlib.contextmanager
def knocked(pkg, names: list):
    """apply() for the block, restored after it (a process that loads the package again keeps
    its launches)."""
    patched = apply(pkg, names)
    try:
        yield patched
    finally:
        restore(patched)
