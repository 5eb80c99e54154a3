# framejit developer commands. `make demo` and `make test` work on a fresh machine:
# they create the virtual environments they need (CPython 3.11 in .venv, 3.12 in .venv312, 3.13 in
# .venv313) and install the system packages the tests use (redis-server).
PY311 ?= 3.11.7
PY312 ?= 3.12.1
PY313 ?= 3.13.0
VENV := .venv
VENV312 := .venv312
VENV313 := .venv313
STAMP := .installed
# Disk (CI ran out of it installing the third environment): pip keeps no cache of the multi-GB wheels, and the
# python-independent CUDA libraries (nvidia-*, 3.2 GB) that PyPI's torch for 3.12/3.13 pulls in are installed
# once and hard-linked into the other environment (tools/share_dists.py) before its own pip install.
export PIP_NO_CACHE_DIR := 1
# The per-version test runs go in parallel (each prints its output when it ends); TEST_JOBS=1 runs them
# one after another.
TEST_JOBS ?= 3
TEST_VERSIONS ?= 311 312 313
ENV_311 := $(VENV)/$(STAMP)
ENV_312 := $(VENV312)/$(STAMP)
ENV_313 := $(VENV313)/$(STAMP)

.PHONY: demo test test-rest test311 test312 test313 sysdeps bench clean

$(VENV)/$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || PYENV_VERSION=$(PY311) python -m venv $(VENV)
	$(VENV)/bin/pip install -q "torch==2.13.0"
	$(VENV)/bin/pip install -q -e ".[test]"
	touch $@

$(VENV312)/$(STAMP): pyproject.toml
	test -x $(VENV312)/bin/python || PYENV_VERSION=$(PY312) python -m venv $(VENV312)
	$(VENV312)/bin/python tools/share_dists.py $(VENV313)
	$(VENV312)/bin/pip install -q "torch>=2.11,<2.15"
	$(VENV312)/bin/pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/$(STAMP)
	$(VENV)/bin/python examples/demo.py

$(VENV313)/$(STAMP): pyproject.toml
	test -x $(VENV313)/bin/python || PYENV_VERSION=$(PY313) python -m venv $(VENV313)
	$(VENV313)/bin/python tools/share_dists.py $(VENV312)
	$(VENV313)/bin/pip install -q "torch>=2.11,<2.15"
	$(VENV313)/bin/pip install -q -e ".[test]"
	touch $@

# redis-server: the remote cache tier's tests start their own server on a free loopback port.
sysdeps:
	@command -v redis-server >/dev/null || { \
	  SUDO=$$(command -v sudo || true); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@command -v redis-server >/dev/null

# NOTE [Heavy tests split between interpreters] (tests/conftest.py): under `make test` (SPLIT=1) each interpreter
# of TEST_VERSIONS runs its share (FRAMEJIT_TEST_SHARD=index/count) of the frontend tests (each on two
# interpreters) and of the real-model, backend, distributed and Redis tests (each on one), so that together they
# run every test once or more; `make test311` and friends alone run everything on their interpreter.
shard_env = $(if $(SPLIT),FRAMEJIT_TEST_SHARD=$$(echo " $(TEST_VERSIONS) " | sed 's/ $(1) .*//' | wc -w)/$(words $(TEST_VERSIONS)))

# NOTE [No phony prerequisite under make test]: `make test` installs the system packages first; the suites it then
# runs in parallel take no `sysdeps` prerequisite. With GNU make 4.3 and -j3, a goal whose phony prerequisite ends at
# once can wait for a job slot until a sibling recursive make has ended (reproduced with a small Makefile), and in a
# fresh-clone CI here the 3.13 suite was not running while the 3.11 and 3.12 suites ran.
test_deps = $(if $(SPLIT),,sysdeps)

test311: $(test_deps) $(VENV)/$(STAMP)
	$(call shard_env,311) $(VENV)/bin/python -m pytest tests

test312: $(test_deps) $(VENV312)/$(STAMP)
	$(call shard_env,312) $(VENV312)/bin/python -m pytest tests

test313: $(test_deps) $(VENV313)/$(STAMP)
	$(call shard_env,313) $(VENV313)/bin/python -m pytest tests

# NOTE [Suites start as their environments are ready]: the first suite (TEST_FIRST) is the one whose torch
# lies on this disk (3.11's CPU wheel, installed in about a minute); it starts at once, and the other
# environments (PyPI's torch for 3.12 and 3.13, several GB to download) are installed one after another while it
# runs (never two pip installs at a time: editable installs write into this directory), 3.13 first (its CUDA
# libraries are then hard-linked into 3.12's: tools/share_dists.py), each suite starting as soon as its own
# environment is ready (CHAIN=1 orders the installs). Installing 3.13 first and starting its suite alone had both
# cores waiting for the download.
TEST_ORDER := $(filter $(TEST_VERSIONS),311 313 312) $(filter-out 311 313 312,$(TEST_VERSIONS))
TEST_FIRST ?= $(firstword $(TEST_ORDER))
TEST_REST := $(filter-out $(TEST_FIRST),$(TEST_ORDER))
test: sysdeps
	$(MAKE) --no-print-directory $(ENV_$(TEST_FIRST))
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target SPLIT=1 test$(TEST_FIRST) test-rest

test-rest:
	$(if $(TEST_REST),$(MAKE) --no-print-directory -j$(words $(TEST_REST)) --output-sync=target SPLIT=1 CHAIN=1 \
	  $(addprefix test,$(TEST_REST)))

# Under CHAIN, each environment of TEST_REST is installed after the one before it.
ifdef CHAIN
chain_pairs = $(join $(wordlist 1,$(words $(TEST_REST)),x $(TEST_REST)),$(addprefix :,$(TEST_REST)))
$(foreach pair,$(filter-out x:%,$(chain_pairs)),$(eval $(ENV_$(lastword $(subst :, ,$(pair)))): | $(ENV_$(firstword $(subst :, ,$(pair))))))
endif

bench: $(VENV)/$(STAMP)
	$(VENV)/bin/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(VENV312) $(VENV313) *.egg-info
