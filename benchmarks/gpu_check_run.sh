#!/usr/bin/env bash
# copied by benchmarks/gpu_check.py stage: run on the GPU machine from the repository root.
# The check runs in phases, each its own process under its own time limit (seconds, the second
# argument, 0 to skip the phase), so that a kernel that hangs (a persistent kernel's grid barrier)
# costs that phase alone; each phase writes OUT/<phase>/gpu_check.md and .json as it goes.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/out}"
mkdir -p "$out" /tmp/fg_site
tar -xzf "$here/tvm_runtime.tgz" -C /tmp/fg_site || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fg_site "$here"/apache_tvm_ffi-*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/fg_site . || exit 1
export PYTHONPATH=/tmp/fg_site PYTHONUNBUFFERED=1
repo="$PWD"
cd /tmp
status=0
phase() {
  local name=$1 limit=$2
  shift 2
  [ "$limit" -gt 0 ] || return 0
  echo "== phase $name (at most $limit s)"
  timeout -s KILL "$limit" python3 "$repo/benchmarks/gpu_check.py" check --artifacts "$here/artifacts" \
    --out "$out/$name" "$@"
  local rc=$?
  [ $rc -eq 0 ] || { echo "== phase $name: exit $rc$([ $rc -eq 137 ] && echo ', killed at its time limit')"; status=1; }
}
layer="lstm_layer_forward,lstm_layer_backward"
phase layer "${FG_LAYER_S:-120}" --sections numerics,speed --ops "$layer"
phase lstm "${FG_LSTM_S:-200}" --sections lstm,profile
phase kernels "${FG_KERNELS_S:-200}" --sections numerics,torch_ops,speed,vector --skip-ops "$layer"
phase sweep "${FG_SWEEP_S:-150}" --sections sweep
# the layer kernels' numerics under compute-sanitizer's memory checker (where the machine's runtime
# lets it read the device), off unless FG_SANITIZE_S gives it time
if [ "${FG_SANITIZE_S:-0}" -gt 0 ] && command -v compute-sanitizer > /dev/null; then
  echo "== phase sanitize (at most $FG_SANITIZE_S s)"
  timeout -s KILL "$FG_SANITIZE_S" compute-sanitizer --tool memcheck --error-exitcode 9 python3 \
    "$repo/benchmarks/gpu_check.py" check --artifacts "$here/artifacts" --out /tmp/fg_sanitize \
    --sections numerics --ops "$layer" > "$out/sanitize.log" 2>&1
  rc=$?; tail -n 25 "$out/sanitize.log"; [ $rc -eq 0 ] || { echo "== phase sanitize: exit $rc"; status=1; }
fi
exit $status
