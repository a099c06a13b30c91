"""``yard dataset``: a user registers, shows, grants and removes a dataset; ``cache`` shows
each node's cache; a refusal is an error naming what to do."""

from __future__ import annotations

import json
from collections.abc import Callable

from api.harness import Api

from trainyard.cli.exits import EXIT_ERROR

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def test_a_user_registers_shows_grants_and_removes_a_dataset(api: Api, yard: Yard) -> None:
    api.sdk(api.admin_token).create_group("cv")
    code, out, _ = yard("dataset", "register", "mini", "https://example.org/mini.tgz", "--version", "v1")
    assert (code, out) == (0, "dataset mini is https://example.org/mini.tgz at version v1\n")
    code, out, _ = yard("dataset", "grant", "mini", "--group", "cv")
    assert (code, out) == (0, "@cv may now read dataset mini\n")
    code, out, _ = yard("dataset", "list")
    header, *rows = out.splitlines()
    assert header.split() == ["DATASET", "VERSION", "OWNER", "ACCESS", "SOURCE"]
    assert [r.split() for r in rows] == [["mini", "v1", "alice", "owner", "https://example.org/mini.tgz"]]
    code, out, _ = yard("dataset", "show", "mini", "--json")
    assert json.loads(out)["grants"] == ["@cv"]
    code, out, _ = yard("dataset", "cache")
    assert code == 0 and out.startswith("node ") and "0 hits, 0 misses" in out
    code, _, err = yard("dataset", "register", "mini", "ftp://example.org/x", "--version", "2")
    assert code == EXIT_ERROR and "http:// or https://" in err
    code, out, _ = yard("dataset", "remove", "mini")
    assert code == 0 and out.startswith("removed dataset mini")
