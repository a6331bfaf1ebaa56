#!/bin/bash
# One writer against each worker committing its own, on a 16-core machine, at 1-12 workers.
#
# From the project's root, with the 16-core kit prepared in .devbox/ (the kit's own prepare.sh,
# which is not part of the project), on that machine:
#   OUT=<folder> bash deploy/bench/sixteen_cores.sh
# For each W in $WS (1 2 4 8 12): the kit's scale.py as its run.sh measure runs it, --workers W
# --repeat-at "" --dur $DUR (4) --warm 1 --routes $ROUTES_ONE, then the same with
# --svc-env PERCEPTRON_ONE_WRITER=false --routes $ROUTES_EACH: the two designs alternated W by W.
# Under $OUT: log (the driver's lines, then the table below), merged.json (every run's results),
# logs.tgz (the servers' logs). The table: per W and route, requests (or packed examples) a
# second, worker CPU per request (per example), the busiest and least busy workers' cores,
# Redis's core and its CPU per request, p99, and non-200 answers; /learn's and /predict's
# share of the floor.
# $BASELINES: folders, each a checkout of another revision (or this tree with a constant
# changed), made before the machine is asked for, inside .devbox/ so that they travel with it:
#   git archive REV | (mkdir -p .devbox/base && tar -x -C .devbox/base)
# each runs after this tree's one writer, W by W, with --routes $ROUTES_BASE (learn), as a
# design named by its folder (a name without "_w"); its /learn's share of this tree's floor is
# in the table. An entry KEY=VALUE is this tree with that setting of the service instead
# (--svc-env), named set-N by its place among the entries: e.g.
# BASELINES=PERCEPTRON_CONNECTION_MAX_AGE_S=2.
# $ROUNDS (1): rounds per W, the trees alternated within each. ROUTES_EACH= (set, empty) leaves
# out each worker committing its own.
# $EXTRA passes more options to scale.py (e.g. other cores on a smaller machine).
# $PROFILE (seconds): during this tree's one-writer run at each W, its busiest worker recorded
# with py-spy (deploy/bench/busiest.py) from 2 s after wrk starts (past its warm-up), into
# $OUT/profile_w<W> (raw stacks) and profile_w<W>.txt (a summary, whose head goes in the log):
# the first route of $ROUTES_ONE that loads the service (the floor's does not), so e.g.
# PROFILE=4 DUR=8 ROUTES_ONE=floor,learn ROUTES_EACH= records /learn. It needs py-spy's
# executable in .devbox/bin/ (not in the kit: from its wheel, e.g. `pip download --no-deps
# --only-binary :all: --platform manylinux2014_x86_64 py-spy`, then its
# py_spy-*.data/scripts/py-spy).
set -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT/.devbox" || { echo "prepare .devbox/ first: the 16-core kit's prepare.sh"; exit 1; }
: "${OUT:?set OUT to the folder for the results}"
export PYTHONUNBUFFERED=1
if [ -d whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$ROOT/client
R=$(mktemp -d)
{
echo "nproc $(nproc)"; lscpu | grep -E "^(CPU\(s\)|Model name|Thread|Core|Socket|NUMA)"; python3 -V
bin/redis-server --version
n=0; for tree in $BASELINES; do n=$((n + 1)); [[ $tree != *=* ]] || echo "set-$n: $tree"; done
each=each; [ -n "${ROUTES_EACH-x}" ] || each=
for w in ${WS:-1 2 4 8 12}; do
 for round in $(seq "${ROUNDS:-1}"); do
  run=w$w; [ "$round" = 1 ] || run=w${w}_r$round
  n=0
  for tree in one $BASELINES $each; do
    design=$tree; project=$ROOT; env=()
    if [ "$tree" = one ]; then
      routes=${ROUTES_ONE:-predict,floor,learn,feedback,batch1}
    elif [ "$tree" = each ]; then
      routes=${ROUTES_EACH:-learn,feedback,batch1}; env=(--svc-env PERCEPTRON_ONE_WRITER=false)
    elif [[ $tree == *=* ]]; then
      n=$((n + 1)); design=set-$n; env=(--svc-env "$tree"); routes=${ROUTES_BASE:-learn}
    else
      n=$((n + 1)); design=$(basename "$tree"); routes=${ROUTES_BASE:-learn}
      project=$(cd "$ROOT" && cd "$tree" && pwd) || exit 1
    fi
    profiler=
    if [ "$tree" = one ] && [ -n "$PROFILE" ]; then
      python3 "$ROOT/deploy/bench/busiest.py" --out "$OUT/profile_$run" --seconds "$PROFILE" \
        --py-spy "$PWD/bin/py-spy" > "$R/busiest_$run" 2>&1 &
      profiler=$!
    fi
    # shellcheck disable=SC2086
    PROJECT_ROOT=$project timeout 150 python3 scale.py --out "$R/${design}_$run" \
      --tmp "/tmp/scale_${design}_$run" --redis "$PWD/bin/redis-server" --wrk "$PWD/bin/wrk" \
      $EXTRA --workers "$w" --repeat-at "" --dur "${DUR:-4}" --warm 1 --routes "$routes" \
      "${env[@]}" 2>&1 | grep -v "(warm-up)" | cut -c1-400
    if [ -n "$profiler" ]; then
      kill "$profiler" 2>/dev/null; wait "$profiler"
      cat "$R/busiest_$run"; head -n "${PROFILE_LINES:-45}" "$OUT/profile_$run.txt" 2>/dev/null
    fi
  done
 done
  python3 - "$R" > "$OUT/merged.json" <<'PY'
import json, pathlib, sys
print(json.dumps({p.parent.name: json.loads(p.read_text())
                  for p in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json"))}))
PY
done
python3 - "$OUT/merged.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
rows = {}
for name, results in runs.items():
    design, run = name.rsplit("_w", 1)
    w, _, rnd = run.partition("_r")
    for r in results:
        rows[(int(w), int(rnd or 1), design, r["key"])] = r
print("W round design route | per s | worker CPU us | busiest, least busy worker | Redis core | Redis us | p99 ms"
      " | non-200")
for w, rnd, design, key in sorted(rows):
    r = rows[(w, rnd, design, key)]
    per = 1000 if key.startswith("batch") else 1  # a packed batch: per example
    rate = r["rps"] * per
    cpu = r["workers_cpu_sum"] * 1e6 / rate if rate else float("nan")
    redis_us = r["redis_main_cpu_usec_per_req"]
    print(f"{w} {rnd} {design} {key} | {rate:,.0f} | {cpu:.1f} | {max(r['workers_cpu']):.2f}, {min(r['workers_cpu']):.2f} | "
          f"{r['redis_main_cpu']:.2f} | {redis_us} | {r['p99_ms']} | {r['statuses'] or 0}")
for w, rnd in sorted({(w, rnd) for w, rnd, _, _ in rows}):
    floor = rows.get((w, rnd, "one", "floor"))
    if floor:
        trees = sorted({d for ww, rr, d, k in rows if (ww, rr) == (w, rnd)} - {"one", "each"})
        pairs = [("one", "predict"), ("one", "learn"), ("each", "learn")]
        for design, key in pairs + [(d, "learn") for d in trees]:
            r = rows.get((w, rnd, design, key))
            if r:
                print(f"W={w} round {rnd} {design} {key} / floor: {r['rps'] / floor['rps']:.2f}")
PY
cat /proc/loadavg
} 2>&1 | tee "$OUT/log"
tar -czf "$OUT/logs.tgz" -C /tmp $(cd /tmp && ls -d scale_*/*.log) 2>/dev/null
true
