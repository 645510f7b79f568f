# Progress for the long scripts (sourced by setup.sh, main.sh and test.sh), made for output that
# goes to a file or a CI log as much as to a terminal:
#   stage "what it does" "expected duration"   announces stage k of STAGES with the job's clock;
#   quiet_guard CMD ARGS...                     runs CMD, its output (stdout and stderr) passed
#       through line by line, and after each PROGRESS_EVERY seconds (default 20) without a line
#       prints one saying which stage is still running and for how long.
# Python's output is unbuffered so that its lines reach the log as they are printed.
export PYTHONUNBUFFERED=1
PROGRESS_EVERY="${PROGRESS_EVERY:-20}"
JOB_START=$SECONDS
STAGES="?"  # the script's number of stages
STAGE_K=0
STAGE_NAME="set-up"
STAGE_START=$SECONDS

elapsed() {  # m:ss since $1 (a $SECONDS value)
  local s=$((SECONDS - $1))
  printf '%d:%02d' $((s / 60)) $((s % 60))
}

stage() {
  STAGE_K=$((STAGE_K + 1))
  STAGE_NAME="$1"
  STAGE_START=$SECONDS
  echo "== stage $STAGE_K of $STAGES: $1 (expected $2; job time $(elapsed "$JOB_START")) =="
}

_pass_through_with_heartbeat() {
  local line buffer="" status
  while true; do
    if IFS= read -r -t "$PROGRESS_EVERY" line; then
      printf '%s%s\n' "$buffer" "$line"
      buffer=""
    else
      status=$?
      if [ "$status" -gt 128 ]; then  # silent for PROGRESS_EVERY seconds (a partial line is kept)
        buffer="$buffer$line"
        echo "   ... still running: $STAGE_NAME ($(elapsed "$STAGE_START") in this stage, job time $(elapsed "$JOB_START"))"
      else  # end of output
        [ -n "$buffer$line" ] && printf '%s%s\n' "$buffer" "$line"
        return 0
      fi
    fi
  done
}

quiet_guard() {  # exit status: the command's (pipefail)
  "$@" 2>&1 | _pass_through_with_heartbeat
  return "${PIPESTATUS[0]}"
}
