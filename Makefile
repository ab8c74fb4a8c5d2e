# dtq: `make demo` runs the demo, `make test` runs the whole suite. Both set everything up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: help venv chromium demo test test-fast test-django60 django-suite lint chaos chaos-short bench bench-smoke clean

help:
	@echo "make demo   - start an embedded Redis (or use DTQ_REDIS_URL), run worker+scheduler+reaper, submit demo tasks"
	@echo "make test   - run the whole test suite against DTQ_REDIS_URL or an embedded Redis"
	@echo "make chromium - install Debian's chromium for the browser tests (make test does it)"
	@echo "make test-django60 - run the django.tasks backend tests on Django 6.0 (.venv-dj60)"
	@echo "make django-suite - run Django's own tests/tasks/ against DtqBackend with real workers"
	@echo "make lint   - ruff"
	@echo "make bench  - benchmark dtq against django-vtasks, django-tasks-redis, Celery, RQ, Dramatiq, Huey, arq, taskiq, saq"
	@echo "make chaos  - fault-injection suite, 5 min of load under faults (SEED=n to replay)"

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || { PYBIN=$$(PYTHON="$(PYTHON)" sh scripts/find-python) && $$PYBIN -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m dtq_project.run_demo

# The browser tests drive Debian's chromium through Playwright's Python package (never a
# browser Playwright downloads): install it when missing and we may, else say how.
CHROMIUM ?= $(or $(DTQ_CHROMIUM),/usr/bin/chromium)
APT_GET ?= apt-get
chromium:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		$(APT_GET) update -qq && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -qq chromium; \
	else \
		echo "make: no Chromium at $(CHROMIUM): the 5 browser tests will be skipped" \
			"(they fail with CI=true). Install it with: sudo apt-get install chromium"; \
	fi

test: $(STAMP) chromium
	$(PY) -m pytest $(PYTEST_ARGS)

# The django.tasks backend on Django 6.0: the same pins with Django 6.0.x, in its own venv.
DJ60_VENV := .venv-dj60
DJ60_PY := $(DJ60_VENV)/bin/python
DJ60_STAMP := $(DJ60_VENV)/.installed-stamp

$(DJ60_STAMP): requirements.txt pyproject.toml
	@test -x $(DJ60_PY) || { PYBIN=$$(PYTHON="$(PYTHON)" sh scripts/find-python) && $$PYBIN -m venv $(DJ60_VENV); }
	grep -iv '^django==' requirements.txt > $(DJ60_VENV)/requirements.txt
	$(DJ60_PY) -m pip install --quiet -r $(DJ60_VENV)/requirements.txt 'Django>=6.0,<6.1'
	@touch $(DJ60_STAMP)

test-django60: $(DJ60_STAMP)
	$(DJ60_PY) -m pytest tests/test_backend*.py $(PYTEST_ARGS)

# Django's own tests/tasks/ (from the installed version's sdist) against DtqBackend; passes
# when only the deliberate differences of docs/django-tasks.md fail.
django-suite: $(STAMP)
	$(PY) -m tests.django_suite $(DJANGO_SUITE_ARGS)

# Benchmark against peer queues (bench/README.md, docs/performance.md): its own venv.
bench:
	bash bench/setup.sh
	bench/.venv/bin/python bench/run.py $(BENCH_ARGS)

# A few seconds, no thresholds: CI runs it so the harness never rots.
bench-smoke:
	bash bench/setup.sh
	bench/.venv/bin/python bench/run.py --smoke

# Fault injection (docs/reliability.md). SEED=n replays one run, SEEDS=n runs n random seeds,
# CHAOS_DURATION=s changes the length of the faulted load (default 300 s).
chaos: $(STAMP)
	$(PY) -m tests.chaos.run --duration $(or $(CHAOS_DURATION),300) \
		$(if $(SEED),--seed $(SEED),--seeds $(or $(SEEDS),1)) $(CHAOS_ARGS)

# The CI-sized variant (also part of `make test`).
chaos-short: $(STAMP)
	$(PY) -m pytest tests/chaos/test_chaos_short.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check dtq dtq_project tests
	$(PY) -m mypy dtq

clean:
	rm -rf $(VENV) var .pytest_cache
