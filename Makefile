# dtq: `make demo` runs the demo, `make test` runs the whole suite. Both set everything up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: help venv demo test test-fast lint chaos chaos-short bench bench-smoke clean

help:
	@echo "make demo   - start an embedded Redis (or use DTQ_REDIS_URL), run worker+scheduler+reaper, submit demo tasks"
	@echo "make test   - run the whole test suite against DTQ_REDIS_URL or an embedded Redis"
	@echo "make lint   - ruff"

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || { PYBIN=$$(PYTHON="$(PYTHON)" sh scripts/find-python) && $$PYBIN -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m dtq_project.run_demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check dtq dtq_project tests

clean:
	rm -rf $(VENV) var .pytest_cache
