"""The VCs page's borrowing: each VC's borrowed share (of its limit), weight and lending, and
the admin's form that sets them, ``default``'s too."""

from __future__ import annotations

import re

from api.harness import Api

from portal.harness import csrf_of, signed_in


def cell(page: str, vc: str, kind: str) -> str:
    row = page.split(f'<tr data-vc="{vc}">', 1)[1].split("</tr>", 1)[0]
    found = re.search(rf'<td class="{kind}">([^<]*)</td>', row)
    assert found, (vc, kind)
    return found.group(1).strip()


def test_an_admin_sets_borrowing_on_the_page_and_a_user_sees_it_but_may_not_change_it(api: Api) -> None:
    admin = signed_in(api, "admin")
    csrf = csrf_of(admin.get("/vcs").text)
    admin.post("/vcs", data={"csrf": csrf, "name": "vision", "gpus": "2"})
    api.admin.post("/api/v1/vcs/vision/grants", json={"grantee": "alice"})
    page = admin.post("/vcs/vision/borrowing",
                      data={"csrf": csrf, "borrowLimit": "3", "lendLimit": "1", "weight": "2.5"})
    assert page.status_code == 200 and "vision: borrowing limits and weight set" in page.text
    assert (cell(page.text, "vision", "borrowed"), cell(page.text, "vision", "weight"),
            cell(page.text, "vision", "lends")) == ("0 / 3", "2.5", "1")
    assert 'name="borrowLimit" type="number" min="0" value="3"' in page.text  # the form shows what is set

    # Blank limits: no limit; a blank weight stays as it is. default has the form too.
    page = admin.post("/vcs/vision/borrowing", data={"csrf": csrf, "borrowLimit": "", "lendLimit": "", "weight": ""})
    assert (cell(page.text, "vision", "borrowed"), cell(page.text, "vision", "lends")) == ("0", "all")
    assert cell(page.text, "vision", "weight") == "2.5"
    page = admin.post("/vcs/default/borrowing", data={"csrf": csrf, "borrowLimit": "0", "weight": "4"})
    assert page.status_code == 200 and cell(page.text, "default", "borrowed") == "0 / 0"

    for data, message in (({"borrowLimit": "-2"}, "borrowLimit must be a whole number of GPUs ≥ 0"),
                          ({"lendLimit": "lots"}, "lendLimit must be a whole number of GPUs ≥ 0"),
                          ({"weight": "2000"}, "weight must be a number from 0.001 to 1000"),
                          ({"weight": "1_0"}, "weight must be a number such as 2 or 0.5"),
                          ({"borrowLimit": "３"}, "borrowLimit must be a whole number of GPUs ≥ 0")):
        refused = admin.post("/vcs/vision/borrowing", data={"csrf": csrf, **data})
        assert refused.status_code == 422 and message in refused.text, refused.text

    alice = signed_in(api, "alice")
    mine = alice.get("/vcs").text
    assert cell(mine, "vision", "weight") == "2.5" and "Set borrowing" not in mine
    answer = alice.post("/vcs/vision/borrowing", data={"csrf": csrf_of(mine), "weight": "1000"})
    assert answer.status_code == 403
    assert next(v for v in api.admin.get("/api/v1/vcs").json() if v["name"] == "vision")["weight"] == 2.5
