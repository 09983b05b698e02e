#!/usr/bin/env python3
"""Every kernel benchmark in one process and one table (bench_rmsnorm, bench_rope, bench_gemm,
bench_attention), or an earlier run's table re-rendered with the planner's vendor routes.

    python3 benchmarks/run_all.py --out DIR [--quick] [--only gemm,decode] [--budget-s 450]
    python3 benchmarks/run_all.py --smoke --out DIR          # CPU, TRITON_INTERPRET=1, checks only
    python3 benchmarks/run_all.py --render RUN_DIR --routes GPU.json --out DIR   # no GPU
    python3 benchmarks/routes.py RUN_DIR --gpu NAME      # the GPU's vendor routes from a run

GPU.json is a per-GPU data file (kernels/python/xpuinject_kernels/gpus/<gpu>.json): with it,
every missed target names the vendor route that sends that operation to cuBLAS/SDPA in a plan,
or says "not routed" (live runs too). routes.py writes that file's routes from a run.
"""

from __future__ import annotations

import sys

import bench_attention
import bench_gemm
import bench_rmsnorm
import bench_rope
import benchlib

MODULES = (bench_rmsnorm, bench_rope, bench_gemm, bench_attention)


def main(argv=None) -> int:
    return benchlib.main(MODULES, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
