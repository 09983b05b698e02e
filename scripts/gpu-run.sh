#!/usr/bin/env bash
# One batched GPU session on the lent H200 (device tool): the kernel tests on the real device,
# the whole pipeline on Llama-3.2-1B- and LeViT-128S-shaped random models, and the kernel
# benchmark. Each step has its own time limit so an overrun never costs the others; logs
# and reports land in $OUT (the device tool brings that folder back).
#
#   run on the device (repo root), with bin/xpuinject built here for linux/amd64 and carried:
#     bash scripts/gpu-run.sh
#   env: STEPS="tests llama levit bench" (default; "runtime" is the graph runtime check on
#        Llama-3.2-1B, Llama-3.1-8B and LeViT-128S shapes), T_TESTS/T_LLAMA/T_LEVIT/T_BENCH/T_RUNTIME
#        seconds, LATENCY (eval paths, default both), BENCH_ARGS (default --quick; empty for the full
#        matrix), LIGER (liger_kernel folder), RUNTIME_MODELS (default "llama1b llama8b"),
#        RUNTIME_ARGS (extra gpu_runtime_check.py flags, e.g. "--prefill 512 --tokens 128").
set -uo pipefail
OUT=${OUT:-/tmp/out}
# The device tool returns at most 8 files: everything is written under $RES and re-packed
# into $OUT/results.tgz after every step (a later overrun still leaves the earlier results).
RES=/tmp/xpi-results
mkdir -p "$OUT" "$RES"
pack() { tar czf "$OUT/results.tgz" -C "$(dirname "$RES")" "$(basename "$RES")"; cp "$RES/summary.txt" "$OUT/"; }
STEPS=${STEPS:-"tests llama levit bench"}
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD/kernels/python${PYTHONPATH:+:$PYTHONPATH}"
log() { echo "== $(date +%T) $*" | tee -a "$RES/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)'
} 2>&1 | tee -a "$RES/summary.txt"
WORK=/tmp/xpi; mkdir -p "$WORK"
for s in $STEPS; do
  case $s in
  tests)
    log "kernel tests on the GPU"
    # test_layers.py checks our layer classes with the `kernels` package's own validator; the
    # GPU image has no `kernels` (carry its wheel to run it there; note the repo's own kernels/
    # folder imports as an empty namespace package, hence the check of kernels.layer.layer). The bench smoke test is
    # CPU-only. No -x: one failure must not hide the others.
    # pytest-xdist (in the device image) spreads the tests' Triton compiles over the CPU cores:
    # serially they took 170+ s on the H200 machine, mostly compiling.
    timeout "${T_TESTS:-150}" python3 -m pytest tests/kernels -q -p no:cacheprovider \
      $(python3 -c 'import xdist' 2>/dev/null && echo "-n ${XDIST:-8}") \
      --ignore=tests/kernels/test_bench_smoke.py \
      $(python3 -c 'import kernels.layer.layer' 2>/dev/null || echo --ignore=tests/kernels/test_layers.py) \
      >"$RES/kernel-tests.log" 2>&1
    log "kernel tests rc=$? : $(tail -1 "$RES/kernel-tests.log")" ;;
  llama|levit)
    name=$([ "$s" = llama ] && echo llama1b || echo levit128s)
    log "make $name"
    python3 scripts/make_gpu_models.py "$WORK/models" --only "$name" >>"$RES/$s.log" 2>&1
    log "pipeline $name"
    timeout "$([ "$s" = llama ] && echo "${T_LLAMA:-240}" || echo "${T_LEVIT:-90}")" \
      bin/xpuinject "$WORK/models/$name" --out "$WORK/run-$s" --device cuda --repeats 20 --latency "${LATENCY:-both}" >>"$RES/$s.log" 2>&1
    rc=$?
    log "pipeline $name rc=$rc"
    cp "$WORK/run-$s/eval/report.md" "$RES/$s-report.md" 2>/dev/null
    cp "$WORK/run-$s/eval/eval.json" "$RES/$s-eval.json" 2>/dev/null
    cp "$WORK/run-$s/eval/latency.png" "$RES/$s-latency.png" 2>/dev/null
    cp "$WORK/run-$s/eval/layers.png" "$RES/$s-layers.png" 2>/dev/null
    ;;
  runtime)
    # graph runtime: greedy tokens against model.generate, sampling, five latency paths (see
    # scripts/gpu_runtime_check.py); LeViT-128S (stock and injected) rides with the first model
    python3 scripts/make_gpu_models.py "$WORK/models" --only levit128s >>"$RES/runtime.log" 2>&1
    bin/xpuinject "$WORK/models/levit128s" --skip-eval --out "$WORK/run-levit-rt" >>"$RES/runtime.log" 2>&1
    vision="--vision $WORK/models/levit128s --vision-run $WORK/run-levit-rt"
    for name in ${RUNTIME_MODELS:-llama1b llama8b}; do
      log "make $name"
      python3 scripts/make_gpu_models.py "$WORK/models" --only "$name" >>"$RES/runtime.log" 2>&1
      bin/xpuinject "$WORK/models/$name" --skip-eval --out "$WORK/run-rt-$name" >>"$RES/runtime.log" 2>&1
      log "runtime check $name"
      timeout "${T_RUNTIME:-540}" python3 scripts/gpu_runtime_check.py --model "$WORK/models/$name" \
        --run "$WORK/run-rt-$name" $vision --out "$RES/runtime-$name.json" --budget-s $(( ${T_RUNTIME:-540} - 40 )) \
        ${RUNTIME_ARGS:-} >"$RES/runtime-$name.txt" 2>>"$RES/runtime.log"
      log "runtime check $name rc=$?"
      cat "$RES/runtime-$name.txt" >>"$RES/summary.txt"
      vision=""
      rm -rf "$WORK/models/$name" "$WORK/run-rt-$name"  # an 8B checkpoint and its packed copy are 32 GB
    done ;;
  bench)
    log "kernel benchmark"
    # BENCH_ARGS: "--quick" (default) or "" for the full issue-8 matrix; the script's own
    # --budget-s stops starting new cases in time to write its table before T_BENCH runs out.
    timeout "${T_BENCH:-150}" python3 scripts/bench_kernels.py --out "$RES/bench" ${BENCH_ARGS---quick} \
      --budget-s $(( ${T_BENCH:-150} - 45 )) ${LIGER:+--liger "$LIGER"} >"$RES/bench.log" 2>&1
    log "bench rc=$?" ;;
  esac
  pack
done
log "done"
pack
