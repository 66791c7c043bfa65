#!/usr/bin/env bash
# The GPU validation of cugather.distributed in one go, on a machine with 2+ GPUs:
# environment, kernel cache warm-up, the distributed GPU tests (2 processes
# through the launcher, both transports; NCCL once more without P2P and
# shared memory -- its network path; raise on every rank; CUDA graph; a
# missing rank; 4 ranks on 2 GPUs; one process driving every GPU; torchrun)
# side by side with compute-sanitizer memcheck over the peer kernel (one
# process driving every GPU, and every sharded kernel variant on one GPU),
# then the benchmark under the launcher.  Installs nothing; from a checkout
# installed with pip install --no-build-isolation --no-deps -e .:
#
#     NCCL_NVLS_ENABLE=0 bash tests/tools/distributed_suite.sh LOGDIR
#
# Writes one log per step into LOGDIR, LOGDIR/summary.txt and
# LOGDIR/bench/distributed.json; exits nonzero if any step failed.  Each
# step has a time limit (9 minutes at most; about 5 when nothing hangs).
set -u
LOG=${1:?usage: tests/tools/distributed_suite.sh LOGDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python}
# NVLink multicast stays off (shared machines), in every child too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
STEP_WIDTH=12
source "$ROOT/tests/tools/steps.sh"

note "cugather distributed suite in $ROOT, logs in $LOG (NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE)"
{
    nvidia-smi || true
    nvidia-smi topo -m || true
    "$PY" - <<'PYEOF'
import sys, numpy, cupy, cugather
from cupy.cuda import nccl, runtime
print("python", sys.version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__,
      "cugather", cugather.__version__)
print("NCCL", nccl.get_version() if nccl.available else "not available")
n = runtime.getDeviceCount()
print("GPUs:", n)
for a in range(n):
    print("peer access from", a, [bool(runtime.deviceCanAccessPeer(a, b)) if a != b else "-"
                                  for b in range(n)])
try:
    import torch
    print("torch", torch.__version__)
except Exception as e:
    print("torch unavailable:", e)
PYEOF
    command -v compute-sanitizer && compute-sanitizer --version
} > "$LOG/env.log" 2>&1
NGPU=$("$PY" -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())" 2>/dev/null || echo 0)

step warm 100 "$PY" tests/tools/warm_cache.py || failed=1

# The GPU tests and the sanitizer side by side (correctness only: no timing here).
(
    step gputests 280 "$PY" -m pytest -p no:cacheprovider -q -rs --tb=short -m gpu \
        tests/gpu/test_distributed_gpu.py --junitxml="$LOG/gputests.xml"
) &
tests_pid=$!
(
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    step sanitize-peer 130 "$SAN" --tool memcheck --error-exitcode 1 \
        "$PY" tests/gpu/distributed_worker.py local "$LOG/sanitize-peer" --small --transports p2p
    rc1=$?
    step sanitize-kinds 130 "$PY" tests/tools/sanitize.py --drive --tools memcheck \
        --kinds sharded --log-dir "$LOG/sanitize-sharded" --timeout 120
    rc2=$?
    [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]
) &
sanitize_pid=$!
wait $tests_pid || failed=1
wait $sanitize_pid || failed=1

step bench 170 "$PY" -m cugather.distributed.run --nproc-per-node "$NGPU" --timeout 160 \
    -m cugather bench --distributed --out "$LOG/bench" || failed=1

note ""
note "---- counts"
grep -h -E "^(=+ )?[0-9]+ (passed|failed)|(passed|failed|skipped|error).* in [0-9.]+s" \
    "$LOG/gputests.log" | tail -1 | sed "s|^|gputests: |" | tee -a "$SUMMARY"
grep -h -E "^(FAILED|SKIPPED|ERROR)" "$LOG/gputests.log" | tee -a "$SUMMARY"
grep -h -E "ERROR SUMMARY" "$LOG/sanitize-peer.log" | sed "s|^|sanitize-peer: |" | tee -a "$SUMMARY"
grep -h -E "SANITIZER RESULT|errors, exit" "$LOG/sanitize-kinds.log" | sed "s|^|sanitize-kinds: |" \
    | tee -a "$SUMMARY"
sed -n '/ranks, /,/results:/p' "$LOG/bench.log" | tee -a "$SUMMARY"
note "total $(( $(date +%s) - suite_start )) s"
if [ $failed -eq 0 ]; then note "SUITE RESULT: OK"; else note "SUITE RESULT: FAILED"; fi
exit $failed
