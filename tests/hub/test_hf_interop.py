"""Interop of xpuinject's HF cache with the real huggingface_hub, both ways.

A test Hub (cmd/hubtestserver, the Go hub/hubtest server) serves the fixture checkpoints in
testdata/fixtures; `xpuinject fetch` and huggingface_hub download from it through HF_ENDPOINT,
and each must read what the other wrote with HF_HUB_OFFLINE=1 / local_files_only=True.
huggingface_hub reads HF_* variables at import, so every Python-side step runs in a fresh
subprocess with its own environment.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"
TOKEN = "hf_interopSECRET0123456789abcdef"
REPOS = {
    "org/llama-tiny": FIXTURES / "llama-tiny",
    "org/llama-sharded": FIXTURES / "llama-sharded",
    "org/gated-tiny": FIXTURES / "llama-tiny",
}


@pytest.fixture(scope="session")
def bins(tmp_path_factory) -> dict[str, Path]:
    """Builds xpuinject and hubtestserver from this checkout."""
    out = tmp_path_factory.mktemp("bin")
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-buildvcs=false")
    built = {}
    for name in ("xpuinject", "hubtestserver"):
        subprocess.run(["go", "build", "-o", str(out / name), f"./cmd/{name}"], cwd=ROOT, env=env, check=True)
        built[name] = out / name
    return built


class HubServer:
    def __init__(self, binary: Path, *extra: str):
        args = [str(binary), "--token", TOKEN, "--gated", "org/gated-tiny", *extra]
        for repo, folder in REPOS.items():
            args += ["--repo", f"{repo}={folder}"]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise RuntimeError(f"hubtestserver did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line

    def stop(self):
        self.proc.stdin.close()  # the server exits when its stdin closes
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="session")
def hub_server(bins):
    srv = HubServer(bins["hubtestserver"])
    yield srv
    srv.stop()
    assert srv.proc.returncode == 0, srv.proc.stderr.read()


def dead_endpoint() -> str:
    # Port 9 (discard) on loopback: nothing listens there in the test environment.
    return "http://127.0.0.1:9"


def base_env(cache: Path, endpoint: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "TRANSFORMERS_OFFLINE"}
    env.update(HF_HUB_CACHE=str(cache), HF_HOME=str(cache.parent / "hf-home"), HF_ENDPOINT=endpoint,
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.update(extra)
    return env


def xpuinject(bins, env, *args, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run([str(bins["xpuinject"]), *args], env=env, capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"xpuinject {args} exit {p.returncode}: {p.stderr}")
    return p


def python(env, code: str) -> dict:
    """Runs code in a fresh interpreter; the code prints one JSON object as its last line."""
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"python failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


READ_OFFLINE = """
import json, os
from huggingface_hub import snapshot_download, hf_hub_download
repo, files = {repo!r}, {files!r}
snap = snapshot_download(repo, local_files_only=True)
got = {{}}
for f in files:
    p = hf_hub_download(repo, f, local_files_only=True)
    assert os.path.dirname(p) == snap, (p, snap)
    got[f] = open(p, "rb").read().hex()
print(json.dumps({{"snapshot": snap, "files": got}}))
"""


def blobs(cache: Path, repo: str) -> dict[str, tuple[int, int]]:
    d = cache / ("models--" + repo.replace("/", "--")) / "blobs"
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in d.iterdir()}


@pytest.mark.parametrize("repo", ["org/llama-tiny", "org/llama-sharded"])
def test_xpuinject_cache_read_by_huggingface_hub(bins, hub_server, tmp_path, repo):
    cache = tmp_path / "hub"
    p = xpuinject(bins, base_env(cache, hub_server.url), "fetch", repo)
    snap = p.stdout.strip()
    assert p.stdout.count("\n") == 1 and Path(snap).is_dir()
    fixture = REPOS[repo]
    files = sorted(f.name for f in fixture.iterdir())
    # Python, offline, against a dead endpoint: reads only what xpuinject wrote.
    got = python(base_env(cache, dead_endpoint(), HF_HUB_OFFLINE="1"), READ_OFFLINE.format(repo=repo, files=files))
    assert got["snapshot"] == snap
    for f in files:
        assert bytes.fromhex(got["files"][f]) == (fixture / f).read_bytes(), f
    # The refs file holds the commit with no newline; snapshot links are relative.
    folder = cache / ("models--" + repo.replace("/", "--"))
    assert (folder / "refs" / "main").read_text() == Path(snap).name
    for link in Path(snap).iterdir():
        assert link.is_symlink() and not os.readlink(link).startswith("/")

    # Online, huggingface_hub finds every blob already there under the same names and
    # downloads nothing again (the blobs keep their inode and mtime).
    before = blobs(cache, repo)
    out = python(base_env(cache, hub_server.url),
                 f"import json; from huggingface_hub import snapshot_download; print(json.dumps({{'s': snapshot_download({repo!r})}}))")
    assert out["s"] == snap
    assert blobs(cache, repo) == before


@pytest.mark.parametrize("repo", ["org/llama-tiny", "org/llama-sharded"])
def test_huggingface_hub_cache_read_by_xpuinject(bins, hub_server, tmp_path, repo):
    cache = tmp_path / "hub"
    out = python(base_env(cache, hub_server.url),
                 f"import json; from huggingface_hub import snapshot_download; print(json.dumps({{'s': snapshot_download({repo!r})}}))")
    snap = out["s"]
    before = blobs(cache, repo)
    # Offline, with no reachable Hub: the snapshot huggingface_hub made.
    p = xpuinject(bins, base_env(cache, dead_endpoint(), HF_HUB_OFFLINE="1"), "fetch", repo)
    assert p.stdout == snap + "\n"
    # Not offline, but the Hub is unreachable: the cached snapshot with a warning.
    p = xpuinject(bins, base_env(cache, dead_endpoint()), "fetch", repo)
    assert p.stdout == snap + "\n"
    assert "using the cached snapshot" in p.stderr
    # Online: same blob names, nothing downloaded again.
    p = xpuinject(bins, base_env(cache, hub_server.url), "fetch", repo)
    assert p.stdout == snap + "\n"
    assert blobs(cache, repo) == before
    assert "cached  config.json" in p.stderr
    # Offline and asking for files huggingface_hub's listing says are not cached.
    p = xpuinject(bins, base_env(cache, dead_endpoint(), HF_HUB_OFFLINE="1"), "fetch", repo, "--include", "*.bin", check=False)
    assert p.returncode == 1 and "*.bin" in p.stderr and p.stdout == ""


def test_offline_not_cached_says_what_is_missing(bins, tmp_path):
    cache = tmp_path / "hub"
    p = xpuinject(bins, base_env(cache, dead_endpoint(), HF_HUB_OFFLINE="1"), "fetch", "org/llama-tiny", check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert "HF_HUB_OFFLINE" in p.stderr and "refs/main" in p.stderr


def test_gated_repo_token_never_leaks(bins, hub_server, tmp_path):
    cache = tmp_path / "hub"
    p = xpuinject(bins, base_env(cache, hub_server.url), "fetch", "org/gated-tiny", check=False)
    assert p.returncode == 1 and "HF_TOKEN" in p.stderr and "gated" in p.stderr
    # Token from the token file ($HF_HOME/token), as `hf auth login` writes it.
    env = base_env(cache, hub_server.url)
    Path(env["HF_HOME"]).mkdir(parents=True, exist_ok=True)
    (Path(env["HF_HOME"]) / "token").write_text(TOKEN)
    p = xpuinject(bins, env, "fetch", "org/gated-tiny")
    assert TOKEN not in p.stdout + p.stderr
    wrong = xpuinject(bins, base_env(cache, hub_server.url, HF_TOKEN="hf_wrongWRONGwrong0000"), "fetch", "org/gated-tiny",
                      "--include", "*.bin", check=False)
    # cached + include that matches nothing online -> error; the wrong token is not echoed either
    assert "hf_wrongWRONGwrong0000" not in wrong.stdout + wrong.stderr
    for f in cache.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux `script` (a pty) is not installed")
def test_progress_bars_on_a_terminal_only(bins, tmp_path):
    slow = HubServer(bins["hubtestserver"], "--rate", "400000")
    try:
        env = base_env(tmp_path / "hub", slow.url)
        cmd = f"{bins['xpuinject']} fetch org/llama-sharded --workers 2"
        p = subprocess.run(["script", "-q", "-e", "-c", cmd, "/dev/null"], env=env, capture_output=True, timeout=120)
        tty = p.stdout.decode()
        assert p.returncode == 0, tty
        assert "\x1b[2K" in tty and "total 9/9 files" in tty and "100%" in tty and "kB/s" in tty and "ETA" in tty
        assert "model-00001-of-00004.safetensors [" in tty  # a per-file bar
        # Piped: plain lines, no escape sequences.
        p2 = xpuinject(bins, base_env(tmp_path / "hub2", slow.url), "fetch", "org/llama-sharded")
        assert "\x1b" not in p2.stderr and "fetched model-00001-of-00004.safetensors" in p2.stderr
    finally:
        slow.stop()


def test_interrupt_leaves_resumable_partial(bins, tmp_path):
    slow = HubServer(bins["hubtestserver"], "--rate", "150000")
    try:
        cache = tmp_path / "hub"
        env = base_env(cache, slow.url)
        proc = subprocess.Popen([str(bins["xpuinject"]), "fetch", "org/llama-tiny"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        blobdir = cache / "models--org--llama-tiny" / "blobs"
        deadline = time.time() + 30
        while time.time() < deadline:
            partial = [p for p in blobdir.glob("*.incomplete")] if blobdir.exists() else []
            if partial and partial[0].stat().st_size > 100_000:
                break
            time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail("no partial download appeared")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        size = (cache / "models--org--llama-tiny" / "blobs").glob("*.incomplete").__next__().stat().st_size
        weights = FIXTURES / "llama-tiny" / "model.safetensors"
        assert 0 < size < weights.stat().st_size
        snap_weights = list((cache / "models--org--llama-tiny").glob("snapshots/*/model.safetensors"))
        assert snap_weights == []  # never a visible partial file
        p = xpuinject(bins, env, "fetch", "org/llama-tiny")
        snap = Path(p.stdout.strip())
        assert (snap / "model.safetensors").read_bytes() == weights.read_bytes()
        assert not list(blobdir.glob("*.incomplete"))
    finally:
        slow.stop()


def served(srv: HubServer) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(srv.url + "/_hubtest/served") as r:
        return json.load(r)


def test_concurrent_fetches_share_one_download(bins, tmp_path):
    """Two xpuinject processes and one huggingface_hub download fill one cache at once."""
    slow = HubServer(bins["hubtestserver"], "--rate", "300000")
    try:
        cache = tmp_path / "hub"
        env = base_env(cache, slow.url)
        procs = [subprocess.Popen([str(bins["xpuinject"]), "fetch", "org/llama-tiny", "-q"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        py = subprocess.Popen([sys.executable, "-c",
                               "from huggingface_hub import snapshot_download; print(snapshot_download('org/llama-tiny'))"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        outs = [p.communicate(timeout=120) for p in procs]
        py_out, py_err = py.communicate(timeout=120)
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
        assert py.returncode == 0, py_err
        snaps = {out.strip() for out, _ in outs} | {py_out.strip().splitlines()[-1]}
        assert len(snaps) == 1
        snap = Path(snaps.pop())
        weights = FIXTURES / "llama-tiny" / "model.safetensors"
        assert (snap / "model.safetensors").read_bytes() == weights.read_bytes()
        assert not list(cache.rglob("*.incomplete"))
        # flock on .locks/<repo>/<sha256>.lock is shared by both tools: the weights
        # travelled once for the three fetches.
        assert served(slow)["model.safetensors"] == weights.stat().st_size
    finally:
        slow.stop()


def test_both_tools_agree_on_hf_home(bins, hub_server, tmp_path):
    """With only HF_HOME set, both put the cache in $HF_HOME/hub."""
    home = tmp_path / "home"
    env = base_env(tmp_path / "unused", hub_server.url)
    del env["HF_HUB_CACHE"]
    env["HF_HOME"] = str(home)
    p = xpuinject(bins, env, "fetch", "org/llama-tiny", "--include", "*.json")
    snap = p.stdout.strip()
    assert snap.startswith(str(home / "hub" / "models--org--llama-tiny" / "snapshots"))
    env["HF_HUB_OFFLINE"] = "1"
    env["HF_ENDPOINT"] = dead_endpoint()
    got = python(env, READ_OFFLINE.format(repo="org/llama-tiny", files=["config.json", "tokenizer.json"]))
    assert got["snapshot"] == snap
    assert bytes.fromhex(got["files"]["config.json"]) == (FIXTURES / "llama-tiny" / "config.json").read_bytes()
