# The README's commands. Every target sets up what it needs on a fresh machine.
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE := testproject.settings

.PHONY: demo test system-deps chromium-deps lint typecheck layers facts facts-check migrations-check unit bench clean

demo: $(PY)
	@bash scripts/demo.sh

test: system-deps chromium-deps $(PY) lint typecheck layers facts-check migrations-check
	@bash scripts/testdb.sh run -- $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS)

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

bench: system-deps $(PY)
	@bash scripts/testdb.sh run -- $(PY) bench/storage_bench.py

clean:
	rm -rf $(VENV) .tmp db.sqlite3
