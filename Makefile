# Set-up is two commands: `make demo` and `make test`. Both create .venv on first use.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

# The first Python >= 3.12 found: python3.13, python3.12, then pyenv's installs.
FIND_PYTHON := for p in python3.13 python3.12 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python 2>/dev/null | sort -rV) python3; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then echo $$p; break; fi; \
	done

.PHONY: demo test bench bench-gpu lint clean
demo: $(STAMP)
	$(PY) -m einsat.cli demo

test: $(STAMP)
	$(PY) -m pytest -n 2 -q tests

bench: $(STAMP)
	$(PY) -m benchmarks.harness

lint: $(STAMP)
	$(PY) -m ruff check einsat tests benchmarks

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
	$(PY) -m pip install -q -c constraints.txt -e '.[test,notebooks]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
