# Shared by gpu_suite.sh and distributed_suite.sh, sourced once LOG (the log
# folder) and ROOT (the checkout) are set: makes LOG absolute, enters ROOT,
# starts LOG/summary.txt, and defines note and step.  STEP_WIDTH pads the
# step names of the summary (default 10).
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
cd "$ROOT"
SUMMARY="$LOG/summary.txt"
: > "$SUMMARY"
failed=0
suite_start=$(date +%s)

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME SECONDS CMD...: run CMD with a time limit, log to LOGDIR/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local start=$(date +%s)
    timeout --kill-after=15 "$limit" "$@" > "$LOG/$name.log" 2>&1
    local rc=$?
    local took=$(( $(date +%s) - start ))
    [ $rc -eq 124 ] && echo "TIMED OUT after ${limit} s" >> "$LOG/$name.log"
    note "$(printf "%-${STEP_WIDTH:-10}s exit %-3s %4ss  %s" "$name" "$rc" "$took" "$LOG/$name.log")"
    [ $rc -eq 0 ]
}
