# The README's commands. Every target sets up what it needs on a fresh machine.
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE := testproject.settings

.PHONY: demo test system-deps chromium-deps lint typecheck layers facts facts-check migrations-check unit reliability bench bench-peers bench-workflows bench-soak bench-cron clean

demo: $(PY)
	@bash scripts/demo.sh

test: system-deps chromium-deps $(PY) lint typecheck layers facts-check migrations-check
	@bash scripts/testdb.sh run -- $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS)

# The reliability scenarios at full size (docs/reliability.md), RELIABILITY_RUNS times in a
# row; `make test` runs them at the CI size.
RELIABILITY_RUNS ?= 3
reliability: system-deps $(PY)
	@bash scripts/testdb.sh run -- bash -c 'for run in $$(seq $(RELIABILITY_RUNS)); do \
		echo "reliability run $$run of $(RELIABILITY_RUNS) (full tier)"; \
		MILLRACE_RELIABILITY=full $(PY) -m pytest -p no:cacheprovider tests/reliability \
			$(PYTEST_ARGS) || exit 1; done'

system-deps:
	@bash scripts/testdb.sh deps

chromium-deps:
	@bash scripts/ensure-chromium.sh

$(PY): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh

lint: $(PY)
	$(VENV)/bin/ruff check millrace_django tests testproject bench scripts
	$(VENV)/bin/ruff format --check millrace_django tests testproject bench scripts

typecheck: $(PY)
	$(VENV)/bin/mypy

layers: $(PY)
	$(VENV)/bin/lint-imports

facts: $(PY)
	$(PY) -m millrace_django.conformance.facts_page --write docs/conformance-facts.md

facts-check: $(PY)
	$(PY) -m millrace_django.conformance.facts_page --check docs/conformance-facts.md

migrations-check: $(PY)
	$(PY) manage.py makemigrations --check --dry-run

unit: $(PY)
	$(PY) -m pytest -p no:cacheprovider tests/unit tests/conformance/test_memory.py

# The benchmarks run against a PostgreSQL with its durable defaults (fsync,
# synchronous_commit and full_page_writes on); `make test`'s servers have them off.
DURABLE_DB := MILLRACE_TESTDB_DURABLE=1 bash scripts/testdb.sh run --

bench: system-deps $(PY)
	@$(DURABLE_DB) $(PY) bench/storage_bench.py

# Millrace beside procrastinate, django-tasks-db, pgqueuer, Celery and a raw-SQL bound
# (peers installed into .tmp/bench-peers/venv); BENCH_ARGS=--quick for a smoke run.
bench-peers: system-deps $(PY)
	@$(DURABLE_DB) $(PY) bench/peer_bench.py $(BENCH_ARGS)

# Millrace's workflows beside DBOS (installed into .tmp/bench-workflow-peers/venv), after
# the plain-job vs workflow figures; BENCH_ARGS=--quick for a smoke run.
bench-workflows: system-deps $(PY)
	@$(DURABLE_DB) $(PY) bench/workflow_bench.py $(BENCH_ARGS)

# An hour of steady load at half the measured drain rate, purging all along; judged on
# throughput, pickup p99 and table sizes (docs/benchmarks.md). SOAK_ARGS="--minutes 15".
bench-soak: system-deps $(PY)
	@$(DURABLE_DB) $(PY) bench/soak.py $(SOAK_ARGS)

# How late cron fires (forced due times, many fires a minute); BENCH_ARGS=--fires 2 to try it.
bench-cron: system-deps $(PY)
	@$(DURABLE_DB) $(PY) bench/cron_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .tmp db.sqlite3
