#!/usr/bin/env bash
# Benchmark `xpuinject pack` against the equivalent Python (safetensors + torch) on a
# synthetic Llama-shaped fp32 checkpoint (hidden 2048, intermediate 8192, 8 layers, vocab
# 32000: 2.4 GB), in one run, and check both wrote the same checkpoint.
#
#   benchmarks/bench-pack.sh [WORKDIR]      (default /tmp/xpuinject-bench-pack; ~6 GB of disk)
#
# Both packers get the same plan.yaml (`xpuinject plan --yaml`; xpuinject runs with
# --plan so neither pays for planning) and read the checkpoint from the page cache (it is
# read once before timing). Each is run ROUNDS times, alternating; the table reports every
# run and the best. Throughput is GB of source tensor bytes the plan reads, per second of
# wall time; peak RSS is GNU time's %M (max resident set, KB) of the process. `sync` runs
# (untimed) before each run so no run pays for the previous one's writeback. xpuinject
# fsyncs each shard before renaming it into place (part of its atomicity contract);
# safetensors' save_file does not, so the Python time excludes the disk write.
# Environment: PYTHON (default .venv/bin/python), ROUNDS (default 3), GO (default go).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/xpuinject-bench-pack}"
py="${PYTHON:-$repo/.venv/bin/python}"
rounds="${ROUNDS:-3}"
gobin="${GO:-go}"
timebin=/usr/bin/time
[[ -x $timebin ]] || { echo "bench-pack: GNU time not found at $timebin (apt-get install time)" >&2; exit 1; }

mkdir -p "$work"
src="$work/llama-synthetic"
bin="$work/xpuinject"
(cd "$repo" && "$gobin" build -o "$bin" ./cmd/xpuinject)

if [[ ! -f $src/model.safetensors.index.json ]]; then
  echo "generating $src ..." >&2
  "$py" "$repo/benchmarks/bench_pack.py" gen "$src" >&2
fi
"$bin" plan "$src" --yaml >"$work/plan.yaml"
cat "$src"/*.safetensors >/dev/null # into the page cache, for both packers alike

input_bytes=$("$py" - "$src" "$work/plan.yaml" <<'EOF'
import json, sys, yaml
from pathlib import Path
from safetensors import safe_open
src, plan = Path(sys.argv[1]), yaml.safe_load(open(sys.argv[2]))
names = {s for l in plan["layers"] for o in (l.get("outputs") or []) for s in o["sources"]}
total = 0
for f in sorted(src.glob("*.safetensors")):
    with safe_open(str(f), framework="pt") as h:
        for k in h.keys():
            if k in names:
                sl = h.get_slice(k)
                n = {"F32": 4, "BF16": 2, "F16": 2}[sl.get_dtype()]
                for d in sl.get_shape():
                    n *= d
                total += n
print(total)
EOF
)

results="$work/results.txt"
: >"$results"
run() { # name outdir cmd...
  local name=$1 out=$2
  shift 2
  rm -rf "$out"
  sync # untimed: no dirty pages of the previous run compete for the disk
  "$timebin" -f "%e %M" -o "$work/time.txt" "$@" >/dev/null 2>"$work/$name.stderr"
  read -r secs rss_kb <"$work/time.txt"
  echo "$name $secs $rss_kb" >>"$results"
}
for ((i = 1; i <= rounds; i++)); do
  run xpuinject "$work/out-go" "$bin" pack "$src" --out "$work/out-go" --plan "$work/plan.yaml"
  run python "$work/out-py" "$py" "$repo/benchmarks/bench_pack.py" pack "$src" "$work/plan.yaml" "$work/out-py"
done

same=$("$py" "$repo/benchmarks/bench_pack.py" compare "$work/out-go" "$work/out-py")
largest=$("$py" - "$work/plan.yaml" <<'EOF'
import sys, yaml
plan = yaml.safe_load(open(sys.argv[1]))
size = {"F32": 4, "BF16": 2, "F16": 2}
best = 0
for l in plan["layers"]:
    for o in l.get("outputs") or []:
        n = size[o["dtype"]]
        for d in o["shape"]:
            n *= d
        best = max(best, n)
print(best)
EOF
)

"$py" - "$results" "$input_bytes" "$largest" "$same" <<'EOF'
import sys
from collections import defaultdict
path, inp, largest, same = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
runs = defaultdict(list)
for line in open(path):
    name, secs, kb = line.split()
    runs[name].append((float(secs), int(kb) * 1024))
print(f"input: {inp / 1e9:.2f} GB of fp32 source tensors; largest output tensor {largest / 2**20:.0f} MiB; "
      f"RSS bound 1.5 x largest + 32 MiB = {(1.5 * largest + 32 * 2**20) / 2**20:.0f} MiB")
print()
print("| packer | runs (s) | best (s) | throughput (GB/s of input) | peak RSS (MiB) |")
print("| --- | --- | --- | --- | --- |")
best = {}
for name in ("xpuinject", "python"):
    r = runs[name]
    b = min(s for s, _ in r)
    best[name] = b
    rss = max(m for _, m in r)
    print(f"| {name} | {', '.join(f'{s:.2f}' for s, _ in r)} | {b:.2f} | {inp / b / 1e9:.2f} | {rss / 2**20:.0f} |")
print()
print(f"xpuinject / python throughput: {best['python'] / best['xpuinject']:.2f}x")
print(f"outputs: {same}")
EOF
