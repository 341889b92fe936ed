# `make run`: set up .venv and run the main job (writes CSV and PNG under results/).
# `make test`: set up .venv and run the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench sweeps validate mutation docs-check setup clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) -m experiments.main

test: $(STAMP)
	$(PY) -m pytest --numprocesses=auto --maxprocesses=4

validate: $(STAMP)
	$(PY) -m experiments.validate

sweeps: $(STAMP)
	$(PY) -m experiments.sweep_ep
	$(PY) -m experiments.sweep_tp
	$(PY) -m experiments.sweep_topology
	$(PY) -m experiments.sweep_comm_sms
	$(PY) -m experiments.sweep_faults
	$(PY) -m experiments.lesson_exercises
	$(PY) -m experiments.jobs_sharing
	$(PY) -m experiments.nccl_curves
	$(PY) -m experiments.plots

mutation: $(STAMP)
	$(PY) -m pip install -q -e '.[mutation]'
	$(PY) -m tools.mutation
	$(PY) -m tools.mutation --kernels

bench: $(STAMP)
	$(PY) -m tools.benchmark

docs-check: $(STAMP)
	$(PY) -m tools.docs_commands --all

clean:
	rm -rf $(VENV) build *.egg-info
