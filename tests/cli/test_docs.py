"""The README and docs/ hold together: every relative link leads to a file that exists (and
its ``#anchor`` to a heading there, by GitHub's rules), every ``yard`` command they quote
names a real command and real options of ``yard``'s parser, and the README fits on a page.
Nothing here starts a server."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from trainyard.cli.main import build_parser
from trainyard.cli.reference import slug

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250  # issue 28: a README that fits on a page
PAGES = sorted(
    [REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").rglob("*.md"),
     *(REPO / "examples").rglob("*.md")]
)
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")


def _name(page: Path, root: Path = REPO) -> str:
    return page.relative_to(root).as_posix()


def prose_and_code(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
    """The lines outside fenced code blocks, and those inside with their fence's language."""
    prose, code = [], []
    fence, language = "", ""
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line.strip())
        if opened and not fence:
            fence, language = opened.group(1), line.strip()[3:].strip()
        elif opened and line.strip().startswith(fence) and not line.strip()[3:].strip():
            fence = ""
        elif fence:
            code.append((number, language, line))
        else:
            prose.append((number, line))
    return prose, code


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub makes for a page's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_and_code(page.read_text())[0]:
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link's text only
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(page: Path) -> Iterator[tuple[int, str]]:
    for number, line in prose_and_code(page.read_text())[0]:
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z+.-]*:", target):  # https:, mailto:: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        where = f"{_name(page, root)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where}: no heading makes #{anchor} in {_name(resolved, root)}")
    return broken


def test_the_readme_fits_on_a_page() -> None:
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the manual belongs in docs/ (docs/index.md)"


def test_every_page_of_docs_is_in_the_index() -> None:
    index = REPO / "docs" / "index.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for _, target in links(index)}
    pages = {page.resolve() for page in (REPO / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(_name(page) for page in pages - linked) == []


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A title, with `code` — and more\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-title-with-code--and-more) [ok](there.md#twice-1) [ok](#here) `[no](code.md)`\n"
        "[gone](missing.md) [bad anchor](there.md#twice-2)\n```\n[in code](nowhere.md)\n```\n# Here\n"
    )
    assert [problem.split(": ", 1)[1] for problem in broken_links(page, tmp_path)] == [
        "missing.md: no such file",
        "there.md#twice-2: no heading makes #twice-2 in there.md",
    ]


# -- The yard commands the docs quote ----------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


@cache
def _yard() -> argparse.ArgumentParser:
    return build_parser()


def check_command(command: str, *, whole: bool = True) -> str | None:
    """Why ``yard ...`` (as quoted in the docs: placeholders, ``[optional]`` parts, ``a|b``
    alternatives and ``…`` allowed) is not a command of ``yard``'s parser; None if it is.
    Prose may name a command without its subcommand (``yard vc``): ``whole=False``."""
    words = command.replace("[", " ").replace("]", " ").split()
    assert words[0] == "yard"
    parser = _yard()
    rest = words[1:]
    while (sub := _subparsers(parser)) is not None and rest:
        word = rest[0]
        if word.startswith("-") or not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
            break
        has_positionals = any(not a.option_strings and not isinstance(a, argparse._SubParsersAction)
                              for a in parser._actions)
        choices = word.split("|")
        if not all(choice in sub.choices for choice in choices):
            if sub.required or not has_positionals:
                return f"{word!r} is not a subcommand (of {sorted(sub.choices)})"
            break
        parser = sub.choices[choices[0]]
        rest = rest[1:]
    else:
        if whole and sub is not None and sub.required and not rest and not command.rstrip().endswith(("…", "...")):
            return f"a subcommand is missing (one of {sorted(sub.choices)})"
    known = _options(parser)
    for word in rest:
        if word == "--":  # what follows is the task's command (yard exec)
            break
        for option in re.findall(r"(?:^|\|)(--?[A-Za-z][A-Za-z0-9-]*)", word):
            if option not in known:
                return f"{option} is not an option of {parser.prog}"
    return None


def quoted_commands(page: Path) -> Iterator[tuple[int, str, bool]]:
    """``yard ...`` in fenced code (a console block's ``$`` lines; a line holding several
    commands apart, as in a synopsis) and in inline code."""
    prose, code = prose_and_code(page.read_text())
    for number, language, line in code:
        if language == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        line = re.split(r"\s#\s|^#", line)[0]
        for part in re.split(r"\s{3,}|&&|;|\s/\s|\|\s", line):
            part = re.sub(r"^(\s*[A-Z_]+=\S+\s+)+", "", part.strip())  # VAR=value yard ...
            if part.startswith("yard "):
                yield number, part, True
    for number, line in prose:
        for match in INLINE_CODE.finditer(line):
            text = match.group(2).strip()
            if text.startswith("yard ") and not text.endswith("'s"):
                yield number, text, False


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_quoted_yard_command_is_real(page: Path) -> None:
    wrong = [f"{_name(page)}:{number}: `{command}`: {why}"
             for number, command, whole in quoted_commands(page) if (why := check_command(command, whole=whole))]
    assert wrong == []


@pytest.mark.parametrize(("command", "why"), [
    ("yard submit examples/hello-world.yaml --dry-run", None),
    ("yard vc create|list|grant|quota|sharing", None),
    ("yard exec 7 -- nvidia-smi --query", None),
    ("yard dev --gpu 0.5 --wait", None),
    ("yard alerts set node-unhealthy cordon=true", None),
    ("yard user create NAME [--admin]", None),
    ("yard sumbit job.yaml", "'sumbit' is not a subcommand"),
    ("yard vc create vision --gpu 4", "--gpu is not an option of yard vc create"),
    ("yard token", "a subcommand is missing"),
])
def test_the_command_checker(command: str, why: str | None) -> None:
    found = check_command(command)
    assert (found is None) if why is None else (found is not None and found.startswith(why))
