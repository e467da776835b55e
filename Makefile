# Quick start: `make demo` (run every analysis notebook on the embedded defaults) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo bench clean

venv: $(STAMP)

# Pinned, reproducible install: constraints.txt fixes every version (torch is the CPU build).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade "pip>=24"
	$(PIP) install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check workbench tests bench
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check workbench tests bench
	$(VENV)/bin/ruff format --check workbench tests bench

demo: $(STAMP)
	$(VENV)/bin/workbench demo

bench: $(STAMP)
	$(PY) bench/capture.py
	$(PY) bench/geometry.py
	$(PY) bench/sweep.py

clean:
	rm -rf $(VENV) runs .pytest_cache
