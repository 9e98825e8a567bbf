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

.PHONY: install system-deps run test lint format bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	# torch first and pinned: an unpinned resolve pulls a multi-GB CUDA build
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e '.[dev]'
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
	rm -rf $(VENV) mlflow.db mlruns mlartifacts
