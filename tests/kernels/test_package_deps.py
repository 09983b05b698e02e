"""The kernel package imports nothing beyond the standard library, torch, triton and what `kernels`
itself depends on (huggingface_hub, PyYAML): kernel-builder's kernel requirements allow the
standard library, torch and the kernel, plus a closed allowlist of python-depends. transformers
and safetensors (which transformers brings) are imported only inside the functions that work on a
transformers model; numpy never (the interpreter fixes take Triton's interpreter's own)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "kernels" / "python" / "xpuinject_kernels"
ANYWHERE = {"torch", "triton", "kernels", "huggingface_hub", "yaml"}
LAZILY = {"transformers", "safetensors"}


def imports(path: Path):
    """(top-level module, line, inside a function) of every absolute import in path."""
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def walk(node, in_func):
        for child in ast.iter_child_nodes(node):
            f = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], child.lineno, in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module.split(".")[0], child.lineno, in_func))
            walk(child, f)

    walk(tree, False)
    return out


def test_package_imports_only_allowed_modules():
    files = sorted(PKG.glob("*.py"))
    assert len(files) >= 10, files
    bad = []
    for f in files:
        for mod, line, lazy in imports(f):
            if mod in sys.stdlib_module_names or mod in ANYWHERE or (lazy and mod in LAZILY):
                continue
            where = "inside a function" if lazy else "at module level"
            bad.append(f"{f.name}:{line}: imports {mod} {where}")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_numpy_import(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import os\n\ndef f():\n    import numpy as np\n    from transformers import X\n")
    assert imports(p) == [("os", 1, False), ("numpy", 4, True), ("transformers", 5, True)]
