"""Where the shared public traces are: ``$TRAINYARD_TRACES``, else ``../shared/traces``
beside the project root (the layout of a checkout next to the shared data)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def traces_dir() -> Path:
    configured = os.environ.get("TRAINYARD_TRACES")
    return Path(configured) if configured else PROJECT_ROOT.parent / "shared" / "traces"
