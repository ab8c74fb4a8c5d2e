# dtq: `make demo` runs the demo, `make test` runs the whole suite. Both set everything up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: help venv chromium demo test test-scaleout test-cluster test-shards test-shards-cluster test-fast test-django52 test-django60 test-py313 test-matrix django-suite lint chaos chaos-short bench bench-smoke clean

help:
	@echo "make demo   - start an embedded Redis (or use DTQ_REDIS_URL), run worker+scheduler+reaper, submit demo tasks"
	@echo "make test   - run the whole test suite against DTQ_REDIS_URL or an embedded Redis"
	@echo "make chromium - install Debian's chromium for the browser tests (make test does it)"
	@echo "make test-matrix - the backend/API/admin tests on Django 5.2 + backport, 6.0, and Python 3.13"
	@echo "make django-suite - run Django's own tests/tasks/ against DtqBackend with real workers"
	@echo "make lint   - ruff"
	@echo "make bench  - benchmark dtq against django-vtasks, django-tasks-redis, Celery, RQ, Dramatiq, Huey, arq, taskiq, saq"
	@echo "make test-scaleout - the Redis Cluster and Sentinel tests (their own servers on ports 17000-17099)"
	@echo "make test-cluster - the engine, worker, control and backend tests on a local Redis Cluster"
	@echo "make test-shards - those tests with every queue spread over 3 shards (test-shards-cluster: on the cluster)"
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

# Redis Cluster and Sentinel (docs/scaling.md): the tests start their own redis-server
# processes on 127.0.0.1:17000-17099; `make test` skips them (DTQ_TEST_SCALEOUT unset).
SCALEOUT_TESTS := tests/test_sentinel.py tests/test_cluster.py tests/test_failover_load.py \
	tests/chaos/test_chaos_failover.py
test-scaleout: $(STAMP)
	DTQ_TEST_SCALEOUT=1 $(PY) -m pytest $(SCALEOUT_TESTS) $(PYTEST_ARGS)

# The engine, worker, control and backend tests on a local 3+3 Redis Cluster.
CLUSTER_TESTS := tests/test_submit.py tests/test_submit_bulk.py tests/test_worker.py \
	tests/test_crash.py tests/test_duplicates.py tests/test_ops_*.py tests/test_backend.py \
	tests/test_backend_bulk.py tests/test_backend_conformance.py
test-cluster: $(STAMP)
	DTQ_TEST_CLUSTER=1 $(PY) -m pytest $(CLUSTER_TESTS) $(PYTEST_ARGS)

# The same tests with every queue spread over 3 shards (docs/scaling.md); test-shards-cluster
# runs them on the local cluster (make test-cluster's, ports 17090-17095), where the shards'
# slots are on two primaries. Tests of a guarantee kept per shard (marker one_shard) are
# skipped there.
SHARDS_TESTS := tests/test_submit.py tests/test_submit_bulk.py tests/test_worker.py \
	tests/test_crash.py tests/test_duplicates.py tests/test_ops_cancel.py tests/test_backend.py \
	tests/test_backend_bulk.py tests/test_periodic_*.py tests/test_flow_control.py \
	tests/test_shards.py
test-shards: $(STAMP)
	DTQ_TEST_SHARDS=3 $(PY) -m pytest $(SHARDS_TESTS) $(PYTEST_ARGS)

test-shards-cluster: $(STAMP)
	DTQ_TEST_SHARDS=3 DTQ_TEST_CLUSTER=1 $(PY) -m pytest $(SHARDS_TESTS) $(PYTEST_ARGS)

# The Django/Python matrix (docs/django-tasks.md, "What runs where"), each cell its own venv:
# Django 5.2 LTS + the django-tasks backport and Django 6.0 on Python 3.12, the pinned 6.1 on
# Python 3.13. Each runs MATRIX_TESTS (django.tasks backend, API, admin, commands, quick start);
# `make test` runs the whole suite on the pinned 6.1 and Python 3.12.
MATRIX_TESTS := tests/test_backend*.py tests/test_quickstart.py tests/test_api_tasks.py \
	tests/test_api_queues.py tests/test_api_dlq.py tests/test_api_system.py \
	tests/test_api_permissions.py tests/test_admin_pages.py tests/test_admin_permissions.py \
	tests/test_consumers.py tests/test_ops_commands.py tests/test_status_command.py \
	tests/test_checks.py tests/test_submit.py tests/test_pytest_plugin.py \
	tests/test_propagation.py tests/test_tracing.py tests/test_metadata.py

# $(1): venv, $(2): Python minor version, $(3): pip arguments that replace the Django pin.
define matrix_cell
$(1)/.installed-stamp: requirements.txt requirements-django52.txt pyproject.toml
	@test -x $(1)/bin/python || { PYBIN=$$$$(PYTHON="$(PYTHON)" sh scripts/find-python $(2)) && $$$$PYBIN -m venv $(1); }
	grep -iv '^django==' requirements.txt > $(1)/requirements.txt
	$(1)/bin/python -m pip install --quiet -r $(1)/requirements.txt $(3)
	$(1)/bin/python -m pip install --quiet --no-deps -e .
	@touch $$@
endef
$(eval $(call matrix_cell,.venv-dj52,3.12,-r requirements-django52.txt))
$(eval $(call matrix_cell,.venv-dj60,3.12,'Django==6.0.10'))
$(eval $(call matrix_cell,.venv-py313,3.13,-r requirements.txt))

test-django52: .venv-dj52/.installed-stamp
	.venv-dj52/bin/python -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)

test-django60: .venv-dj60/.installed-stamp
	.venv-dj60/bin/python -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)

test-py313: .venv-py313/.installed-stamp
	.venv-py313/bin/python -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)

test-matrix: test-django52 test-django60 test-py313

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
# CHAOS_DURATION=s changes the length of the faulted load (default 300 s), CHAOS_TOPOLOGY=cluster
# or sentinel runs it on a local Redis Cluster or behind Sentinel, with primary failovers,
# CHAOS_SHARDS=n spreads the queue over n shards (DTQ SHARDS).
chaos: $(STAMP)
	$(PY) -m tests.chaos.run --duration $(or $(CHAOS_DURATION),300) \
		$(if $(SEED),--seed $(SEED),--seeds $(or $(SEEDS),1)) \
		$(if $(CHAOS_TOPOLOGY),--topology $(CHAOS_TOPOLOGY)) \
		$(if $(CHAOS_SHARDS),--shards $(CHAOS_SHARDS)) $(CHAOS_ARGS)

# The CI-sized variant (also part of `make test`).
chaos-short: $(STAMP)
	$(PY) -m pytest tests/chaos/test_chaos_short.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check dtq dtq_project tests
	$(PY) -m mypy dtq

clean:
	rm -rf $(VENV) .venv-dj52 .venv-dj60 .venv-py313 var .pytest_cache
