#!/usr/bin/env bash
# Put Liger-Kernel's source into .gpu-extras/liger/ so the GPU benchmarks can compare with it
# on a machine without network.
#
#   scripts/fetch_liger.sh [VERSION]        (default 0.8.5, the version benchmarks/ was read against)
#
# Its wheel is pure Python (liger_kernel-<v>-py3-none-any.whl, needs only torch and triton;
# ops/utils.py also imports `packaging`), so unpacking it is all the install it needs: copy the
# repo with .gpu-extras/liger to the GPU machine and scripts/gpu-run.sh puts the folder on
# PYTHONPATH (or set PYTHONPATH=.gpu-extras/liger yourself for benchmarks/run_all.py).
#
# Never commit it: .gitignore has /.gpu-extras/ and this script refuses to run if that rule is gone.
set -euo pipefail

VERSION="${1:-0.8.5}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEST=".gpu-extras/liger"
source "$ROOT/scripts/gpu-extras.sh"
require_ignored fetch_liger "$DEST"
PY="$(fetch_python "$ROOT")"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "liger-kernel==$VERSION"
shopt -s nullglob
wheels=("$tmp"/liger_kernel-*.whl)
if [[ ${#wheels[@]} -ne 1 ]]; then
  echo "fetch_liger: expected one liger_kernel wheel, got ${#wheels[@]}: ${wheels[*]:-none}" >&2
  exit 1
fi
"$PY" -m zipfile -e "${wheels[0]}" "$tmp/x"
for f in liger_kernel/ops/rms_norm.py liger_kernel/ops/fused_add_rms_norm.py liger_kernel/ops/rope.py liger_kernel/ops/swiglu.py; do
  if [[ ! -f "$tmp/x/$f" ]]; then
    echo "fetch_liger: $f missing from ${wheels[0]##*/}" >&2
    exit 1
  fi
done
rm -rf "$DEST.tmp"
mkdir -p "$(dirname "$DEST")"
mv "$tmp/x" "$DEST.tmp"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "fetch_liger: liger-kernel $VERSION unpacked into $DEST ($(du -sh "$DEST" | cut -f1)); copy it to the GPU machine with the repo"
