"""Where the client finds the server and its token: environment first, then the client file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

DEFAULT_URL = "http://127.0.0.1:8642"


class ClientConfig(NamedTuple):  # not a dataclass: `yard` does not import dataclasses (~8 ms, issue 33)
    """The server's address and the token to use there."""

    url: str
    token: str | None
    source: str  # where the values came from, for error messages


def home_dir() -> Path:
    """``$TRAINYARD_HOME``, else ``~/.trainyard``: where ``yard up`` writes ``client.json``."""
    return Path(os.environ.get("TRAINYARD_HOME") or "~/.trainyard").expanduser()


def load_config() -> ClientConfig:
    """``TRAINYARD_URL``/``TRAINYARD_TOKEN`` win; else ``$TRAINYARD_HOME/client.json``."""
    url = os.environ.get("TRAINYARD_URL")
    token = os.environ.get("TRAINYARD_TOKEN")
    path = home_dir() / "client.json"
    file_data: dict[str, str] = {}
    if (url is None or token is None) and path.is_file():
        try:
            file_data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            file_data = {}
    source = "environment" if url or token else (str(path) if file_data else "defaults")
    return ClientConfig(
        url=(url or file_data.get("url") or DEFAULT_URL).rstrip("/"),
        token=token or file_data.get("token"),
        source=source,
    )
