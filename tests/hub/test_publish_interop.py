"""Interop: `xpuinject push` publishes to the test Hub; the real huggingface_hub downloads
the kernel repo and the real `kernels` package loads and kernelizes with it.

The test Hub is cmd/hubtestserver (hub/hubtest): push goes through its publish routes
(repo create, branch, preupload, LFS batch/upload/verify, NDJSON commit), which validate
every request against the protocol, then huggingface_hub's snapshot_download
(repo_type="kernel", accepted by huggingface_hub 1.x: constants.REPO_TYPES_WITH_KERNEL)
reads it back through the download routes, and kernels.get_local_kernel loads the tree.

The package is made by hand here (the package writer is another part of xpuinject):
noarch variants torch-cpu / torch-cuda / torch-xpu, each with __init__.py exposing
`layers`, layers.py with a stateless layer, metadata.json, plus a binary file that the
Hub stores through LFS, and the card README.md.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_interopPublishToken"
REPO = "xpuinject-test/tiny-kernels"

LAYERS_PY = textwrap.dedent(
    """\
    import torch


    class TinyRMSNorm(torch.nn.Module):
        has_backward = False

        def forward(self, hidden_states):
            var = hidden_states.pow(2).mean(-1, keepdim=True)
            return self.weight * hidden_states * torch.rsqrt(var + self.variance_epsilon)
    """
)
INIT_PY = 'from . import layers\n\n__all__ = ["layers"]\n'
CARD = textwrap.dedent(
    """\
    ---
    library_name: kernels
    license: apache-2.0
    base_model: xpuinject-test/tiny-llama
    ---

    # tiny-kernels

    RMSNorm for xpuinject-test/tiny-llama (interop test package).
    """
)
# NUL bytes: the test Hub's preupload answers "lfs" for binary samples.
TABLE = bytes(range(256)) * 4


def package_files() -> dict[str, bytes]:
    files = {"README.md": CARD.encode()}
    for backend in ("cpu", "cuda", "xpu"):
        v = f"build/torch-{backend}/"
        files[v + "__init__.py"] = INIT_PY.encode()
        files[v + "layers.py"] = LAYERS_PY.encode()
        meta = {
            "name": "tiny-kernels",
            "id": "tiny_kernels",
            "version": 1,
            "license": "apache-2.0",
            "python-depends": [],
            "backend": {"type": backend},
        }
        files[v + "metadata.json"] = json.dumps(meta).encode()
    files["build/torch-cpu/table.bin"] = TABLE
    return files


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is not on PATH: this test builds xpuinject and cmd/hubtestserver")
    out = tmp_path_factory.mktemp("bin")
    for pkg in ("xpuinject", "hubtestserver"):
        subprocess.run([go, "build", "-o", str(out / pkg), f"./cmd/{pkg}"], cwd=ROOT, check=True)
    return out


@pytest.fixture()
def hub_server(binaries, tmp_path):
    # hubtestserver wants at least one --repo to serve; the placeholder is never used.
    placeholder = write_tree(tmp_path / "placeholder", {"README.md": b"placeholder\n"})
    proc = subprocess.Popen(
        [
            str(binaries / "hubtestserver"),
            "--repo",
            f"model:xpuinject-test/placeholder={placeholder}",
            "--token",
            TOKEN,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            proc.kill()
            pytest.fail(f"hubtestserver did not start: {url!r} {proc.stderr.read()}")
        yield url
    finally:
        proc.stdin.close()  # the server exits when its stdin closes
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_push(binaries, endpoint, pkg_dir, home, *extra):
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(home),
    }
    return subprocess.run(
        [str(binaries / "xpuinject"), "push", str(pkg_dir), "--repo-id", REPO, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# Runs in a fresh interpreter so that HF_ENDPOINT is read at huggingface_hub's import.
DOWNLOAD_AND_LOAD = textwrap.dedent(
    """\
    import json, sys
    from pathlib import Path

    import torch
    from huggingface_hub import hf_hub_download, snapshot_download
    from kernels import LocalLayerRepository, Mode, get_local_kernel, kernelize
    from kernels import use_kernel_forward_from_hub, use_kernel_mapping

    repo = sys.argv[1]
    snap = Path(snapshot_download(repo, repo_type="kernel", revision="v1"))
    card = hf_hub_download(repo, "README.md", repo_type="kernel", revision="main")

    kernel = get_local_kernel(snap)
    layer = kernel.layers.TinyRMSNorm

    # Bind the layer the way kernelize does, onto a module whose own forward is the
    # identity: only the downloaded layer can produce RMSNorm.
    @use_kernel_forward_from_hub("TinyRMSNorm")
    class Norm(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(0.5, 2.0, n))
            self.variance_epsilon = 1e-6

        def forward(self, hidden_states):
            return hidden_states

    torch.manual_seed(0)
    x = torch.randn(3, 8)
    model = torch.nn.Sequential(Norm(8))
    mapping = {"TinyRMSNorm": {"cpu": LocalLayerRepository(snap, layer_name="TinyRMSNorm")}}
    with use_kernel_mapping(mapping):
        model = kernelize(model, mode=Mode.INFERENCE, device="cpu")
    with torch.no_grad():
        y = model(x)
        w = model[0].weight
        ref = w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    files = sorted(
        str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()
    )
    print(json.dumps({
        "snapshot": str(snap),
        "files": files,
        "card": Path(card).read_text(),
        "module_file": kernel.__file__,
        "has_layers": hasattr(kernel, "layers"),
        "layer_is_module": issubclass(layer, torch.nn.Module),
        "layer_name": layer.__name__,
        "max_err_vs_rmsnorm": float((y - ref).abs().max()),
        "max_diff_vs_identity": float((y - x).abs().max()),
    }))
    """
)


def download_and_load(endpoint, home):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HF_") and k not in ("HUGGINGFACE_HUB_CACHE", "HUGGINGFACE_TOKEN")
    }
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    # cwd outside the repo: "python -c" puts the cwd first on sys.path, and the repo's
    # kernels/ folder must not shadow the kernels package.
    res = subprocess.run(
        [sys.executable, "-c", DOWNLOAD_AND_LOAD, REPO],
        cwd=home.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), env


def test_push_then_download_and_load(binaries, hub_server, tmp_path):
    files = package_files()
    pkg = write_tree(tmp_path / "pkg", files)

    # A dry run sends nothing: the repository does not exist afterwards.
    dry = run_push(binaries, hub_server, pkg, tmp_path / "push-home", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == f"create repo kernel {REPO} (public; an existing repo is kept)"
    assert "upload mode build/torch-cpu/table.bin lfs (predicted)" in lines
    assert lines[-1].startswith('commit main "xpuinject ')
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{hub_server}/api/kernels/{REPO}", timeout=10)
    assert info.value.headers.get("X-Error-Code") == "RepoNotFound"

    res = run_push(binaries, hub_server, pkg, tmp_path / "push-home")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"published {REPO} v1: 11 added, 0 deleted, 0 unchanged (1 through LFS)\n"), res.stdout
    assert TOKEN not in res.stdout + res.stderr

    out, _ = download_and_load(hub_server, tmp_path / "dl-home")

    build = {k: v for k, v in files.items() if k.startswith("build/")}
    assert out["files"] == sorted(build), "v1 must hold exactly build/** (the card lives on main)"
    snap = Path(out["snapshot"])
    for rel, data in build.items():
        assert (snap / rel).read_bytes() == data, rel
    assert out["card"] == CARD
    assert out["has_layers"] and out["layer_is_module"] and out["layer_name"] == "TinyRMSNorm"
    assert Path(out["module_file"]).is_relative_to(snap / "build")
    assert out["max_err_vs_rmsnorm"] < 1e-6, out
    assert out["max_diff_vs_identity"] > 0.1, "kernelize did not put the downloaded layer in"


def test_push_update_removes_stale_files(binaries, hub_server, tmp_path):
    files = package_files()
    files["build/torch-xpu/old_kernel.py"] = b"# gone in the next version\n"
    first = run_push(binaries, hub_server, write_tree(tmp_path / "pkg1", files), tmp_path / "home")
    assert first.returncode == 0, first.stderr

    del files["build/torch-xpu/old_kernel.py"]
    files["build/torch-xpu/layers.py"] += b"\n# revised\n"
    second = run_push(binaries, hub_server, write_tree(tmp_path / "pkg2", files), tmp_path / "home")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith(f"published {REPO} v1: 1 added, 1 deleted, 10 unchanged (0 through LFS)\n"), second.stdout

    out, _ = download_and_load(hub_server, tmp_path / "dl-home")
    assert "build/torch-xpu/old_kernel.py" not in out["files"]
    snap = Path(out["snapshot"])
    assert (snap / "build/torch-xpu/layers.py").read_bytes() == files["build/torch-xpu/layers.py"]


def test_push_with_wrong_token_publishes_nothing(binaries, hub_server, tmp_path):
    pkg = write_tree(tmp_path / "pkg", package_files())
    env = {**os.environ, "HF_ENDPOINT": hub_server, "HF_TOKEN": "hf_notTheRightOne", "HF_HOME": str(tmp_path / "h")}
    res = subprocess.run(
        [str(binaries / "xpuinject"), "push", str(pkg), "--repo-id", REPO],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    assert "HTTP 401" in res.stderr and "HF_TOKEN" in res.stderr
    assert "hf_notTheRightOne" not in res.stderr + res.stdout
    assert res.stdout == ""
