#!/usr/bin/env bash
# reproduce_hat --base smol --budget gpu on the GPU host (the device tool's nvidia-h200), in the last call of
# the plan in training_jobs/reproduce/gpu_bundle.py (carry ["var/gpu_bundle/callN"], timeout_s 600):
#
#   HAT_GIT_COMMIT=<git rev-parse HEAD here> bash scripts/reproduce_gpu.sh
#
# 1. unpack: every part's sha256, the bfloat16 base reassembled into models/smollm2-135m, the punkt data, the
#    wheels into $SITE (no network);
# 2. the gpu budget without Django (python -m training_jobs.reproduce.run), stopped after $RUN_LIMIT_S seconds so
#    that what exists still comes back inside the call's 10 minutes;
# 3. into $OUT (at most 8 files come back): run.log, results.json, table.md, table.csv, run.json, plots.tar.gz
#    (the four SVGs) and extras.tar.gz (evaluation.json, data.json, the stages' stage.json and, when they
#    fit, the samples). run.log holds the unpack's and the run's output.
# Run from the repository root. Nothing here needs a GPU to parse: `bash -n scripts/reproduce_gpu.sh`.
set -uo pipefail

PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
SEED=${SEED:-0}
RUN_DIR=${RUN_DIR:-var/gpu_run/smol-gpu-seed$SEED}
RUN_LIMIT_S=${RUN_LIMIT_S:-540}
OUT=${OUT:-var/gpu_out}
KEEP_MIB=15  # each file that comes back is at most 16 MiB

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT" "$RUN_DIR"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "== unpack ($(date -u +%H:%M:%S))" | tee "$OUT/run.log"
"$PY" -m training_jobs.reproduce.gpu_bundle unpack --site "$SITE" 2>&1 | tee -a "$OUT/run.log"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    echo "unpack failed (above): nothing was run" | tee -a "$OUT/run.log"
    exit 3
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/run.log"

echo "== reproduce_hat --base smol --budget gpu --seed $SEED ($(date -u +%H:%M:%S), limit ${RUN_LIMIT_S} s)" \
    | tee -a "$OUT/run.log"
timeout --signal=TERM --kill-after=20 "$RUN_LIMIT_S" \
    "$PY" -m training_jobs.reproduce.run --base smol --budget gpu --seed "$SEED" --out "$RUN_DIR" 2>&1 \
    | tee -a "$OUT/run.log"
status=${PIPESTATUS[0]}
echo "== exit $status ($(date -u +%H:%M:%S); 124: stopped at the limit)" | tee -a "$OUT/run.log"

for name in results.json table.md table.csv run.json; do
    if [ -f "$RUN_DIR/$name" ]; then cp "$RUN_DIR/$name" "$OUT/"; fi
done
svgs=$(cd "$RUN_DIR" && ls -- *.svg 2>/dev/null)
if [ -n "$svgs" ]; then tar -C "$RUN_DIR" -czf "$OUT/plots.tar.gz" $svgs; fi

( cd "$RUN_DIR" && find . -maxdepth 4 \( -name evaluation.json -o -name data.json -o -name stage.json \) \
    >"$scratch/list" )
: >"$scratch/samples"
[ -d "$RUN_DIR/samples" ] && echo ./samples >"$scratch/samples"
tar -C "$RUN_DIR" -czf "$scratch/extras.tar.gz" -T "$scratch/list" -T "${scratch}/samples" 2>/dev/null
if [ -s "$scratch/samples" ] && [ "$(stat -c %s "$scratch/extras.tar.gz")" -gt $((KEEP_MIB << 20)) ]; then
    echo "samples left out of extras.tar.gz (over ${KEEP_MIB} MiB)" | tee -a "$OUT/run.log"
    tar -C "$RUN_DIR" -czf "$scratch/extras.tar.gz" -T "$scratch/list" 2>/dev/null
fi
if [ -s "$scratch/list" ] || [ -s "$scratch/samples" ]; then cp "$scratch/extras.tar.gz" "$OUT/"; fi
ls -l "$OUT"
exit "$status"
