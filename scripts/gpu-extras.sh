# Sourced by the scripts that fetch what a GPU machine without network needs into .gpu-extras/
# (fetch_kernels.sh, fetch_liger.sh): the checks and the Python they share.

# require_ignored SCRIPT DEST: stop unless DEST is git-ignored (.gitignore's /.gpu-extras/), so a
# fetched wheel or source tree is never committed.
require_ignored() {
  if ! git check-ignore -q "$2"; then
    echo "$1: $2 is not git-ignored (want /.gpu-extras/ in .gitignore); refusing to fetch" >&2
    exit 1
  fi
}

# fetch_python ROOT: $PYTHON, else the repository's .venv, else python3 (pip download runs on it).
fetch_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
  elif [[ -x "$1/.venv/bin/python" ]]; then echo "$1/.venv/bin/python"
  else echo python3
  fi
}
