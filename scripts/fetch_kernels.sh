#!/usr/bin/env bash
# Put the `kernels` wheel that requirements.txt pins into .gpu-extras/wheels/, so a GPU machine
# without network can load packages through Hugging Face's kernels as the tests and the eval do.
#
#   scripts/fetch_kernels.sh
#
# The wheel is abi3 (one build for every CPython >= 3.8 on x86-64 Linux), so the machine's Python
# version does not matter. scripts/gpu-run.sh installs it into its work folder when `kernels` is
# not importable there, and puts that on PYTHONPATH. Its other needs (huggingface_hub, packaging,
# pyyaml, tomlkit) come with transformers' stack; sigstore only for its signature CLI.
#
# Never commit it: .gitignore has /.gpu-extras/ and this script refuses to run if that rule is gone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEST=".gpu-extras/wheels"
source "$ROOT/scripts/gpu-extras.sh"
require_ignored fetch_kernels "$DEST"
PIN="$(grep -E '^kernels==' requirements.txt || true)"
if [[ -z "$PIN" ]]; then
  echo "fetch_kernels: requirements.txt pins no kernels==VERSION" >&2
  exit 1
fi

PY="$(fetch_python "$ROOT")"
mkdir -p "$DEST"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  --python-version 3.12 -d "$DEST" "$PIN"
shopt -s nullglob
wheels=("$DEST"/kernels-"${PIN#kernels==}"-*abi3*.whl)
if [[ ${#wheels[@]} -ne 1 ]]; then
  echo "fetch_kernels: expected one abi3 wheel of $PIN in $DEST, got ${#wheels[@]}: ${wheels[*]:-none}" >&2
  exit 1
fi
echo "fetch_kernels: ${wheels[0]}; copy $DEST to the GPU machine with the repo"
