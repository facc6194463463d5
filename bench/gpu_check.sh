#!/usr/bin/env bash
# The GPU check as a lent GPU machine runs it, from the repository's root, with the bundle
# (make gpu-bundle: build/gpu-bundle/) carried beside the working tree:
#
#   bash bench/gpu_check.sh [--dry-run] [--json PATH] [--site DIR] [gpu_check.py options]
#
# The image has torch and transformers but no TRL, datasets or pydantic, no index and no hub,
# and the project is not installed there. So the bundle's wheels are installed with
# --no-index --no-deps --target into a scratch folder, and that folder, the repository and
# training/ go on PYTHONPATH. --site DIR uses packages already in DIR instead of installing the
# bundle (the test suite passes its own). The report goes to --json PATH, else to $OUT.
# PYTHON is the interpreter command (default python3: the image's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
read -r -a python <<< "${PYTHON:-python3}"
bundle=${GPU_BUNDLE:-$repo/build/gpu-bundle}
site=""
json=""
args=()
while (($#)); do
  case $1 in
    --site) site=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ -z $json ]]; then
  [[ -n ${OUT:-} ]] || { echo "gpu_check.sh: give --json PATH (or set OUT)" >&2; exit 2; }
  json=$OUT/gpu_check.json
fi
if [[ -z $site ]]; then
  wheels=("$bundle"/*.whl)
  [[ -e ${wheels[0]} ]] || {
    echo "gpu_check.sh: no wheels in $bundle (make gpu-bundle here, then carry build/gpu-bundle)" >&2
    exit 2
  }
  site=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-site.XXXXXX")
  "${python[@]}" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" "${wheels[@]}"
fi
export PYTHONPATH="$site:$repo:$repo/training"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
exec "${python[@]}" bench/gpu_check.py "${args[@]}" --json "$json"
