#!/usr/bin/env bash
# The GPU validation of cugather in one go: differential fuzz, compute-sanitizer
# over every kernel variant, scale, streams and graphs, interop, threads and
# recovery tests.  Installs nothing; run from anywhere on a machine with a GPU
# where cugather is installed (pip install --no-build-isolation --no-deps -e .):
#
#     tests/tools/gpu_suite.sh LOGDIR [FUZZ_EXAMPLES]     (default 10000 examples)
#
# Writes one log per step into LOGDIR and LOGDIR/summary.txt; exits nonzero if
# any step failed.  Steps: environment, kernel cache warm-up (every kernel,
# one NVRTC process per core), then the fuzz and the sanitizer side by side,
# then the other GPU tests.  Each step has a time limit (together 9 minutes at
# most; a normal run is expected to take well under that).  The fuzz seed is
# fixed (CUGATHER_FUZZ_SEED, default 0) so that a run can be repeated.
set -u
LOG=${1:?usage: tests/tools/gpu_suite.sh LOGDIR [FUZZ_EXAMPLES]}
EXAMPLES=${2:-10000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python}
export PYTHONDONTWRITEBYTECODE=1
source "$ROOT/tests/tools/steps.sh"

pytest_args=(-p no:cacheprovider -q -rs --tb=short)

note "cugather GPU suite in $ROOT, logs in $LOG, $EXAMPLES fuzz examples"
{
    nvidia-smi || true
    "$PY" - <<'EOF'
import sys, numpy, cupy, cugather
print("python", sys.version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__,
      "cugather", cugather.__version__)
print("GPUs:", cupy.cuda.runtime.getDeviceCount())
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())
except Exception as e:
    print("torch unavailable:", e)
import hypothesis, onnx
print("hypothesis", hypothesis.__version__, "onnx", onnx.__version__)
EOF
    "$PY" tests/tools/sanitize.py --list | tail -1
    command -v compute-sanitizer && compute-sanitizer --version
} > "$LOG/env.log" 2>&1

step warm 100 "$PY" tests/tools/warm_cache.py || failed=1

# The fuzz and the sanitizer share the GPU side by side.
(
    export CUGATHER_FUZZ_EXAMPLES=$EXAMPLES CUGATHER_FUZZ_SHRINK=0
    step fuzz 270 "$PY" -m pytest "${pytest_args[@]}" -m gpu tests/gpu/test_fuzz_gpu.py \
        --hypothesis-show-statistics --hypothesis-seed="${CUGATHER_FUZZ_SEED:-0}" \
        --junitxml="$LOG/fuzz.xml"
) &
fuzz_pid=$!
(
    step sanitize 270 "$PY" tests/tools/sanitize.py --drive --parallel --jobs 4 --timeout 250 \
        --log-dir "$LOG/sanitize"
) &
sanitize_pid=$!
wait $fuzz_pid || failed=1
wait $sanitize_pid || failed=1

# Every other GPU test (the sharded gather has its own suite: distributed_suite.sh).
step gputests 300 "$PY" -m pytest "${pytest_args[@]}" -m gpu tests \
    --ignore=tests/gpu/test_fuzz_gpu.py --ignore=tests/gpu/test_distributed_gpu.py \
    --junitxml="$LOG/gputests.xml" || failed=1

note ""
note "---- counts"
grep -h -E "passing|failing|Stopped because" "$LOG/fuzz.log" | sed 's/^ */fuzz: /' | tee -a "$SUMMARY"
grep -h -E "kernel kinds planned" "$LOG/fuzz.log" | tee -a "$SUMMARY"
tail -n 12 "$LOG/sanitize.log" | tee -a "$SUMMARY"
for f in "$LOG"/sanitize/*.log; do
    [ -e "$f" ] || continue
    grep -h -E "ERROR SUMMARY|RACECHECK SUMMARY|WORKLOAD RESULT|^total " "$f" \
        | sed "s|^|$(basename "$f" .log): |" | tee -a "$SUMMARY"
done
for f in fuzz gputests; do
    grep -h -E "^(=+ )?[0-9]+ (passed|failed)|(passed|failed|skipped|error).* in [0-9.]+s" \
        "$LOG/$f.log" | tail -1 | sed "s|^|$f: |" | tee -a "$SUMMARY"
done
grep -h "^SKIPPED" "$LOG/gputests.log" "$LOG/fuzz.log" | tee -a "$SUMMARY"
note "total $(( $(date +%s) - suite_start )) s"
if [ $failed -eq 0 ]; then note "SUITE RESULT: OK"; else note "SUITE RESULT: FAILED"; fi
exit $failed
