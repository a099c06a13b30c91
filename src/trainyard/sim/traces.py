"""Where the shared public traces are: ``$TRAINYARD_TRACES``, else ``../shared/traces``
beside the project root (the layout of a checkout next to the shared data; an installed
package has no such neighbour, so it needs the variable)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def traces_dir() -> Path:
    configured = os.environ.get("TRAINYARD_TRACES")
    return Path(configured) if configured else PROJECT_ROOT.parent / "shared" / "traces"


def trace_file(*parts: str) -> Path:
    """A file of the shared traces; FileNotFoundError saying how to point at them if absent."""
    path = traces_dir().joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(
            f"no trace file {path}: set TRAINYARD_TRACES to the folder of the shared traces "
            f"(the one holding {parts[0]}/), or give the file's path"
        )
    return path
