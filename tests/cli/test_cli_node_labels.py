"""`yard node label NODE k=v k2-` against the real app in process, and `yard nodes` showing labels."""

from __future__ import annotations

from collections.abc import Callable

from api.harness import Api

from trainyard.cli.exits import EXIT_USAGE

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def test_an_admin_labels_a_node_kubectl_style_and_yard_nodes_shows_it(api: Api, yard: Yard) -> None:
    name = api.admin.get("/api/v1/nodes").json()[0]["name"]
    code, out, _ = yard("node", "label", name, "ib=true", "rack=r1", token=api.admin_token)
    assert code == 0 and out == f"node {name}: labels ib=true, rack=r1\n"
    code, out, _ = yard("node", "label", name, "rack-", token=api.admin_token)
    assert code == 0 and out == f"node {name}: labels ib=true\n"
    code, out, _ = yard("nodes")
    assert f"  {name} labels: ib=true" in out


def test_a_malformed_argument_and_a_non_admin_are_refused(api: Api, yard: Yard) -> None:
    name = api.admin.get("/api/v1/nodes").json()[0]["name"]
    code, _, err = yard("node", "label", name, "ib", token=api.admin_token)
    assert code == EXIT_USAGE and "write KEY=VALUE to set a label, KEY- to remove one" in err
    code, _, err = yard("node", "label", name, "ib=true")
    assert code != 0 and "admin" in err.lower()
    code, _, err = yard("node", "label", name, "bad key=x", token=api.admin_token)
    assert code != 0 and "labels.bad key" in err
