"""The API and the portal do not import each other: what both need lives in ``web/``,
below them, which imports neither; ``api/app.py``, which assembles the one app, is the
only module of either that imports the other; and neither composes a change itself: the
use cases of ``services/`` do, waking the controller (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import trainyard

PACKAGE = Path(trainyard.__file__).parent
ASSEMBLY = "trainyard.api.app"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _crossings(package: str, forbidden: tuple[str, ...]) -> list[str]:
    crossings = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        module = "trainyard." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if module == ASSEMBLY:
            continue
        crossings += [f"{module} imports {name}" for name in sorted(_imports(path))
                      if name.startswith(forbidden)]
    return crossings


def test_the_portal_imports_nothing_of_the_api() -> None:
    assert _crossings("portal", ("trainyard.api",)) == []


def test_only_the_assembly_of_the_api_imports_the_portal() -> None:
    assert _crossings("api", ("trainyard.portal",)) == []


def test_the_web_layer_is_below_both() -> None:
    assert _crossings("web", ("trainyard.api", "trainyard.portal")) == []


def test_services_import_nothing_of_the_doors() -> None:
    assert _crossings("services", ("trainyard.api", "trainyard.portal", "trainyard.web")) == []


def _wakes(package: str) -> list[str]:
    """Where a module of ``package`` calls ``wake_controller`` itself."""
    found = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "wake_controller"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_no_router_or_page_wakes_the_controller_itself() -> None:
    """A change is a use case of ``services/`` (``*_actions.py``, ``submission.py``), which
    wakes the controller once its unit of work has committed; the doors only call it."""
    assert _wakes("api") + _wakes("portal") == []
