"""The generated references in docs/ equal what ``trainyard.cli.reference`` writes from the
code: the settings table from ``core/settings.py``, the CLI reference from ``yard``'s parser."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from trainyard.cli import reference
from trainyard.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", [reference.SETTINGS_PAGE, reference.CLI_PAGE], ids=str)
def test_the_generated_page_equals_what_the_code_declares(page: Path) -> None:
    want = reference.expected(REPO)[page]
    have = (REPO / page).read_text()
    diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True), str(page), "generated", n=1))
    assert have == want, (
        f"{page} differs from the code; regenerate it from the repository root with\n\n"
        f"    {reference.REGENERATE}\n\n{diff[:4000]}"
    )


def test_every_setting_has_a_row_a_description_and_a_topic() -> None:
    table = reference.settings_table()
    page = (REPO / reference.SETTINGS_PAGE).read_text()
    topics = page.split("## By topic", 1)[1].split("## Reference", 1)[0]
    named = {word.lower() for word in re.findall(r"`([A-Z][A-Z0-9_]+)`", topics)}
    for name, field in Settings.model_fields.items():
        assert f"`TRAINYARD_{name.upper()}` (`{name}`)" in table
        assert field.description, f"settings.{name} needs a description: it is the settings reference's text"
    assert named == set(Settings.model_fields), "docs/admin/settings.md's 'By topic' names each setting once"


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    text = reference.cli_reference()
    for words, parser, _ in reference.walk(reference.build_parser()):
        assert f"`yard {' '.join(words)}`" in text
        for action in parser._actions:
            for option in action.option_strings:
                assert option in text or option in ("-h", "--help")


def test_the_settings_types_read_as_a_reader_would() -> None:
    rows = {line.split("|")[1].strip(): line for line in reference.settings_table().splitlines()[2:]}
    assert "| `auto` \\| `per-user` \\| `server` | `auto` |" in rows["`TRAINYARD_TASK_ACCOUNTS` (`task_accounts`)"]
    assert "| path | `~/.trainyard` |" in rows["`TRAINYARD_HOME` (`home`)"]
    assert "| whole number, optional | `1024` |" in rows["`TRAINYARD_TASK_LOG_MAX_MB` (`task_log_max_mb`)"]
    # A placeholder such as ty-<name> stays visible: outside code, < is written as &lt;.
    assert "ty-&lt;name&gt;" in rows["`TRAINYARD_TASK_ACCOUNT_CREATE` (`task_account_create`)"]


def test_the_page_must_keep_its_markers(tmp_path: Path) -> None:
    (tmp_path / "docs" / "admin").mkdir(parents=True)
    (tmp_path / reference.SETTINGS_PAGE).write_text("# Settings\n\nno markers\n")
    with pytest.raises(ValueError, match="lost its markers"):
        reference.expected(tmp_path)


def test_regenerating_writes_only_what_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs" / "admin").mkdir(parents=True)
    (tmp_path / "docs" / "user").mkdir(parents=True)
    (tmp_path / reference.SETTINGS_PAGE).write_text((REPO / reference.SETTINGS_PAGE).read_text())
    assert reference.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"wrote {reference.CLI_PAGE}\n"
    assert (tmp_path / reference.CLI_PAGE).read_text() == (REPO / reference.CLI_PAGE).read_text()
    assert reference.main([str(tmp_path)]) == 0 and capsys.readouterr().out == ""
