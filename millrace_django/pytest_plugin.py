"""pytest fixtures for projects using Millrace. Enable them in your root ``conftest.py``::

    pytest_plugins = ["millrace_django.pytest_plugin"]

- ``millrace``: a :class:`~millrace_django.testing.JobRunner` on memory storage with the
  project's ``MILLRACE`` settings, installed as the default client for the test (so
  ``fn.enqueue()`` stores in it) and uninstalled after. No database needed.
- ``millrace_orm``: the same over the ORM provider on the test database (it requests
  pytest-django's ``db`` fixture).

Both follow freezegun while a frozen time is active, and ``MILLRACE`` overrides made
during the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from millrace_django.testing import JobRunner, project_runner


@pytest.fixture
def millrace() -> Iterator[JobRunner]:
    """A JobRunner on memory storage, installed as the default client for the test."""
    with project_runner() as runner:
        yield runner


@pytest.fixture
def millrace_orm(db: None) -> Iterator[JobRunner]:
    """A JobRunner on the ORM storage (the test database), installed for the test."""
    with project_runner(storage="orm") as runner:
        yield runner
