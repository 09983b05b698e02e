#!/usr/bin/env bash
# Create or refresh the repo's Python virtualenv (.venv at the repo root) from requirements.txt,
# plus the kernel package (kernels/python) installed in editable mode, and .venv-kernels016:
# kernels 0.16.2 alone (pip --target), for the test of transformers' use_kernels route.
#
# - Uses $PYTHON if set, else python3; it must be Python >= 3.10.
# - Reuses .venv when .venv/.requirements.sha256 equals the sha256 of requirements.txt and
#   kernels/python/pyproject.toml and the venv's python runs; otherwise (re)installs. The stamp is written only after a successful
#   install, so an interrupted install is redone on the next run.
# - Safe to run concurrently (flock on .venv-setup.lock); idempotent.
# - Says what it does on stderr; stdout stays empty. Exits non-zero on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
REQ="$ROOT/requirements.txt"
PKG="$ROOT/kernels/python"
STAMP="$VENV/.requirements.sha256"
LOCK="$ROOT/.venv-setup.lock"
PY="${PYTHON:-python3}"

log() { echo "setup-venv: $*" >&2; }
die() { echo "setup-venv: error: $*" >&2; exit 1; }

[[ -f "$REQ" ]] || die "requirements file $REQ not found"
command -v "$PY" >/dev/null 2>&1 || die "python interpreter '$PY' not found on PATH (set PYTHON=...)"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])') is older than 3.10"

want="$(cat "$REQ" "$PKG/pyproject.toml" | sha256sum | cut -d' ' -f1)"

# Serialize concurrent runs (several tests/helpers may call this at once).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$LOCK"
  flock 9
fi

venv_ok() { [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; }

K016="$ROOT/.venv-kernels016"
K016_PINS=(kernels==0.16.2 kernels-data==0.16.2)
install_kernels016() {
  if [[ -f "$K016/.pins" ]] && [[ "$(cat "$K016/.pins")" == "${K016_PINS[*]}" ]]; then
    return 0
  fi
  log "installing ${K016_PINS[*]} into $K016 (transformers' use_kernels route test)"
  rm -rf "$K016"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --target "$K016" "${K016_PINS[@]}" >&2 \
    || die "pip install --target $K016 ${K016_PINS[*]} failed (see pip output above)"
  PYTHONPATH="$K016" "$VENV/bin/python" -c 'import kernels; assert kernels.__version__ == "0.16.2", kernels.__version__' \
    || die "$K016: kernels 0.16.2 installed but does not import with .venv's packages"
  echo "${K016_PINS[*]}" >"$K016/.pins"
}

if venv_ok && [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$want" ]]; then
  install_kernels016
  log "reusing $VENV (requirements sha256 ${want:0:12} unchanged)"
  exit 0
fi

if [[ -e "$VENV" ]] && ! venv_ok; then
  log "$VENV exists but its python does not run; removing it"
  rm -rf "$VENV"
fi

if [[ ! -e "$VENV" ]]; then
  log "creating $VENV with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  "$PY" -m venv "$VENV" || die "python -m venv $VENV failed"
else
  log "requirements changed (stamp $(cat "$STAMP" 2>/dev/null | cut -c1-12 || true) -> ${want:0:12}); reinstalling into $VENV"
fi

rm -f "$STAMP"
# torch and triton bring about 5 GB of CUDA wheels: about 3 minutes from a cold pip cache on a fast
# link (170 s measured), seconds from a warm one. pip's own lines show what it is fetching.
log "installing $REQ: about 5 GB from a cold pip cache, ~3 minutes on a fast link; pip reports each package"
start=$SECONDS
PIPLOG="$VENV/.pip-install.log"
{ "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -r "$REQ" 2>&1 \
    || echo "pip-failed: exit $?"; } \
  | tee "$PIPLOG" | grep --line-buffered -E '^(Collecting|Downloading|Installing|Successfully|ERROR|pip-failed)' >&2 \
  || true
grep -q '^pip-failed' "$PIPLOG" && die "pip install -r $REQ into $VENV failed (full output: $PIPLOG)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$PKG" >&2 \
  || die "pip install -e $PKG into $VENV failed (see pip output above)"
"$VENV/bin/python" -c 'import torch, triton, transformers, safetensors, pytest, yaml, numpy, xpuinject_kernels' \
  || die "packages from $REQ installed but do not import in $VENV (see pip output above)"

# kernels 0.16.x beside the pinned release: transformers 5.17 takes kernels only in
# [0.16.0, 0.17.0) for its use_kernels route, and tests/kernels/test_use_kernels.py runs that
# route with this folder first on PYTHONPATH (the rest comes from .venv).
install_kernels016

tmp="$(mktemp "$VENV/.requirements.sha256.XXXXXX")"
echo "$want" >"$tmp"
mv -f "$tmp" "$STAMP"
log "ready: $VENV (installed in $((SECONDS - start))s, stamp ${want:0:12})"
