#!/usr/bin/env bash
# `make test` three times on a loaded machine (#27 item 5): a test that passes only when the machine
# is idle is a flaky test, and this finds it.
#
#   scripts/loaded_make_test.sh [COMMIT] [RUNS]
#
# COMMIT (default HEAD of this checkout) is cloned fresh under /tmp; one busy process per core
# (`python -c 'while True: pass'`) runs for the whole time; `make test` runs RUNS times (default 3) in
# the clone; each run's log and a summary.md (commit, date, machine, load, pass/fail counts, wall
# times, the failing tests; rewritten after each run) go to benchmarks/results/loaded_make_test/
# of this checkout (OUT_DIR overrides). The busy processes are killed on exit, however the script ends.
#
# PARALLEL=1 runs the RUNS `make test`s at the same time, each in a clone of its own (CLONE-1, ...):
# each then shares the machine with the busy processes and with the other runs' test workers (a
# load of about 3 * 2 + NCORES runnable processes on NCORES cores), and three runs take about the
# wall time of one sequential run.
#
# The clone's .venv and .torch-venv start as hard-linked copies of this checkout's (the clone is
# fresh, the 1.9 GB of wheels need not be), then `pip install -e` runs in the clone exactly as the
# Makefile's venv recipe does (so the editable einsat is the clone's and a changed pyproject.toml is
# honoured), the copies' scripts are pointed at the clone's venv (their shebangs named the
# checkout's: Jupyter's kernel then ran there), and make's stamps are touched, so that `make test`
# itself runs only the tests. Setting FRESH_VENV=1 lets make build the venvs from scratch instead.
set -uo pipefail

SRC="$(cd "$(dirname "$0")/.." && pwd)"
COMMIT="$(git -C "$SRC" rev-parse "${1:-HEAD}")"
RUNS="${2:-3}"
OUT_DIR="${OUT_DIR:-$SRC/benchmarks/results/loaded_make_test}"
CLONE="${CLONE:-/tmp/einsat-loaded-$(date -u +%Y%m%dT%H%M%S)}"
NCORES="$(nproc)"
PY="${BUSY_PYTHON:-python3}"

BUSY_PIDS=()
cleanup() {
  for pid in "${BUSY_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  wait "${BUSY_PIDS[@]}" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$OUT_DIR"
PARALLEL="${PARALLEL:-0}"

setup_clone() {  # setup_clone DIR: a clone of COMMIT at DIR with its venvs ready for `make test`
  local dir="$1"
  echo "cloning $COMMIT into $dir"
  git clone -q --no-checkout "$SRC" "$dir" && git -C "$dir" checkout -q "$COMMIT" || return 1
  [ "${FRESH_VENV:-0}" = 1 ] && return 0
  for v in .venv .torch-venv; do
    if [ -d "$SRC/$v" ]; then
      cp -al "$SRC/$v" "$dir/$v" || cp -a "$SRC/$v" "$dir/$v"
      # a venv names its own path in its scripts (shebangs, activate): point them at the clone's
      # (sed -i writes a new file, so the hard-linked originals stay as they are)
      grep -rlI --null "$SRC/$v" "$dir/$v/bin" 2>/dev/null | xargs -0 -r sed -i "s#$SRC/$v#$dir/$v#g"
    fi
  done
  (cd "$dir" && .venv/bin/python -m pip install -q -c constraints.txt -e '.[test,notebooks,bench,dev]') \
    >> "$OUT_DIR/setup.log" 2>&1 || { echo "venv set-up failed, see $OUT_DIR/setup.log"; return 1; }
  local stamp=".venv/.installed-$(cd "$dir" && cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)"
  rm -f "$dir"/.venv/.installed-*
  touch "$dir/$stamp"
  [ -d "$dir/.torch-venv" ] && touch "$dir/.torch-venv/.installed"
  return 0
}

: > "$OUT_DIR/setup.log"
if [ "$PARALLEL" = 1 ]; then
  for i in $(seq "$RUNS"); do setup_clone "$CLONE-$i" || exit 1; done
else
  setup_clone "$CLONE" || exit 1
fi

for _ in $(seq "$NCORES"); do
  "$PY" -c 'while True: pass' &
  BUSY_PIDS+=("$!")
done
echo "busy processes: ${BUSY_PIDS[*]}"

summary() {
  {
    echo "# \`make test\` under load (scripts/loaded_make_test.sh)"
    echo
    echo "- commit: \`$COMMIT\` ($(git -C "$SRC" log -1 --format=%s "$COMMIT" | cut -c1-100)...)"
    echo "- date (UTC): started $STARTED, this summary $(date -u +%Y-%m-%dT%H:%MZ) ($DONE of $RUNS runs done)"
    echo "- machine: $(uname -srm), $NCORES cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/ {print $2}') GiB"
    echo "- load: $NCORES busy processes (\`$PY -c 'while True: pass'\`, one per core) for the whole time, on a machine shared with other work; load average before -> after each run below"
    if [ "$PARALLEL" = 1 ]; then
      echo "- the $RUNS runs at the same time (PARALLEL=1), each in its own clone ($CLONE-1 ...): each run's load is the busy processes and the other runs' test workers"
    else
      echo "- clone: $CLONE; venvs hard-linked from the checkout, then \`pip install -e\` in the clone"
    fi
    echo
    echo "| run | result | wall (s) | load average (1/5/15 min) |"
    echo "|---|---|---|---|"
    for i in $(seq "$DONE"); do
      echo "| $i | ${RESULTS[$i]} | ${WALLS[$i]} | ${LOADS[$i]} |"
    done
    echo
    echo "## Failing tests"
    echo
    any=0
    for i in $(seq "$DONE"); do
      fails="$(grep -E '^(FAILED|ERROR) ' "$OUT_DIR/run$i.log")"
      if [ -n "$fails" ]; then
        any=1
        echo "run $i:"
        echo
        echo "$fails" | sed 's/^/    /'
        echo
      fi
    done
    [ "$any" = 0 ] && echo "none"
  } > "$OUT_DIR/summary.md"
}

STARTED="$(date -u +%Y-%m-%dT%H:%MZ)"
DONE=0
declare -a WALLS RESULTS LOADS PIDS T0S LOADS_BEFORE

record() {  # record I RC T0 LOAD_BEFORE T1 LOAD_AFTER: one finished run's line
  local i="$1" rc="$2" t0="$3" load_before="$4" t1="$5" load_after="$6" log="$OUT_DIR/run$1.log"
  WALLS[$i]=$(( t1 - t0 ))
  LOADS[$i]="$load_before -> $load_after"
  local tail_line
  tail_line="$(grep -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$log" | tail -1)"
  RESULTS[$i]="rc=$rc; ${tail_line:-no pytest summary line}"
  echo "run $i: ${RESULTS[$i]} (${WALLS[$i]} s)"
}

if [ "$PARALLEL" = 1 ]; then
  for i in $(seq "$RUNS"); do
    LOADS_BEFORE[$i]="$(cut -d' ' -f1-3 /proc/loadavg)"
    T0S[$i]=$(date +%s)
    # each run notes its own end (status, time, load): they finish in any order
    ( (cd "$CLONE-$i" && make test) > "$OUT_DIR/run$i.log" 2>&1
      echo "$? $(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)" > "$CLONE-$i.end" ) &
    PIDS[$i]=$!
  done
  for i in $(seq "$RUNS"); do
    wait "${PIDS[$i]}"
    read -r rc t1 l1 l5 l15 < "$CLONE-$i.end"
    record "$i" "$rc" "${T0S[$i]}" "${LOADS_BEFORE[$i]}" "$t1" "$l1 $l5 $l15"
    DONE=$i
    summary
  done
else
  for i in $(seq "$RUNS"); do
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
    t0=$(date +%s)
    (cd "$CLONE" && make test) > "$OUT_DIR/run$i.log" 2>&1
    rc=$?
    record "$i" "$rc" "$t0" "$load_before" "$(date +%s)" "$(cut -d' ' -f1-3 /proc/loadavg)"
    DONE=$i
    summary  # after each run: a run cut short keeps what the finished ones said
  done
fi

echo "summary: $OUT_DIR/summary.md"
