"""The usage page in process: the report by user, VC, group or job over a period, presets,
who sees what, and bad input answered on the page naming the field."""

from __future__ import annotations

import re

import pytest
from api.harness import Api
from services.usage_world import Run, add_job, add_sample, at

from portal.harness import signed_in
from trainyard.store.rows import UserRow

PERIOD = {"since": at(2).date().isoformat() + "T02:00", "until": at(6).date().isoformat() + "T06:00"}


@pytest.fixture
def jobs(api: Api) -> dict[str, int]:
    """alice's job holds 2 GPUs from 0 h to 10 h at 50 %; the admin's holds 1 from 3 h to 4 h."""
    with api.ctx.db.session() as s:
        users = {u.name: u for u in s.query(UserRow)}
        mine = add_job(s, users["alice"], [[Run(at(0), at(10), gpus=[[0, 1000], [1, 1000]], cpu_milli=2000)]],
                       name="alice's <b>job</b>")
        add_sample(s, mine, at(2), step=4 * 3600, gpus_held=2, gpu_util_pct=50.0, cpu_cores=1.0)
        theirs = add_job(s, users["admin"], [[Run(at(3), at(4))]], name="admins")
    return {"alice": mine, "admin": theirs}


def rows(page: str) -> list[list[str]]:
    body = page.split("<tbody>")[1].split("</tbody>")[0]
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


@pytest.mark.postgres
def test_an_admin_sees_everyones_gpu_hours_with_efficiency(api: Api, jobs: dict[str, int]) -> None:
    page = signed_in(api, "admin").get("/usage", params=PERIOD).text
    assert [r[:5] for r in rows(page)] == [["alice", "1", "8", "4", "50 %"], ["admin", "1", "1", "n/a", "n/a"]]
    assert "<strong>Total</strong>" in page and "2026-11-01 02:00:00" in page


def test_a_user_sees_only_their_own_jobs_and_may_not_ask_for_others(api: Api, jobs: dict[str, int]) -> None:
    alice = signed_in(api, "alice")
    by_job = alice.get("/usage", params={**PERIOD, "by": "job"}).text
    assert [r[:4] for r in rows(by_job)] == [[str(jobs["alice"]), "alice&#39;s &lt;b&gt;job&lt;/b&gt;", "alice",
                                              "default"]]
    assert "<b>job</b>" not in by_job and f'href="/jobs/{jobs["alice"]}"' in by_job
    refused = alice.get("/usage", params={"user": "admin"})
    assert refused.status_code == 403 and "only an admin sees another user&#39;s usage" in refused.text
    assert 'name="user"' not in alice.get("/usage").text  # no user filter offered


def test_presets_and_vc_grouping(api: Api, jobs: dict[str, int]) -> None:
    admin = signed_in(api, "admin")
    for preset in ("today", "7d", "30d"):
        answer = admin.get("/usage", params={"period": preset, "by": "vc"})
        assert answer.status_code == 200 and f'value="{preset}" selected' in answer.text
    assert rows(admin.get("/usage", params={**PERIOD, "by": "vc"}).text)[0][:3] == ["default", "2", "9"]



def test_the_page_shows_fair_shares_recent_gpu_hours_with_the_half_life(api: Api, jobs: dict[str, int]) -> None:
    page = signed_in(api, "admin").get("/usage", params={**PERIOD, "by": "vc"}).text
    assert ">Recent GPU-hours*</th>" in page and len(rows(page)[0]) == 9
    assert "decayed with a half-life of 7 days. Among one VC's jobs" in page
    api.ctx.fair_share_half_life_seconds = 0  # fair share off: no column
    assert "Recent GPU-hours" not in signed_in(api, "admin").get("/usage", params=PERIOD).text


@pytest.mark.parametrize(("params", "field"), [({"since": "yesterday"}, "since"), ({"until": "2026-13-01"}, "until"),
                                               ({"since": "2026-11-02", "until": "2026-11-01"}, "since"),
                                               ({"by": "node"}, "by")])
def test_bad_input_is_a_422_page_naming_the_field(api: Api, params: dict[str, str], field: str) -> None:
    answer = signed_in(api, "admin").get("/usage", params=params)
    assert answer.status_code == 422 and "<main>" in answer.text
    assert f'data-field="{field}"' in answer.text or field in answer.text.split('role="alert">')[1][:200]
