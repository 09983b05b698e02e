#!/usr/bin/env bash
# The kernel benchmark on the GPU machine (issue 8): one process, all kernels, one table.
#
#   scripts/bench-kernels.sh [bench_kernels.py options, e.g. --quick, --only gemm, --timer do_bench]
#
# Writes bench.json, bench.md, log.txt and nvidia-smi.txt under $OUT (the device tool's output
# folder) or out/bench when OUT is unset. Uses Liger-Kernel from .device-carry/liger when it is
# there (scripts/fetch_liger.sh puts it there; carry it with the call). The table is printed last.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUTDIR="${OUT:-$ROOT/out/bench}"
mkdir -p "$OUTDIR"
PY="${PYTHON:-python3}"
args=(--out "$OUTDIR")
if [[ -d .device-carry/liger/liger_kernel ]]; then
  args+=(--liger .device-carry/liger)
fi
export PYTHONUNBUFFERED=1
# Read-only state of the card at the start (clocks, power, temperature): part of the record.
nvidia-smi >"$OUTDIR/nvidia-smi.txt" 2>&1 || true
"$PY" scripts/bench_kernels.py "${args[@]}" "$@" 2>&1 | tee "$OUTDIR/log.txt"
