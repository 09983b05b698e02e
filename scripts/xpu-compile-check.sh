#!/usr/bin/env bash
# Compile every Triton kernel for an Intel XPU target (SPIR-V), offline, at every XPU autotune
# config: scripts/xpu_compile_check.py under the Intel XPU backend for Triton. No XPU needed.
#
# Makes .xpu-venv (ignored) with PyPI's triton-xpu (3.3.0b1, the only XPU Triton on PyPI; the
# kernels target Triton 3.6, see the script's notes) and Intel's SYCL runtime; torch comes from
# the project's .venv (scripts/setup-venv.sh), dtypes only. Needs Level Zero's loader to build
# the backend's helper (Debian: libze-dev, installed here when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
if ! ldconfig -p | grep -q libze_loader; then
  echo "xpu-compile-check: installing libze-dev (Level Zero loader) with apt-get" >&2
  apt-get install -y -q libze-dev >&2 || { apt-get update -q >&2 && apt-get install -y -q libze-dev >&2; }
fi
V="$ROOT/.xpu-venv"
if [[ ! -x "$V/bin/python" ]]; then
  python3 -m venv "$V"
  "$V/bin/pip" install -q "triton-xpu==3.3.0b1" "intel-sycl-rt>=2025.0.0" numpy
fi
site="$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
main_site="$("$ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# After the XPU venv's own packages (its triton wins), the project's (torch).
echo "$main_site" > "$site/zz_xpuinject_main_venv.pth"
# The backend compiles a C++ helper with gcc (not g++): preload libstdc++ for it.
LD_PRELOAD="$(gcc -print-file-name=libstdc++.so.6)" exec "$V/bin/python" scripts/xpu_compile_check.py "$@"
