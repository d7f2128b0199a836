"""The user guide's code imports names that exist: a reader copies these lines first, and
an API reference that names a missing function is worse than none."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _imports(page: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for each ``from millrace_django... import name`` in the page's
    Python blocks; a block that is not Python syntax (a fragment with ``...`` in it) is
    read line by line."""
    found = []
    for block in PYTHON_BLOCK.findall(page.read_text()):
        try:
            statements = list(ast.walk(ast.parse(block)))
        except SyntaxError:
            lines = [line.strip() for line in block.splitlines()]
            statements = [
                node
                for line in lines
                if line.startswith("from millrace_django")
                for node in ast.walk(ast.parse(line))
            ]
        found += [
            (node.module, alias.name)
            for node in statements
            if isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.split(".")[0] == "millrace_django"
            for alias in node.names
        ]
    return found


PAGES = sorted(DOCS.glob("*.md"))
IMPORTS = sorted({(page.name, *pair) for page in PAGES for pair in _imports(page)})


def test_the_guide_imports_something_to_check() -> None:
    pages = {page for page, _, _ in IMPORTS}
    assert {"api.md", "getting-started.md", "jobs.md", "testing.md"} <= pages


@pytest.mark.parametrize(("page", "module", "name"), IMPORTS)
def test_every_name_the_guide_imports_from_millrace_exists(
    page: str, module: str, name: str
) -> None:
    imported = importlib.import_module(module)
    assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}"), (
        f"docs/{page} imports {name} from {module}, which has no such name"
    )
