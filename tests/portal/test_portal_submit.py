"""The Submit page in process: the form and the YAML editor converted both ways on the
server, errors at their fields, Check and Submit through the API's services, the VCs a
user may use, Clone with its secrets kept on the server, CSRF, and hostile text shown as text."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
import yaml
from api.harness import Api

from portal.harness import browser, csrf_of, signed_in
from trainyard.services import admin
from trainyard.store.queries import jobs as job_queries

PAYLOADS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')


class FormValues(HTMLParser):
    """The values a browser would post from an HTML page or fragment: inputs, textareas and
    selected options, by name; and each field error's message by its field."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.errors: dict[str, list[str]] = {}
        self._textarea: str | None = None
        self._select: str | None = None
        self._error: str | None = None
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "input" and "name" in a and a.get("type") != "file":
            self.values[a["name"]] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.values[a["name"]] = ""
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select and "selected" in a:
            self.values[self._select] = a["value"]
        elif tag == "span" and "field-error" in a.get("class", ""):
            self._error = a["data-field"]
            self.errors.setdefault(self._error, []).append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "span":
            self._error = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.values[self._textarea] += data
        if self._error:
            self.errors[self._error][-1] += data


def distributed_form(csrf: str, **changes: str) -> dict[str, str]:
    form = {
        "csrf": csrf, "edited": "form", "yaml": "", "name": "dist", "vc": "default", "priority": "normal",
        "retries": "1", "max_run_time": "3600", "dependencies": "", "notify": "",
        "roles-0-name": "ps", "roles-0-instances": "1", "roles-0-gpu": "0.5", "roles-0-cpu": "1",
        "roles-0-memory_mb": "512", "roles-0-commands": "echo ps up\necho ps done",
        "roles-0-env-0-key": "MODE", "roles-0-env-0-value": "server",
        "roles-1-name": "worker", "roles-1-instances": "2", "roles-1-gpu": "1", "roles-1-cpu": "2",
        "roles-1-memory_mb": "1024", "roles-1-commands": "echo worker $PAI_TASK_INDEX",
    }
    form.update(changes)
    return form


def page_of(client, path: str = "/submit"):
    answer = client.get(path)
    assert answer.status_code == 200, answer.text
    return answer.text, csrf_of(answer.text)


def test_the_page_needs_a_signed_in_user_and_starts_from_a_job_that_runs(api: Api) -> None:
    assert browser(api).get("/submit").status_code == 303
    client = signed_in(api, "alice")
    page, csrf = page_of(client)
    shown = FormValues(page).values
    document = yaml.safe_load(shown["yaml"])
    assert document["name"] == shown["name"] == "my-job"
    assert list(document["taskRoles"]) == [shown["roles-0-name"]]
    assert '<script src="/static/submit.js" defer></script>' in page
    answer = client.post("/submit/check", data={**shown, "csrf": csrf})
    assert "the job can be submitted" in answer.text


def test_form_to_yaml_to_form_round_trip_for_a_distributed_job(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    form = distributed_form(csrf)
    as_yaml = client.post("/submit/to-yaml", data=form)
    assert as_yaml.status_code == 200
    text = FormValues(as_yaml.text).values["yaml"]
    document = yaml.safe_load(text)
    assert document["name"] == "dist" and document["jobRetryCount"] == 1 and document["maxRunTimeSeconds"] == 3600
    assert "defaults" not in document and "priority" not in document  # defaults stay implicit
    ps, worker = document["taskRoles"]["ps"], document["taskRoles"]["worker"]
    assert ps["resourcePerInstance"] == {"gpu": 0.5, "cpu": 1, "memoryMB": 512}
    assert ps["commands"] == ["echo ps up", "echo ps done"] and ps["env"] == {"MODE": "server"}
    assert worker["instances"] == 2 and worker["commands"] == ["echo worker $PAI_TASK_INDEX"]
    back = client.post("/submit/to-form", data={"csrf": csrf, "edited": "yaml", "yaml": text})
    shown = FormValues(back.text).values
    assert {k: v for k, v in shown.items()} == {k: v for k, v in form.items() if k not in ("csrf", "edited", "yaml")}


def test_editing_the_yaml_keeps_what_the_form_does_not_show(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    text = (
        "name: keep\nparameters: {lr: 0.1}\ntaskRoles:\n  main:\n    instances: 2\n"
        "    completion: {minSucceededInstances: 1}\n"
        "    resourcePerInstance: {gpu: 1, ports: {http: 1}}\n"
        "    commands:\n      - |\n        python3 - <<'PY'\n        print(<% $parameters.lr %>)\n\n        PY\n"
    )
    shown = FormValues(client.post("/submit/to-form", data={"csrf": csrf, "yaml": text}).text).values
    assert shown["roles-0-instances"] == "2" and shown["roles-0-cpu"] == ""  # empty: the default
    shown.update({"csrf": csrf, "yaml": text, "roles-0-instances": "3", "name": "kept"})
    document = yaml.safe_load(FormValues(client.post("/submit/to-yaml", data=shown).text).values["yaml"])
    main = document["taskRoles"]["main"]
    assert document["name"] == "kept" and document["parameters"] == {"lr": 0.1} and main["instances"] == 3
    assert main["completion"] == {"minSucceededInstances": 1} and main["resourcePerInstance"]["ports"] == {"http": 1}
    assert main["commands"] == yaml.safe_load(text)["taskRoles"]["main"]["commands"]  # the heredoc, whole


def test_roles_and_environment_rows_are_added_and_removed(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    form = distributed_form(csrf)
    added = FormValues(client.post("/submit/edit", data={**form, "op": "add-role"}).text).values
    assert added["roles-2-name"] == "role1" and "role1" in yaml.safe_load(added["yaml"])["taskRoles"]
    with_row = FormValues(client.post("/submit/edit", data={**form, "op": "add-env-1"}).text).values
    assert with_row["roles-1-env-0-key"] == "" and "env" not in yaml.safe_load(with_row["yaml"])["taskRoles"]["worker"]
    no_env = FormValues(client.post("/submit/edit", data={**form, "op": "remove-env-0-0"}).text).values
    assert "roles-0-env-0-key" not in no_env
    text = "name: x\ntaskRoles:\n  ps: {commands: [a], completion: {minFailedInstances: 1}}\n" \
           "  worker: {commands: [b], completion: {minFailedInstances: -1}}\n"
    form = {**FormValues(client.post("/submit/to-form", data={"csrf": csrf, "yaml": text}).text).values,
            "csrf": csrf, "yaml": text, "edited": "form", "op": "remove-role-0"}
    removed = FormValues(client.post("/submit/edit", data=form).text).values
    # The role that stays keeps its own hidden fields, not the removed one's.
    assert yaml.safe_load(removed["yaml"])["taskRoles"] == {
        "worker": {"commands": ["b"], "completion": {"minFailedInstances": -1}}}
    assert removed["roles-0-name"] == "worker" and "roles-1-name" not in removed


def test_check_shows_each_error_at_its_field(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    form = distributed_form(csrf, name="bad name", retries="many", **{
        "roles-0-instances": "0", "roles-0-gpu": "1.5", "roles-1-memory_mb": "lots", "roles-1-commands": "  "})
    answer = client.post("/submit/check", data=form)
    assert answer.status_code == 200  # htmx swaps only successful answers
    errors = FormValues(answer.text).errors
    assert set(errors) == {"name", "retries", "roles-0-instances", "roles-0-gpu", "roles-1-memory_mb",
                           "roles-1-commands"}, errors
    assert "letters, digits" in errors["name"][0] and "≥ 1" in errors["roles-0-instances"][0]
    assert "fraction below 1" in errors["roles-0-gpu"][0]
    assert "whole number (got 'lots')" in errors["roles-1-memory_mb"][0]
    assert "the job can be submitted" not in answer.text
    # Checks across fields run once every field is valid: an unknown secret, at its variable.
    form = distributed_form(csrf, **{"roles-1-env-0-key": "X", "roles-1-env-0-value": "<% $secrets.nope %>"})
    errors = FormValues(client.post("/submit/check", data=form).text).errors
    assert list(errors) == ["roles-1-env"] and "nope" in errors["roles-1-env"][0]
    twice = FormValues(client.post("/submit/check", data=distributed_form(csrf, **{"roles-1-name": "ps"})).text)
    assert twice.errors == {"roles-1-name": ["another task role is called 'ps'"]}


def test_errors_without_a_form_field_and_unreadable_yaml_show_above_the_editor(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    text = "name: x\nstopGracePeriodSeconds: -1\ntaskRoles:\n  main: {commands: [a]}\n"
    answer = client.post("/submit/check", data={"csrf": csrf, "edited": "yaml", "yaml": text})
    assert "stopGracePeriodSeconds: must be ≥ 0" in answer.text and FormValues(answer.text).errors == {}
    broken = client.post("/submit/to-form", data={"csrf": csrf, "yaml": "name: [x\n", "name": "typed"})
    assert "&lt;line 2, column 1&gt;" in broken.text and FormValues(broken.text).values["name"] == "typed"
    # The form edited while the YAML does not read: the YAML is kept as typed, not overwritten.
    kept = client.post("/submit/to-yaml", data=distributed_form(csrf, yaml="name: [x\n"))
    assert FormValues(kept.text).values["yaml"] == "name: [x\n" and "not in the YAML" in kept.text


def test_submit_creates_the_job_with_the_api_service_and_goes_to_its_page(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    answer = client.post("/submit", data=distributed_form(csrf))
    assert answer.status_code == 303
    job_id = int(answer.headers["location"].removeprefix("/jobs/"))
    job = api.sdk(api.user_token).job(job_id)
    assert job.user == "alice" and job.state == "WAITING" and job.name == "dist"
    spec = api.user.get(f"/api/v1/jobs/{job_id}").json()["spec"]
    assert spec["taskRoles"]["worker"]["instances"] == 2 and spec["taskRoles"]["ps"]["env"] == {"MODE": "server"}
    htmx = client.post("/submit", data=distributed_form(csrf), headers={"HX-Request": "true"})
    assert htmx.headers["hx-redirect"].startswith("/jobs/")


def test_the_yaml_wins_when_it_was_edited_last(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    text = "name: from-yaml\ntaskRoles:\n  main: {commands: [echo yaml]}\n"
    answer = client.post("/submit", data=distributed_form(csrf, yaml=text, edited="yaml"))
    job_id = int(answer.headers["location"].removeprefix("/jobs/"))
    assert api.sdk(api.user_token).job(job_id).name == "from-yaml"


def test_a_submit_refused_shows_the_page_again_with_the_errors(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    answer = client.post("/submit", data=distributed_form(csrf, **{"roles-1-instances": "1001"}))
    assert answer.status_code == 422
    assert "≤ 1000" in FormValues(answer.text).errors["roles-1-instances"][0]
    assert FormValues(answer.text).values["name"] == "dist"
    too_big = client.post("/submit", data=distributed_form(csrf, **{"roles-1-gpu": "8"}))
    assert too_big.status_code == 422 and "can never run on this cluster" in too_big.text
    # From htmx: the form and the editor with the errors, to swap in place (htmx swaps only 2xx).
    inline = client.post("/submit", data=distributed_form(csrf, **{"roles-1-instances": "0"}),
                         headers={"HX-Request": "true"})
    assert inline.status_code == 200 and "<html" not in inline.text
    assert FormValues(inline.text).errors["roles-1-instances"] == ["must be ≥ 1 (got 0)"]
    assert api.sdk(api.admin_token).jobs().items == []


def test_dependencies_are_a_field_refused_at_it_and_shown_on_the_jobs_page(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    refused = client.post("/submit", data=distributed_form(csrf, dependencies="afterok:999999"))
    assert refused.status_code == 422
    assert "no job 999999" in FormValues(refused.text).errors["dependencies"][0]
    first = int(client.post("/submit", data=distributed_form(csrf)).headers["location"].removeprefix("/jobs/"))
    answer = client.post("/submit", data=distributed_form(csrf, dependencies=f"afterany:{first}"))
    assert answer.status_code == 303, answer.text
    second = int(answer.headers["location"].removeprefix("/jobs/"))
    assert api.sdk(api.user_token).job(second).spec["dependencies"] == {"afterany": [first]}
    page = client.get(f"/jobs/{second}").text
    assert f'afterany <a href="/jobs/{first}">job {first}</a> (WAITING, waiting)' in page
    clone = FormValues(client.get(f"/submit?clone={second}").text).values
    assert clone["dependencies"] == f"afterany:{first}"  # a clone keeps them


@pytest.fixture
def vcs(api: Api) -> None:
    with api.ctx.db.session() as session:
        for name, gpus in (("vision", 3), ("secret-vc", 1)):
            admin.create_vc(session, name, gpus=gpus, model=None, preemption=True, clock=api.ctx.clock)
        admin.grant_vc(session, "vision", "alice")


def test_only_the_vcs_the_user_may_use_are_offered(api: Api, vcs: None) -> None:
    page, _ = page_of(signed_in(api, "alice"))
    assert '<option value="vision">' in page and '<option value="default" selected>' in page
    assert "secret-vc" not in page
    assert '<option value="secret-vc">' in page_of(signed_in(api, "admin"))[0]


def test_a_vc_the_user_may_not_use_is_refused_even_when_posted(api: Api, vcs: None) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    answer = client.post("/submit", data=distributed_form(csrf, vc="secret-vc"))
    assert answer.status_code == 403
    assert "user alice may not submit to virtual cluster &#39;secret-vc&#39;" in answer.text
    values = FormValues(answer.text)
    assert values.values["vc"] == "secret-vc" and "secret-vc (not available to you)" in answer.text
    assert values.errors["vc"] == ["not granted to alice"]
    assert api.sdk(api.admin_token).jobs().items == []
    checked = client.post("/submit/check", data=distributed_form(csrf, vc="vision"))
    assert "the job can be submitted" in checked.text


SECRET_JOB = """
name: with-secret
secrets: {token: s3cr3t-value}
taskRoles:
  main:
    commands: [echo <% $secrets.token %>, echo literal s3cr3t-value]
    env: {TOKEN: <% $secrets.token %>}
"""


def submit_yaml(api: Api, token: str, text: str) -> int:
    answer = api.client(token).post("/api/v1/jobs", content=text, headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def stored_spec(api: Api, job_id: int) -> dict:
    with api.ctx.db.session() as session:
        row = job_queries.job_by_id(session, job_id)
        assert row is not None
        return dict(row.spec)


def test_clone_shows_secrets_masked_and_runs_with_the_real_ones(api: Api) -> None:
    original = submit_yaml(api, api.user_token, SECRET_JOB)
    client = signed_in(api, "alice")
    page, csrf = page_of(client, f"/submit?clone={original}")
    assert "s3cr3t-value" not in page and "******" in page
    shown = FormValues(page).values
    assert shown["clone_of"] == str(original)
    assert client.post("/submit/check", data={**shown, "csrf": csrf}).text.count("the job can be submitted") == 1
    shown.update({"csrf": csrf, "name": "the-clone", "roles-0-instances": "2"})  # edited in the form
    answer = client.post("/submit", data=shown)
    assert answer.status_code == 303, answer.text
    clone = int(answer.headers["location"].removeprefix("/jobs/"))
    spec = stored_spec(api, clone)
    assert spec["name"] == "the-clone" and spec["taskRoles"]["main"]["instances"] == 2
    assert spec["secrets"] == {"token": "s3cr3t-value"}
    assert spec["taskRoles"]["main"]["commands"][1] == "echo literal s3cr3t-value"
    # Without clone_of, the masks are no secrets: refused, at the secret's path.
    shown.pop("clone_of")
    refused = client.post("/submit", data=shown)
    assert refused.status_code == 422 and "secrets.token" in refused.text


def test_a_user_cannot_clone_another_users_job(api: Api) -> None:
    theirs = submit_yaml(api, api.admin_token, SECRET_JOB)
    client = signed_in(api, "alice")
    assert client.get(f"/submit?clone={theirs}").status_code == 404
    _, csrf = page_of(client)
    answer = client.post("/submit", data=distributed_form(csrf, clone_of=str(theirs)))
    assert answer.status_code == 404 and "s3cr3t-value" not in answer.text
    assert f"no job {theirs}" in client.post("/submit/check", data=distributed_form(csrf, clone_of=str(theirs))).text
    assert len(api.sdk(api.admin_token).jobs().items) == 1
    assert signed_in(api, "admin").get(f"/submit?clone={theirs}").status_code == 200


def test_every_state_changing_request_needs_the_form_secret_and_this_site(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    for path in ("/submit", "/submit/to-yaml", "/submit/to-form", "/submit/edit", "/submit/check", "/submit/export"):
        assert client.post(path, data=distributed_form("wrong")).status_code == 403, path
        assert client.post(path, data=distributed_form(csrf),
                           headers={"Origin": "https://evil.example"}).status_code == 403, path
    assert api.sdk(api.admin_token).jobs().items == []


def test_hostile_text_in_name_commands_and_env_is_shown_as_text(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    for payload in PAYLOADS:
        form = distributed_form(csrf, name=payload, **{"roles-0-commands": f"echo '{payload}'",
                                                       "roles-0-env-0-key": payload, "roles-0-env-0-value": payload})
        for path in ("/submit/to-yaml", "/submit/edit", "/submit/check", "/submit"):
            answer = client.post(path, data=form)
            assert payload not in answer.text, path
            assert "&lt;" in answer.text, path
        text = FormValues(client.post("/submit/to-yaml", data=form).text).values["yaml"]
        shown = client.post("/submit/to-form", data={"csrf": csrf, "yaml": text})
        assert payload not in shown.text and FormValues(shown.text).values["roles-0-env-0-value"] == payload


def test_export_downloads_the_job_file_named_after_the_job(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    answer = client.post("/submit/export", data=distributed_form(csrf))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/yaml")
    assert answer.headers["content-disposition"] == 'attachment; filename="dist.yaml"'
    assert yaml.safe_load(answer.text)["taskRoles"]["worker"]["instances"] == 2
    odd = client.post("/submit/export", data=distributed_form(csrf, name='a"b'))
    assert odd.headers["content-disposition"] == 'attachment; filename="job.yaml"'



def test_a_working_directory_archive_is_sent_with_the_job_and_a_hostile_one_is_refused(api: Api, tmp_path) -> None:
    import io
    import tarfile

    from trainyard.client_workdir import pack

    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "train.py").write_text("print(1)\n")
    archive = pack(tmp_path / "p", max_bytes=1 << 20)
    form = distributed_form(csrf)
    sent = client.post("/submit/workdir", data=form,
                       files={"workdir_archive": ("project.tar.gz", archive.gzipped(), "application/gzip")})
    assert sent.status_code == 200 and "working directory project.tar.gz sent: 1 files" in sent.text
    text = FormValues(sent.text).values["yaml"]
    assert yaml.safe_load(text)["workdir"] == archive.digest
    done = client.post("/submit", data=distributed_form(csrf, yaml=text, edited="yaml"))
    assert done.status_code == 303
    with api.ctx.db.session() as s:
        job = job_queries.job_by_id(s, int(done.headers["location"].rsplit("/", 1)[1]))
        assert job is not None and job.workdir == archive.digest
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w:gz") as tar:
        info = tarfile.TarInfo("escape")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(info)
    refused = client.post("/submit/workdir", data=form,
                          files={"workdir_archive": ("evil.tar.gz", hostile.getvalue(), "application/gzip")})
    assert "outside the working directory" in refused.text and "workdir:" not in FormValues(refused.text).values["yaml"]


def test_a_form_is_bounded_before_it_is_parsed_and_a_chunked_one_is_refused(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)

    def chunks():
        yield f"csrf={csrf}&yaml=".encode()
        yield b"x" * 1024

    chunked = client.post("/submit/check", content=chunks(),
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert chunked.status_code == 411
    big = b"csrf=" + csrf.encode() + b"&yaml=" + b"x" * (3 << 20)
    assert client.post("/submit/check", content=big,
                       headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code == 413
    upload = b"--b\r\nContent-Disposition: form-data; name=\"workdir_archive\"; filename=\"a.tgz\"\r\n\r\n" + \
        bytes(api.ctx.workdirs.max_bytes + (api.ctx.workdirs.max_bytes >> 3) + (8 << 20)) + b"\r\n--b--\r\n"
    assert client.post("/submit/workdir", content=upload,
                       headers={"Content-Type": "multipart/form-data; boundary=b"}).status_code == 413
