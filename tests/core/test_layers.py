"""``docs/architecture.md``'s layers, held by the code: the table "Packages, in import order"
names every package, each imports only what its row says, and SQL lives only in ``store/``.

A plain walk over the source's syntax trees, as ``test_vocabulary_home`` does: the rules
below are the table's, written once more as data, and the test holds the three together —
the rules against the code (every import), the rules against the table (its rows, their
order, and each allowed package named in the row's "imports" cell), so that neither the
document nor the code can drift alone.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import trainyard

PACKAGE = Path(trainyard.__file__).parent
ROOT = Path(__file__).resolve().parents[2]

# The table's rows, in order: what each covers (a package ``name/`` or a module ``name.py``).
ROWS: tuple[tuple[str, ...], ...] = (
    ("spec/",), ("core/",), ("schemas/",), ("scheduler/",), ("sim/",), ("store/",), ("backends/",),
    ("monitor/",), ("services/",), ("controller/",), ("web/",), ("api/",), ("portal/",), ("runtime.py",),
    ("client.py", "client_config.py", "client_errors.py", "client_input.py", "client_sweeps.py",
     "client_workdir.py", "client_files.py", "client_notices.py",
     "client_sessions.py", "client_models.py", "client_datasets.py", "client_http.py"), ("cli/",),
)
ABOVE_CONTROLLER = ("spec", "core", "schemas", "scheduler", "sim", "store", "backends", "monitor", "services")
# Where files (a row, or one file of it: a path prefix under src/trainyard/) may import from
# (module prefixes under ``trainyard.``), besides their own row. A file gets the union of
# every entry that is a prefix of its path: a file's entry widens its row's, never narrows it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "spec/": ("core.selectors",),  # a job file is checked by the code that will evaluate it
    "core/": (),
    "core/settings.py": ("spec.storages",),  # a mount root obeys the job file's mount-path rules
    "schemas/": ("core", "spec"),
    "scheduler/": ("core",),
    "sim/": ("scheduler", "core"),
    "store/": ("core",),
    # The job file's contract where a task runs: storages' paths and variables, suspend signals.
    "backends/": ("core", "spec.storages", "spec.models", "spec.datasets"),
    "monitor/": ("store", "core"),
    # A backend only through its protocol (base), never a concrete one; containers' errors.
    "services/": ("spec", "core", "schemas", "scheduler", "store", "backends.base", "backends.containers", "monitor"),
    # A job's files for its owner: read by the one walk that holds a task's paths hostile (issue 31).
    "services/job_files.py": ("backends.filewalk",),
    "controller/": ABOVE_CONTROLLER,
    # What the API and the portal share: the context holds the store, the backend (its
    # protocol) and the controller; who calls, body limits, revocation, the error page.
    "web/": ("spec", "core", "schemas", "scheduler", "store.rows", "store.db", "backends.base", "services",
             "controller"),
    # Routers call services; the store only for rows' types and the Database the context holds.
    "api/": ("spec", "core", "schemas", "scheduler", "store.rows", "store.db", "backends.base", "monitor", "services",
             "web"),
    "api/server.py": ("controller", "backends", "store"),  # `yard up` assembles the concrete pieces
    "portal/": ("core", "spec", "schemas", "store.rows", "backends.base", "services", "web"),
    "runtime.py": (),  # the standard library only: a task's own Python imports it
    "client.py": ("schemas", "core.states", "core.keep", "core.logreads"),
    "client_config.py": (),
    "client_errors.py": (),
    "client_input.py": (),
    "client_http.py": (),  # the standard library only (and httpx, made when a request needs it)
    "client_sweeps.py": ("schemas",),
    "client_workdir.py": ("core.workdirs", "schemas"),  # the server's own check of an archive, stdlib-only
    "client_files.py": ("schemas",),
    "client_notices.py": ("schemas",),
    "client_sessions.py": ("schemas",),
    "client_datasets.py": ("schemas",),
    "client_models.py": ("schemas",),  # imported by name, when an answer first needs one (typing: statically)
    # `yard --help` loads neither httpx nor pydantic: core's stdlib-only vocabulary (CORE_STDLIB_ONLY).
    "cli/": ("client", "client_config", "schemas", "sim", "core.states", "core.priorities", "core.names",
             "core.sharing", "core.labels", "core.durations", "core.jobfile", "core.printable"),
    # `yard submit` finds the folder to send (lazily: not for --help); `yard jobs` reads an
    # answer its plain table does not expect with the models (cli/plain.py).
    "cli/commands.py": ("client_workdir", "client_models"),
    "cli/main.py": ("client_http",),  # `yard` as the program: its requests skip httpx where they can
    "cli/up.py": ("api", "core.settings"),  # `yard up` starts the server in this process
    # `yard doctor` runs the backends' checks on the server's settings and store, as `yard up` would.
    "cli/doctor.py": ("backends", "core.settings", "store"),
    "cli/reference.py": ("core.settings",),  # the settings reference is generated from their declarations
}
CORE_STDLIB_ONLY = ("core.states", "core.priorities", "core.names", "core.sharing", "core.labels", "core.durations",
                    "core.jobfile", "core.printable")
# Rules that point down the table, and why.
DOWNWARD = {("spec/", "core.selectors"): "spec/ and core/ sit side by side at the bottom"}
# api/ and portal/ must not import each other (issue 28): test_api_and_portal_do_not_import_each_other;
# but for the one module that assembles the app from both.
DOORS = ("api", "portal")
ASSEMBLY = "api/app.py"
# Edges the code has that the rules forbid, each to be taken away (with why it is there);
# the test fails when one is gone too, so that the list only shrinks. Empty: keep it so.
KNOWN: dict[tuple[str, str], str] = {}


@functools.cache
def source_files() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of the package with its syntax tree, parsed once for all the tests here."""
    return tuple((path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), filename=str(path)))
                 for path in sorted(PACKAGE.rglob("*.py"))
                 if path.relative_to(PACKAGE).as_posix() != "__init__.py")  # empty, as every __init__.py


def is_module(dotted: str) -> bool:
    path = PACKAGE.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def our_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module under ``trainyard.``) of each import of ours, anywhere in the file
    (functions' and ``TYPE_CHECKING``'s included); ``from trainyard.a import b`` is ``a.b``
    when ``b`` is a module, else ``a``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("trainyard."):
                    yield node.lineno, alias.name.removeprefix("trainyard.")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield node.lineno, "<a relative import>"
                continue
            module = node.module or ""
            if module != "trainyard" and not module.startswith("trainyard."):
                continue
            base = module.removeprefix("trainyard").removeprefix(".")
            for alias in node.names:
                whole = f"{base}.{alias.name}" if base else alias.name
                yield node.lineno, whole if is_module(whole) else base


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def row_of(where: str) -> int:
    """The table row a file (``a/b.py``) or a module (``a.b``) belongs to."""
    top = where.split("/")[0] if "/" in where else where.split(".")[0]
    for index, row in enumerate(ROWS):
        if {f"{top}/", f"{top}.py"} & set(row):
            return index
    raise AssertionError(f"{where} belongs to no row of docs/architecture.md's table")


def allowed_for(where: str) -> tuple[str, ...]:
    return tuple(m for prefix, modules in MAY_IMPORT.items() if where.startswith(prefix) for m in modules)


def crossings() -> list[tuple[str, str, int]]:
    """(file, module, line) of every import of ours that the rules do not allow."""
    found: set[tuple[str, str, int]] = set()
    for where, tree in source_files():
        own, allowed = row_of(where), allowed_for(where)
        for line, module in our_imports(tree):
            if module == "<a relative import>" or (
                    row_of(module) != own and not any(within(module, m) for m in allowed)):
                found.add((where, module, line))
    return sorted(found)


def is_doors_edge(where: str, module: str) -> bool:
    mine, theirs = where.split("/")[0], module.split(".")[0]
    return {mine, theirs} == set(DOORS) and where != ASSEMBLY


# -- the table ------------------------------------------------------------------------------


def architecture_doc() -> Path:
    [doc] = sorted((ROOT / "docs").rglob("architecture.md"))
    return doc


def table() -> list[tuple[tuple[str, ...], str]]:
    """(names in the first cell, the "imports" cell) of each row of the packages table."""
    text = architecture_doc().read_text()
    section = text.split("## Packages", 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows.append((tuple(re.findall(r"`([^`]+)`", cells[0])), cells[-1]))
    return rows


def test_the_table_has_one_row_per_package_in_this_order() -> None:
    assert tuple(names for names, _ in table()) == ROWS
    tops = {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    tops |= {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    covered = {name for row in ROWS for name in row}
    assert sorted(tops - covered) == [], "a new package needs its row in docs/architecture.md and in MAY_IMPORT"
    assert sorted(covered - tops) == []


def test_each_row_imports_only_rows_above_it() -> None:
    down = [(prefix, module) for prefix, modules in MAY_IMPORT.items() for module in modules
            if row_of(module) >= row_of(prefix) and (prefix, module) not in DOWNWARD]
    assert down == []
    assert {prefix for prefix in MAY_IMPORT if prefix.count("/") == 1 and prefix.endswith("/")} | {
        p for p in MAY_IMPORT if "/" not in p} == {name for row in ROWS for name in row}


def test_the_table_names_what_each_row_may_import() -> None:
    cells = {name: cell for names, cell in table() for name in names}
    unnamed = []
    for prefix, modules in MAY_IMPORT.items():
        row = ROWS[row_of(prefix)]
        cell = cells[row[0]]
        file = prefix.rsplit("/", 1)[1].removesuffix(".py") if "/" in prefix.rstrip("/") else ""
        if file and not re.search(rf"\b{re.escape(file)}\b", cell):
            unnamed.append(f"{prefix}: the cell does not name {file}")
        for module in modules:
            names = {n.rstrip("/").removesuffix(".py") for n in ROWS[row_of(module)]}  # the row's, any of them
            if not (file == "" and "everything above" in cell) and not any(
                    re.search(rf"\b{name}\b", cell) for name in names):
                unnamed.append(f"{prefix} may import {module}, which the cell of {row[0]} does not name")
    assert unnamed == []


def test_the_cli_gets_only_stdlib_words_from_core() -> None:
    for module in CORE_STDLIB_ONLY:
        tree = ast.parse((PACKAGE / (module.replace(".", "/") + ".py")).read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "__future__" or (
                    name.removeprefix("trainyard.") in CORE_STDLIB_ONLY), f"{module} imports {name}"


# -- the code -------------------------------------------------------------------------------


def test_every_import_follows_the_table() -> None:
    found = [(where, module, line) for where, module, line in crossings()
             if not is_doors_edge(where, module) and not (where == ASSEMBLY and within(module, "portal"))]
    unknown = [f"{where}:{line} imports trainyard.{module}" for where, module, line in found
               if (where, module) not in KNOWN]
    assert unknown == [], "docs/architecture.md's table does not allow these (see MAY_IMPORT)"
    gone = sorted(set(KNOWN) - {(where, module) for where, module, _ in found})
    assert gone == [], "taken away: delete these from KNOWN"


def test_api_and_portal_do_not_import_each_other() -> None:
    edges = sorted({f"{where} imports trainyard.{module}" for where, module, _ in crossings()
                    if is_doors_edge(where, module)})
    assert edges == []


# -- SQL ------------------------------------------------------------------------------------

# What code outside store/ may take from SQLAlchemy: the session's type and its errors.
SQLALCHEMY_OUTSIDE_STORE = {("sqlalchemy.orm", "Session"), ("sqlalchemy.exc", "*"), ("sqlalchemy.orm.exc", "*")}
# A session's methods that run a query. Its unit of work (add, delete, flush, merge) is not
# SQL written by hand: rows read through store/queries are changed, added and removed so.
QUERYING = {"execute", "scalar", "scalars", "query", "get", "get_one", "connection"}
QUERYING_ANYWHERE = {"execute", "scalar", "scalars"}  # no other object of ours has these


def sql_in(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlalchemy":
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            for alias in node.names:
                if (node.module, alias.name) not in SQLALCHEMY_OUTSIDE_STORE and (
                        node.module, "*") not in SQLALCHEMY_OUTSIDE_STORE:
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver, method = ast.unparse(node.func.value), node.func.attr
            if method in QUERYING_ANYWHERE or (method in QUERYING and re.search(r"(^|\.)session$", receiver)):
                yield node.lineno, f"{receiver}.{method}(...)"


def test_sql_lives_only_in_the_store() -> None:
    found = [f"{where}:{line} {what}" for where, tree in source_files() if not where.startswith("store/")
             for line, what in sql_in(tree)]
    assert found == [], "move these into a named function in store/queries/"


def test_the_sql_check_sees_each_way_of_writing_it() -> None:
    planted = ast.parse(
        "from sqlalchemy import select, text\nimport sqlalchemy as sa\nfrom sqlalchemy.orm import Session, aliased\n"
        "session.get(Row, 1)\nsession.query(Row).first()\nself.session.scalars(q)\nrows.execute(q)\n"
        "from sqlalchemy.orm.exc import StaleDataError\nsession.add(row)\nsession.delete(row)\n"
        "filters.query(order='x')\nvalues.get('a')\nselect.select([], [], [], 1)\n")
    assert sorted(line for line, _ in sql_in(planted)) == [1, 1, 2, 3, 4, 5, 6, 7]


# -- the doors ------------------------------------------------------------------------------

# What only the assembly may do in api/ or portal/: ``yard up`` opens the store at start-up.
UNIT_OF_WORK_AT_START = {"api/server.py"}


def test_no_router_or_page_opens_a_unit_of_work_or_wakes_the_controller() -> None:
    """A use case is composed once, in ``services/`` (``*_actions.py``, ``submission.py``): it
    opens its unit of work and wakes the controller once it has committed; the routers and
    pages only translate HTTP or forms to its calls and its errors to responses."""
    found = []
    for where, tree in source_files():
        if where.split("/")[0] not in DOORS or where in UNIT_OF_WORK_AT_START:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr == "wake_controller" or (node.func.attr == "session" and not node.args)):
                found.append(f"{where}:{node.lineno} {ast.unparse(node.func)}()")
    assert found == [], "compose these in a use case of services/"
