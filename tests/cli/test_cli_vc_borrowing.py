"""``yard vc borrowing`` and the borrowed share in ``yard vc list``, against the real app in
process, with a borrowed attempt written straight into the store (the controller's part)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from api.harness import Api
from services.usage_world import T0, Run, add_job
from sqlalchemy import select

from trainyard.cli.exits import EXIT_AUTH, EXIT_USAGE
from trainyard.services.auth import get_user
from trainyard.store.rows import AttemptRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def test_vc_borrowing_sets_what_is_given_and_vc_list_shows_borrowed_of_its_limit_and_weight(
    api: Api, yard: Yard,
) -> None:
    admin = api.admin_token
    assert yard("vc", "create", "vision", "--gpus", "2", "--weight", "2", token=admin)[0] == 0
    code, out, _ = yard("vc", "borrowing", "vision", "--borrow-limit", "4", "--lend-limit", "1", token=admin)
    assert code == 0
    assert out == "virtual cluster vision: borrows at most 4, lends at most 1 (GPUs of each model); weight 2\n"
    code, out, _ = yard("vc", "borrowing", "vision", "--lend-limit", "none", token=admin)
    assert code == 0 and "lends all its unused quota" in out and "at most 4" in out
    code, out, _ = yard("vc", "borrowing", "default", "--weight", "0.5", "--json", token=admin)
    assert code == 0 and '"weight": 0.5' in out
    with api.ctx.db.session() as session:
        job = add_job(session, get_user(session, "alice"), [[Run(T0, None, gpus=[[0, 1000], [1, 1000]])]],
                      vc="vision")
        session.scalars(select(AttemptRow).where(AttemptRow.job_id == job)).one().borrowed = True

    code, out, _ = yard("vc", "list", token=admin)
    header, default, vision = out.splitlines()
    assert header.split()[:9] == ["VC", "QUOTA", "(GPUs)", "USED", "BORROWED", "OPPO", "WEIGHT", "LENDS", "WAITING"]
    columns = header.index("USED"), header.index("WAITING")
    cells = [line[columns[0]:columns[1]].split() for line in (default, vision)]
    assert cells == [["0", "0", "0", "0.5", "all"], ["0", "2/4", "0", "2", "all"]]

    code, _, err = yard("vc", "borrowing", "vision", token=admin)
    assert code == EXIT_USAGE and "give at least one of --borrow-limit" in err
    with pytest.raises(SystemExit):  # argparse's own refusal, before anything is sent
        yard("vc", "borrowing", "vision", "--borrow-limit", "-1", token=admin)
    assert yard("vc", "borrowing", "vision", "--weight", "2")[0] == EXIT_AUTH  # alice is no admin
