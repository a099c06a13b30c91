"""schemas/ and the SDK stay light: no server framework, no database, and `yard --help`
imports neither the SDK nor pydantic."""

from __future__ import annotations

import os
import subprocess
import sys

SERVER_SIDE = ("fastapi", "starlette", "sqlalchemy", "trainyard.services", "trainyard.store", "trainyard.api")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=os.environ.copy())
    return set(out.stdout.split())


def test_the_schemas_and_the_sdk_load_nothing_of_the_server() -> None:
    # The SDK imports most models when a call first answers with them (client_models.py): all
    # of them here, as a long-lived SDK user ends up with.
    every_model = ("import pkgutil, importlib, trainyard.schemas\n"
                   "for m in pkgutil.iter_modules(trainyard.schemas.__path__):\n"
                   "    importlib.import_module('trainyard.schemas.' + m.name)")
    loaded = _loaded_after(f"import trainyard.client\n{every_model}")
    assert {"trainyard.schemas.jobs", "trainyard.schemas.cluster", "trainyard.schemas.usage"} <= loaded
    assert not {m for m in loaded if m.startswith(SERVER_SIDE)}


def test_yard_help_loads_neither_the_sdk_nor_pydantic() -> None:
    loaded = _loaded_after("from trainyard.cli.main import build_parser\nbuild_parser().format_help()")
    assert not {m for m in loaded if m.startswith(("httpx", "pydantic", "trainyard.client", "trainyard.schemas"))}
