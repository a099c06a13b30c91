"""A client command imports what it needs and no more (issue 33: `yard jobs|job|logs|submit`
under 150 ms, most of which was imports): the other commands' modules, the API models it does
not read, PyYAML where no job file is read, httpx's own command line and httpcore's async
backends stay unloaded. Checked in a
fresh interpreter, by what is in ``sys.modules``; benchmarks/bench_cli.py times it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from trainyard.cli.commands import HANDLERS, handler
from trainyard.cli.main import build_parser

# Modules the common commands never need: other commands' and the models they alone read.
OTHER_COMMANDS = ("account_commands", "admin_commands", "alert_commands", "bulk", "dev_commands", "env_commands",
                  "execshell", "files_commands", "forward", "history_render", "storage_commands", "sweep_commands",
                  "top", "usage_commands")
# What `yard`'s main() does as the program (not called with argv): client_http.py's mode.
AS_THE_PROGRAM = "from trainyard.client_http import for_the_program, import_httpx\nfor_the_program()\n"


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=os.environ.copy())
    return set(out.stdout.split())


def test_yard_jobs_loads_neither_the_models_nor_another_commands_module() -> None:
    loaded = _loaded_after("from trainyard.cli.commands import handler\nhandler('jobs')\n"
                           "from trainyard.client import Client\nClient('http://127.0.0.1:9', 't')")
    assert {"trainyard.cli.commands", "trainyard.client", "trainyard.cli.plain"} <= loaded
    assert not loaded & {f"trainyard.cli.{m}" for m in OTHER_COMMANDS}
    assert not {m for m in loaded if m.startswith(("trainyard.schemas", "pydantic"))}  # its table: cli/plain.py
    assert "yaml" not in loaded  # only job files are YAML: `yard submit` reads one


def test_the_program_makes_its_client_without_httpx_and_what_only_a_folder_sent_needs() -> None:
    # `yard` (the program) sends a plain http:// server its requests over client_http.py (http.client).
    loaded = _loaded_after(AS_THE_PROGRAM + "from trainyard.cli.commands import handler\nhandler('submit')\n"
                           "from trainyard.client import Client\nClient('http://127.0.0.1:9', 't')")
    assert not loaded & {"httpx", "httpcore", "h11", "logging"}
    assert not loaded & {"dataclasses", "inspect", "uuid", "tarfile", "gzip", "hashlib", "subprocess", "pathspec"}


def test_yard_job_reads_the_job_its_notices_and_its_usage_without_the_models() -> None:
    # What `yard job ID` runs for an ended job: its handler, the job's detail, notices and
    # efficiency line read from JSON (cli/plain.py), as tests/cli/test_cli_plain_whole.py's answers.
    loaded = _loaded_after(
        f"import json\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from trainyard.cli.commands import handler\nhandler('job')\n"
        "from trainyard.cli import plain, render\nfrom trainyard.cli.account_commands import notices_text\n"
        "from trainyard.cli.usage_commands import efficiency_line\n"
        "from plain_answers import ENDED, NOTICES, USAGE\n"
        "render.job_detail(plain.read('jobs.JobDetail', json.dumps(ENDED).encode()))\n"
        "notices_text(plain.read('notices.JobNoticeView[]', json.dumps(NOTICES).encode()))\n"
        "efficiency_line(plain.read('usage.UsageReport', json.dumps(USAGE).encode()).lines[0])")
    assert {"trainyard.cli.account_commands", "trainyard.cli.usage_commands", "trainyard.cli.shapes"} <= loaded
    assert not {m for m in loaded if m.startswith(("trainyard.schemas", "pydantic", "yaml"))}


def test_yard_submit_reads_a_job_file_with_pyyaml_only_where_it_may_name_a_sweep_or_a_workdir() -> None:
    probe = ("from trainyard.cli.commands import handler\nhandler('submit')\n"
             "from trainyard.client_workdir import folder_for, may_name, names_upload\n"
             "data = {!r}\nfolder_for(data, None), names_upload(data), may_name(data, 'sweep')")
    plain_file = b"name: a\ntaskRoles: {w: {commands: [train]}}\n"
    assert not {m for m in _loaded_after(probe.format(plain_file)) if m.startswith(("yaml", "pydantic"))}
    assert "yaml" in _loaded_after(probe.format(plain_file + b"workdir: src\n"))


def test_a_command_of_another_module_loads_it_when_it_runs() -> None:
    loaded = _loaded_after("from trainyard.cli.commands import handler\nhandler('vc')")
    assert "trainyard.cli.admin_commands" in loaded


def test_every_client_command_has_a_handler_that_imports() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(sub.choices)
    assert commands - {"up", "sim", "doctor"} == set(HANDLERS)
    for command in HANDLERS:
        assert callable(handler(command)), command


def test_yard_loads_httpx_without_its_command_line_or_httpcores_async_backends() -> None:
    loaded = _loaded_after(AS_THE_PROGRAM + "import_httpx()\n"
                           "import httpx\nhttpx.Client(base_url='http://127.0.0.1:9').close()")
    assert {"httpx", "httpcore"} <= loaded
    assert not loaded & {"httpx._main", "trio", "anyio", "rich", "click"}
    # Hidden only while httpx loads: anything else may import them after.
    after = _loaded_after(AS_THE_PROGRAM + "import_httpx()\nimport anyio")
    assert "anyio" in after
