# Set-up is two commands: `make demo` and `make test`. Both create .venv on first use.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

# A Python >= 3.12 (egglog 14 needs it): 3.12 first, the version constraints.txt was pinned with,
# then newer ones; pyenv's installs are looked at directly (its shims fail for versions not selected).
PYENV_VERSIONS := $${PYENV_ROOT:-$$HOME/.pyenv}/versions
FIND_PYTHON := for p in python3.12 $$(ls -d $(PYENV_VERSIONS)/3.12*/bin/python 2>/dev/null | sort -rV) \
	    python3.13 $$(ls -d $(PYENV_VERSIONS)/3.1[3-9]*/bin/python 2>/dev/null | sort -V) python3; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then echo $$p; break; fi; \
	done

.PHONY: demo test test-slow test-blas test-distributed test-gpu-static notebooks lab bench bench-gpu torch-venv chromium lint clean
demo: $(STAMP)
	@mkdir -p build
	$(PY) -m einsat.cli demo --report build/demo-report.html

# The notebooks executed in a Jupyter kernel, outputs and pictures included: build/notebooks/*.ipynb
notebooks: $(STAMP)
	$(PY) scripts/run_notebooks.py build/notebooks

# The notebooks open in JupyterLab, from .venv: jupytext's contents manager reads the .py notebooks as
# notebooks (and writes them back as .py), and scripts/lab/overrides.json makes a double click open a
# .py file as a notebook (--allow-root where root runs it, as in a container). It prints the URL to
# open; Ctrl-C stops it. tests/notebooks/test_lab.py
# starts this command on loopback and opens a notebook through the server's REST API.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR)/notebooks \
	  --ServerApp.contents_manager_class=jupytext.TextFileContentsManager \
	  --LabApp.app_settings_dir=$(CURDIR)/scripts/lab $(if $(filter 0,$(shell id -u)),--allow-root)

# `make test` is the suite a developer runs on every change: at most 6 minutes on an idle 2-core machine.
# Tests marked `slow` (each several seconds: whole real models, subprocess runs of the CLI, the notebooks
# that optimize, the benchmarks' own tests) run in `make test-slow`, which CI runs too. worksteal keeps
# both workers busy to the end when the last tests are long ones.
PYTEST_PARALLEL := -n 2 --dist worksteal

test: $(STAMP) torch-venv chromium
	$(PY) -m pytest $(PYTEST_PARALLEL) -q -m "not slow" tests

test-slow: $(STAMP) torch-venv chromium
	$(PY) -m pytest $(PYTEST_PARALLEL) -q -m slow tests

# The tests that compare programs or figures with saved ones (pytest's `saved_results` marker, slow
# ones included) once more under another OpenBLAS kernel family than the one `make test` ran under
# (this CPU's, or the one OPENBLAS_CORETYPE sets where the environment sets it):
# scripts/blas_kernel.py picks it (Sandybridge where that one has FMA; see its text) and says
# which, so that a dependence on a kernel's rounding fails here before it fails for a user (#38).
test-blas: $(STAMP)
	@kernel="$$($(PY) scripts/blas_kernel.py --other)" || exit 1; \
	echo "OPENBLAS_CORETYPE=$$kernel $(PY) -m pytest -q -p no:cacheprovider -m saved_results tests"; \
	OPENBLAS_CORETYPE=$$kernel $(PY) -m pytest -q -p no:cacheprovider -m saved_results tests

# Headless Chromium, for tests/viz/test_report_browser.py (the HTML report rendered as a page: no
# console error, every picture drawn): Debian's package, installed once; nothing to do when present.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  echo "Installing Debian's chromium (for tests/viz/test_report_browser.py)"; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo apt-get update -q && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	fi

bench: $(STAMP)
	$(PY) -m benchmarks.harness

# The GPU run (einsat's CuPy backend beside PyTorch eager and torch.compile), on the GPU machine's
# own Python, which has CuPy and PyTorch but not egglog.
bench-gpu:
	python3 -m benchmarks.harness --gpu

# PyTorch exists here only as a CPU wheel for Python 3.11: the PyTorch baselines are tested in a
# side venv made from it (tests/benchmarks/test_torch_baseline.py). Without the wheel, nothing to do.
TORCH_VENV := .torch-venv
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-*-cp311-*.whl))
FIND_PYTHON311 := for p in python3.11 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.11*/bin/python 2>/dev/null | sort -rV); do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then echo $$p; break; fi; \
	done

torch-venv: $(if $(TORCH_WHEEL),$(TORCH_VENV)/.installed)

$(TORCH_VENV)/.installed: benchmarks/torch-constraints.txt
	@py="$$($(FIND_PYTHON311))"; \
	if [ -z "$$py" ]; then echo "the torch wheel $(TORCH_WHEEL) needs Python 3.11 and none was found"; exit 1; fi; \
	echo "Creating $(TORCH_VENV) with $$py and $(TORCH_WHEEL)"; \
	rm -rf $(TORCH_VENV) && $$py -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q -c benchmarks/torch-constraints.txt '$(TORCH_WHEEL)' numpy
	touch $@

# The Ray executor of einsat.partition (the `distributed` extra, ray pinned in constraints.txt), in a
# venv of its own: Ray's wheel and a local cluster's start-up are too heavy for every `make test`,
# where tests/partition's Ray test skips, saying why.
DIST_VENV := .distributed-venv
DIST_PY := $(DIST_VENV)/bin/python
DIST_STAMP := $(DIST_VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

test-distributed: $(DIST_STAMP)
	$(DIST_PY) -m pytest -q -p no:cacheprovider tests/partition

$(DIST_STAMP): pyproject.toml constraints.txt
	@py="$$($(FIND_PYTHON))"; \
	if [ -z "$$py" ]; then echo "einsat needs Python >= 3.12 and none was found."; exit 1; fi; \
	echo "Creating $(DIST_VENV) with $$py ($$($$py --version))"; \
	rm -rf $(DIST_VENV) && $$py -m venv $(DIST_VENV)
	$(DIST_PY) -m pip install -q --upgrade pip
	$(DIST_PY) -m pip install -q -c constraints.txt -e '.[test,bench,distributed]'
	touch $@

# The GPU path checked without a GPU, against the real libraries (docs/gpu.md, "Without a GPU"):
# tests/gpu in a venv of its own that installs the `gpu` extra (CuPy 14 with NVRTC and the CUDA
# headers, cuBLAS, cuDNN 9; pinned in gpu-constraints.txt, 1.9 GB of wheels). Tests that need
# these libraries fail there instead of skipping (--gpu-libs=required).
GPU_VENV := .gpu-static-venv
GPU_PY := $(GPU_VENV)/bin/python
GPU_STAMP := $(GPU_VENV)/.installed-$(shell cat pyproject.toml constraints.txt gpu-constraints.txt | cksum | cut -d' ' -f1)

test-gpu-static: $(GPU_STAMP)
	$(GPU_PY) -m pytest -q -p no:cacheprovider --gpu-libs=required tests/gpu

$(GPU_STAMP): pyproject.toml constraints.txt gpu-constraints.txt
	@py="$$($(FIND_PYTHON))"; \
	if [ -z "$$py" ]; then echo "einsat needs Python >= 3.12 and none was found."; exit 1; fi; \
	echo "Creating $(GPU_VENV) with $$py ($$($$py --version))"; \
	rm -rf $(GPU_VENV) && $$py -m venv $(GPU_VENV)
	$(GPU_PY) -m pip install -q --upgrade pip
	$(GPU_PY) -m pip install -q -c constraints.txt -c gpu-constraints.txt -e '.[gpu,test]' nvidia-cuda-crt
	touch $@

lint: $(STAMP)
	$(PY) -m ruff check einsat tests benchmarks scripts notebooks

$(STAMP): pyproject.toml constraints.txt
	@py="$$($(FIND_PYTHON))"; \
	if [ -z "$$py" ]; then \
	  echo "einsat needs Python >= 3.12 (egglog 14 requires it) and none was found."; \
	  echo "Install one, e.g. 'pyenv install 3.12' or your distribution's python3.12 package, then re-run make."; \
	  exit 1; \
	fi; \
	echo "Creating $(VENV) with $$py ($$($$py --version))"; \
	rm -rf $(VENV) && $$py -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test,notebooks,bench,dev]'
	touch $@

clean:
	rm -rf $(VENV) $(TORCH_VENV) $(GPU_VENV) $(DIST_VENV) .pytest_cache .hypothesis build *.egg-info
