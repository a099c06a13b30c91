"""The portal's Submit page against a real ``yard up``: how long each of its requests takes
and how big its answers are, for a one-role job and for a large one (``--roles`` roles of
``--env`` variables and 20 commands each), with 1,000 jobs already in the store.

Signed in with the admin's token as a browser is (cookie, form secret, same origin), it
times ``--runs`` times each: the page (``GET /submit``), a form edit (``/submit/to-yaml``),
a YAML edit (``/submit/to-form``), Check (``/submit/check``) and one role added
(``/submit/edit``); over HTTP, so this is what the user waits for on this machine. Prints
p50 and p99 with their ratio to the portal's targets (issue 15: < 100 ms p50, < 300 ms p99,
no page over 200 KB). Never asserts.

Run:  python benchmarks/bench_portal_submit.py [--runs 30] [--roles 20] [--env 10] [--jobs 1000]
"""

from __future__ import annotations

import argparse
import re
import time
from functools import partial

import httpx
import yaml
from common import percentile, ratio_line, tiny_job_yaml, yard_server

from trainyard.portal.submit_form import dump_yaml

P50_TARGET_MS = 100
P99_TARGET_MS = 300
SIZE_TARGET_KB = 200


def big_job(roles: int, env: int) -> str:
    document = {"name": "big", "taskRoles": {
        f"role{r}": {"instances": 2, "resourcePerInstance": {"gpu": 0, "cpu": 0.5, "memoryMB": 256},
                     "commands": [f"echo role {r} step {c}" for c in range(20)],
                     "env": {f"VAR_{e}": f"value {e} of role {r}" for e in range(env)}}
        for r in range(roles)}}
    return dump_yaml(document)


def form_of(page: str) -> dict[str, str]:
    """The form's values as a browser posts them (inputs, textareas, selected options)."""
    values = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page))
    values.update(re.findall(r'<textarea[^>]*name="([^"]+)"[^>]*>([^<]*)</textarea>', page, re.S))
    for name, options in re.findall(r'<select[^>]*name="([^"]+)"[^>]*>(.*?)</select>', page, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected', options)
        values[name] = chosen.group(1) if chosen else ""
    return {k: _unescape(v) for k, v in values.items()}


def _unescape(text: str) -> str:
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&#34;", '"'), ("&#39;", "'"), ("&amp;", "&")):
        text = text.replace(entity, char)
    return text


def timed(runs: int, call) -> tuple[list[float], int]:
    times, size = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        answer = call()
        times.append((time.perf_counter() - start) * 1000)
        assert answer.status_code < 400, answer.text[:300]
        size = len(answer.content)
    return times, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--roles", type=int, default=20)
    parser.add_argument("--env", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    with yard_server(local_gpus=4) as server:
        for i in range(args.jobs):
            server.client.submit(tiny_job_yaml(f"filler-{i}", command="true"))
        browser = httpx.Client(base_url=server.url, headers={"Origin": server.url}, timeout=60)
        assert browser.post("/signin", data={"token": server.token, "next": "/"}).status_code == 303
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', browser.get("/").text).group(1)  # type: ignore[union-attr]
        print(f"Submit page, {args.runs} runs each, over HTTP to a real yard up with {args.jobs} jobs stored")
        worst_size = 0
        jobs = (("one role", tiny_job_yaml("small")), (f"{args.roles} roles", big_job(args.roles, args.env)))
        for label, text in jobs:
            page = browser.post("/submit/to-form", data={"csrf": csrf, "yaml": text, "edited": "yaml"}).text
            form = {**form_of(page), "csrf": csrf, "yaml": text, "edited": "form"}
            assert yaml.safe_load(text)["name"] == form["name"]
            requests = (
                ("GET /submit", "GET", "/submit", None),
                ("form edit (to-yaml)", "POST", "/submit/to-yaml", form),
                ("YAML edit (to-form)", "POST", "/submit/to-form", {**form, "edited": "yaml"}),
                ("Check", "POST", "/submit/check", form),
                ("add a role (edit)", "POST", "/submit/edit", {**form, "op": "add-role"}),
            )
            print(f"\n{label}: {len(text) / 1024:.1f} KiB of YAML")
            p50s, p99s = [], []
            for name, method, path, data in requests:
                times, size = timed(args.runs, partial(browser.request, method, path, data=data))
                p50s.append(percentile(times, 50))
                p99s.append(percentile(times, 99))
                worst_size = max(worst_size, size)
                print(f"  {name:22s} p50 {p50s[-1]:7.1f} ms  p99 {p99s[-1]:7.1f} ms  {size / 1024:7.1f} KiB")
            print("  " + ratio_line("slowest p50", max(p50s), P50_TARGET_MS, lower_is_better=True, unit="ms"))
            print("  " + ratio_line("slowest p99", max(p99s), P99_TARGET_MS, lower_is_better=True, unit="ms"))
        print("\n" + ratio_line("largest answer", worst_size / 1024, SIZE_TARGET_KB, lower_is_better=True, unit="KiB"))


if __name__ == "__main__":
    main()
