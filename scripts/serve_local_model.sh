#!/usr/bin/env bash
# Serve the committed tiny demo model (or MODEL_DIR) on loopback: OpenAI-compatible, offline.
#   scripts/serve_local_model.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m training_jobs.tiny_model.serve \
  --model-dir "${MODEL_DIR:-models/demo-tiny}" --host "${HOST:-127.0.0.1}" --port "${1:-${PORT:-8011}}"
