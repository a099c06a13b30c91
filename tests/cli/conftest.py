"""The `yard` tests' fixtures: the real app in process, and `yard` run against it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from api.harness import Api, make_api

from trainyard.cli.main import main
from trainyard.client import Client

Yard = Callable[..., tuple[int, str, str]]


@pytest.fixture
def api(db, tmp_path) -> Iterator[Api]:
    yield make_api(db, tmp_path / "local")


@pytest.fixture
def yard(api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Yard:
    """Run ``yard ARGS`` as the user whose token is given (alice by default)."""

    def run(*args: str, token: str | None = None) -> tuple[int, str, str]:
        token = api.user_token if token is None else token
        sdk = api.sdk(token)
        monkeypatch.setenv("TRAINYARD_URL", "http://testserver")  # never the developer's client.json
        monkeypatch.setenv("TRAINYARD_TOKEN", token)
        monkeypatch.setattr(Client, "from_config", classmethod(lambda cls, config=None: sdk))
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run
