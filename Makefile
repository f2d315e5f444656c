# toolchat: `make run` serves the app, `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# Each pass runs on PYTEST_WORKERS processes (pytest-xdist; 0 runs it in this one).
# A group of tests that shares one slow server (the real local model) stays on one.
PYTEST_WORKERS ?= 2
# pytest exits 5 when a pass selects no test; that is not a failure here.
PYTEST = $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || [ $$? -eq 5 ]

.PHONY: run test test-python test-long test-litellm test-openwebui attack bench bench-peer mutation lint typecheck jscheck pytest migrate clean help

help:
	@echo "make run    serve toolchat on http://$(HOST):$(PORT) (SQLite, offline model, demo user)"
	@echo "make test   lint, type-check and run the tests on SQLite and PostgreSQL (and static/js with node)"
	@echo "make bench  toolchat beside the bare loop, and /v1 beside the LiteLLM proxy (BENCH_ARGS=--quick, --concurrent)"

$(VENV)/.python-ok:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "toolchat needs Python 3.11 or newer; set PYTHON=python3.x")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@touch $@

$(VENV)/.installed-run: pyproject.toml $(VENV)/.python-ok
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.python-ok
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $@ $(VENV)/.installed-run

run: export DJANGO_DEBUG ?= 1
run: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py demo_user
	$(BIN)/python -m uvicorn project.asgi:application --host $(HOST) --port $(PORT) --lifespan off \
		--timeout-keep-alive 65

migrate: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput

# Imports point one way (the contracts are [tool.importlinter] in pyproject.toml),
# and no six lines are repeated in the application (pylint's similarity check alone).
# No function in chat, tools or project may be radon grade D or worse
# (cyclomatic complexity above 20): split it where a reader would look for the parts.
COMPLEXITY_EXCLUDE := */migrations/*

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/pylint --disable=all --enable=duplicate-code --min-similarity-lines=6 --ignore=migrations --score=n chat tools project
	@complex="$$($(BIN)/radon cc -s -n D chat tools project --exclude '$(COMPLEXITY_EXCLUDE)')"; \
	if [ -n "$$complex" ]; then \
		echo "$$complex"; echo "make lint: split the functions above (radon grade D or worse, complexity > 20)"; exit 1; \
	fi

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The chat page's modules: tsc checks their JSDoc types, node's runner tests the
# reducer (tests/js/). TypeScript is test tooling only (package.json); the page
# itself needs no install. Without node and npm this is skipped, under
# REQUIRE_SERVICES=1 (CI) it fails.
REQUIRED := $(filter 1 true yes,$(shell echo "$(REQUIRE_SERVICES)" | tr A-Z a-z))
jscheck:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		if [ -n "$(REQUIRED)" ]; then \
			echo "jscheck: node and npm are needed (REQUIRE_SERVICES=1): install Node.js 20 or newer" >&2; exit 1; \
		fi; \
		echo "jscheck: skipped: node or npm not found (install Node.js 20 or newer to check static/js)"; exit 0; \
	fi; \
	set -e; \
	if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
		echo "npm ci --no-audit --no-fund"; npm ci --no-audit --no-fund; \
	fi; \
	echo "tsc --noEmit -p ."; node_modules/.bin/tsc --noEmit -p .; \
	echo "node --test tests/js/"; node --test --test-reporter=spec tests/js/

pytest: $(VENV)/.installed-dev
	TOOLCHAT_TEST_DB=sqlite $(PYTEST)
	TOOLCHAT_TEST_DB=postgres $(PYTEST)

test: lint typecheck jscheck pytest

# The other Pythons README.md claims: `make test-python PYTHON=python3.13` installs
# toolchat into .venv-<that Python's version> and runs the SQLite pass there
# (PYTEST_ARGS narrows it). .ci/run calls it for 3.12 and 3.13, with PYTHON_VENVS
# (the folder of those virtualenvs, this one by default) in its cache: a kept
# virtualenv is brought to what a fresh install would pick (--upgrade-strategy
# eager), in a fifth of a fresh install's minutes.
PYTHON_VENVS ?= .
test-python:
	@version=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	venv=$(PYTHON_VENVS)/.venv-$$version && \
	{ [ -x $$venv/bin/python ] || $(PYTHON) -m venv $$venv; } && \
	$$venv/bin/python -m pip install --quiet --upgrade pip && \
	$$venv/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e ".[dev]" && \
	echo "== Python $$version" && \
	{ TOOLCHAT_TEST_DB=sqlite $$venv/bin/python -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || [ $$? -eq 5 ]; }

# The attack suite alone (tests/attack_suite.py, docs/security.md), on PostgreSQL.
attack: $(VENV)/.installed-dev
	TOOLCHAT_TEST_DB=postgres $(BIN)/python -m pytest -m attack $(PYTEST_ARGS)

# Mutation testing of the pure guards and decisions (chat/engine/continuation.py,
# chat/history.py, chat/history_guards.py; [tool.mutmut] in pyproject.toml), not part of `make test`: a
# few minutes on two cores. docs/testing.md lists the survivors and why each is harmless.
mutation: $(VENV)/.installed-dev
	$(BIN)/mutmut run --max-children $(or $(MUTATION_JOBS),2)
	@$(BIN)/mutmut results | grep -v ': killed$$' || true

# The tests that take minutes each (marked `long`: a two-minute Redis outage), on PostgreSQL.
test-long: $(VENV)/.installed-dev
	TOOLCHAT_LONG_TESTS=1 TOOLCHAT_TEST_DB=postgres $(BIN)/python -m pytest -m long $(PYTEST_ARGS)

# The tests marked `litellm` alone (docs/providers.md): the LiteLLM proxy, installed into
# its own cached virtualenv by .ci/litellm.sh, in front of the scripted server, and in
# front of the real local model when `eval "$(.ci/llama.sh)"` has set its variables.
test-litellm: $(VENV)/.installed-dev
	litellm_env="$$(.ci/litellm.sh)" && eval "$$litellm_env" && \
	TOOLCHAT_TEST_DB=sqlite $(BIN)/python -m pytest -p no:cacheprovider -m litellm $(PYTEST_ARGS)

# The tests marked `openwebui` alone (docs/openai-api.md): Open WebUI, installed into its own
# cached virtualenv by .ci/openwebui.sh, in front of toolchat's /v1 (the PostgreSQL pass).
test-openwebui: $(VENV)/.installed-dev
	openwebui_env="$$(.ci/openwebui.sh)" && eval "$$openwebui_env" && \
	TOOLCHAT_TEST_DB=postgres $(BIN)/python -m pytest -p no:cacheprovider -m openwebui $(PYTEST_ARGS)

# Needs the PostgreSQL and Redis server binaries; see bench/README.md. The second table is
# the latency /v1/chat/completions adds beside the LiteLLM proxy's (bench/gateway.py, quick form;
# .ci/litellm.sh installs the proxy into its cached virtualenv on the first run).
bench: $(VENV)/.installed-dev
	$(BIN)/python bench/compare.py $(BENCH_ARGS)
	$(BIN)/python bench/gateway.py --quick $(GATEWAY_ARGS)

# django-ai-assistant in a virtualenv of its own: compare.py's peer row (bench/peer/README.md).
bench-peer: bench/.peer-venv/.installed

bench/.peer-venv/.installed: bench/peer/requirements.txt
	$(PYTHON) -m venv bench/.peer-venv
	bench/.peer-venv/bin/python -m pip install --quiet -r bench/peer/requirements.txt
	@touch $@

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .ruff_cache .pytest_cache .hypothesis staticfiles node_modules mutants
