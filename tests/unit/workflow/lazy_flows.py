"""Imported lazily by a definition lookup (see test_definitions)."""

from millrace_django.engine.workflow import Step, Workflow
from tests.unit.workflow.flows import first

LAZY = Workflow("t-lazy", steps=[Step(first)])
