"""Workflow definitions: code-first, versioned, registered when they are built.

``Workflow(id, version=..., steps=[...])`` compiles and validates its graph at once (so a
bad graph fails the import, i.e. start-up) and registers itself under ``(id, version)``.
A second, different definition under the same id and version is an error; importing
the same module again (an autoreloader) replaces its own definition.

Instances finish on the version they started on, so keep old versions defined while
instances of them may run. A process that meets an instance of a definition it has not
imported imports the module the definition was declared in (recorded in the instance).
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Mapping, Sequence

from millrace_django.contract import JSON, RetrySpec
from millrace_django.engine.retry import validate_retry
from millrace_django.engine.workflow.errors import InvalidWorkflow, UnknownWorkflow
from millrace_django.engine.workflow.graph import Graph, compile_graph, export
from millrace_django.engine.workflow.spec import Node

_lock = threading.RLock()
_registry: dict[str, dict[int, Workflow]] = {}


class Workflow:
    """A versioned workflow definition; see :mod:`millrace_django.engine.workflow.spec`
    for the steps.

    ``queue`` and ``retry`` apply to its jobs unless a step names its own (default: the
    project's default queue and retry policy). ``module`` is where workers import the
    definition from; it defaults to the module that built it.
    """

    def __init__(
        self,
        id: str,
        *,
        version: int = 1,
        steps: Sequence[Node],
        queue: str | None = None,
        retry: RetrySpec | None = None,
        module: str | None = None,
    ) -> None:
        if not isinstance(id, str) or not id.strip():
            raise InvalidWorkflow(f"a workflow id must be a non-blank string; got {id!r}")
        if type(version) is not int or version < 1:
            raise InvalidWorkflow(
                f"workflow {id!r}: version must be an integer >= 1; got {version!r}"
            )
        if queue is not None and (not isinstance(queue, str) or not queue.strip()):
            raise InvalidWorkflow(f"workflow {id!r}: queue= must be a non-blank string")
        if retry is not None:
            if not isinstance(retry, RetrySpec):
                raise InvalidWorkflow(f"workflow {id!r}: retry= must be a Retry policy")
            validate_retry(retry)
        self.id = id
        self.version = version
        self.queue = queue
        self.retry = retry
        self.module = module if module is not None else _caller_module()
        self.graph: Graph = compile_graph(f"{id} v{version}", steps)
        register(self)

    def export_graph(self) -> dict[str, JSON]:
        """Nodes, edges and kinds, as JSON (see :func:`~.graph.export`)."""
        return export(self.id, self.version, self.graph)

    def __repr__(self) -> str:
        return f"<Workflow {self.id} v{self.version}>"


def _caller_module() -> str:
    try:
        return str(sys._getframe(2).f_globals.get("__name__", "__main__"))
    except ValueError:  # pragma: no cover - no such frame
        return "__main__"


def register(workflow: Workflow) -> None:
    """Add ``workflow`` to the registry; a different definition under the same id and
    version raises :class:`InvalidWorkflow`."""
    with _lock:
        versions = _registry.setdefault(workflow.id, {})
        existing = versions.get(workflow.version)
        if existing is not None and existing is not workflow:
            same_source = existing.module == workflow.module and (
                existing.export_graph() == workflow.export_graph()
            )
            if not same_source:
                raise InvalidWorkflow(
                    f"workflow {workflow.id!r} version {workflow.version} is defined twice "
                    f"(in {existing.module} and {workflow.module}); give the new definition "
                    "a new version"
                )
        versions[workflow.version] = workflow


def unregister(workflow: Workflow) -> None:
    """Forget ``workflow`` (tests that define throwaway workflows)."""
    with _lock:
        versions = _registry.get(workflow.id, {})
        if versions.get(workflow.version) is workflow:
            del versions[workflow.version]
        if not versions:
            _registry.pop(workflow.id, None)


def registered() -> Mapping[str, Mapping[int, Workflow]]:
    """Every definition built so far in this process (a snapshot)."""
    with _lock:
        return {key: dict(versions) for key, versions in _registry.items()}


def find(definition_id: str, version: int | None = None, module: str | None = None) -> Workflow:
    """The definition ``(definition_id, version)`` (the latest version when ``None``),
    importing ``module`` first if it is not registered yet."""
    found = _lookup(definition_id, version)
    if found is None and module and module != "__main__":
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UnknownWorkflow(
                f"workflow {definition_id!r}: cannot import its module {module!r}: {error}"
            ) from error
        found = _lookup(definition_id, version)
    if found is None:
        with _lock:
            known = sorted(_registry.get(definition_id, {}))
        which = f"version {version} of workflow" if version is not None else "workflow"
        hint = (
            f" (versions defined here: {', '.join(map(str, known))}; keep old versions "
            "defined while their instances run)"
            if known
            else " (is the module that defines it imported?)"
        )
        raise UnknownWorkflow(f"{which} {definition_id!r} is not defined{hint}")
    return found


def _lookup(definition_id: str, version: int | None) -> Workflow | None:
    with _lock:
        versions = _registry.get(definition_id)
        if not versions:
            return None
        if version is None:
            return versions[max(versions)]
        return versions.get(version)
