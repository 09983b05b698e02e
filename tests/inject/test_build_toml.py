"""build.toml names every file type the package needs: kernel-builder builds the variants from
torch-ext/<module>/, copying only files whose extension `pyext` lists ("py", "pyi" by default;
nix-builder/lib/source-set.nix in huggingface/kernels). A variant rebuilt that way loads and
carries out its plan, as the emitted one does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: kernels depends on tomli there
    import tomli as tomllib

import torch
import transformers

FIXTURES = Path(__file__).resolve().parents[2] / "testdata" / "fixtures"


def rebuilt_variant(package, dest):
    """What kernel-builder would put in build/torch-<backend>/: torch-ext files of pyext's extensions."""
    cfg = tomllib.loads((package / "build.toml").read_text())
    pyext = cfg["torch-noarch"]["pyext"]
    (module,) = [p for p in (package / "torch-ext").iterdir() if p.is_dir()]
    for f in module.rglob("*"):
        if f.is_file() and f.suffix[1:] in pyext:
            out = dest / f.relative_to(module)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out)
    return pyext


def test_variant_rebuilt_from_pyext_loads_and_checks_its_plan(llama_odd_run, tmp_path):
    from kernels import get_local_kernel

    package = llama_odd_run / "package"
    pkg = tmp_path / "pkg"
    variant = pkg / "build" / "torch-cuda"
    pyext = rebuilt_variant(package, variant)
    assert pyext == ["json", "py", "yaml"]
    # The rebuilt copy under a module name of its own: a second import under the first's name would
    # register its ops under another namespace and share the first's submodules.
    meta = json.loads((package / "build" / "torch-cuda" / "metadata.json").read_text())
    meta["id"] += "_rebuilt"
    (variant / "metadata.json").write_text(json.dumps(meta))
    # the rebuilt variant holds every file the emitted one does (its digest aside)
    emitted = {p.relative_to(package / "build" / "torch-cuda") for p in (package / "build" / "torch-cuda").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert emitted == {p.relative_to(variant) for p in variant.rglob("*") if p.is_file()}
    k = get_local_kernel(pkg, backend="cuda")
    assert Path(k.__file__).resolve().parent == variant.resolve() and k.__name__ == meta["id"]
    model = transformers.LlamaForCausalLM.from_pretrained(FIXTURES / "llama-odd", dtype=torch.bfloat16).eval()
    r = k.inject(model, packed=llama_odd_run / "packed", check_only=True)
    assert r["checked"] and r["packed_tensors"] == 7


def test_without_pyext_the_data_files_are_lost(llama_odd_run, tmp_path):
    """The default ("py", "pyi") drops contract.json, the gpus/*.json data and plan.yaml."""
    package = llama_odd_run / "package"
    (module,) = [p for p in (package / "torch-ext").iterdir() if p.is_dir()]
    lost = sorted(f.name for f in module.rglob("*") if f.is_file() and f.suffix not in (".py", ".pyi"))
    assert lost == ["contract.json", "h100.json", "h200.json", "plan.yaml"]
