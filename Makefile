# framejit developer commands. `make demo` and `make test` work on a fresh machine:
# they create the virtual environments they need (CPython 3.11 in .venv, 3.12 in .venv312).
PY311 ?= 3.11.7
PY312 ?= 3.12.1
VENV := .venv
VENV312 := .venv312
STAMP := .installed

.PHONY: demo test test311 test312 bench clean

$(VENV)/$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || PYENV_VERSION=$(PY311) python -m venv $(VENV)
	$(VENV)/bin/pip install -q "torch==2.13.0"
	$(VENV)/bin/pip install -q -e ".[test]"
	touch $@

$(VENV312)/$(STAMP): pyproject.toml
	test -x $(VENV312)/bin/python || PYENV_VERSION=$(PY312) python -m venv $(VENV312)
	$(VENV312)/bin/pip install -q "torch>=2.11,<2.15"
	$(VENV312)/bin/pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/$(STAMP)
	$(VENV)/bin/python examples/demo.py

test311: $(VENV)/$(STAMP)
	$(VENV)/bin/python -m pytest tests

test312: $(VENV312)/$(STAMP)
	$(VENV312)/bin/python -m pytest tests

test: test311 test312

bench: $(VENV)/$(STAMP)
	$(VENV)/bin/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(VENV312) *.egg-info
