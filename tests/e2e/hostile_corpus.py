"""Hostile job files that once crashed the server or answered 500: the regression corpus.

Each entry is a request body that must be refused with a 4xx whose error names the field
(or the location in the text) that is wrong. ``test_hostile_input_e2e`` sends every one to
a real ``yard up`` and checks that the server is still there afterwards; the spec tests
parse them directly. Add to it whenever an input is found that Trainyard mishandles.
"""

from __future__ import annotations

from dataclasses import dataclass

JOB = '"name": "x", "taskRoles": {"m": {"commands": ["true"]}}'


@dataclass(frozen=True)
class Hostile:
    name: str
    body: bytes
    content_type: str  # "yaml" or "json"
    status: int
    path: str  # what the first error's path starts with


def _json(extra: str) -> bytes:
    return ("{" + JOB + ", " + extra + "}").encode()


def _yaml(text: str) -> bytes:
    return ("name: x\ntaskRoles: {m: {commands: ['true']}}\n" + text).encode()


CORPUS: tuple[Hostile, ...] = (
    # 60 KB of brackets overflowed libyaml's C stack: a segfault of the whole server.
    Hostile("yaml nested 30,000 deep", _yaml("p: " + "[" * 30000 + "]" * 30000 + "\n"), "yaml", 422, "p[0][0]"),
    Hostile("json nested 30,000 deep", _json('"parameters": {"p": ' + "[" * 30000 + "]" * 30000 + "}"),
            "json", 422, "parameters.p[0]"),
    Hostile("yaml block mappings 40 deep",
            _yaml("parameters:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(40)) + "  " * 41 + "v\n"),
            "yaml", 422, "parameters.k0.k1"),
    Hostile("json objects 40 deep inside a list",
            _json('"parameters": {"l": [1, ' + '{"a": ' * 40 + "1" + "}" * 40 + "]}"),
            "json", 422, "parameters.l[1].a"),
    # A lone surrogate was stored, then every read of the job answered 500.
    Hostile("lone surrogate in the name", b'{"name": "x\\ud800", "taskRoles": {"m": {"commands": ["true"]}}}',
            "json", 422, "name"),
    Hostile("lone surrogate in a command", b'{"name": "x", "taskRoles": {"m": {"commands": ["echo \\udfff"]}}}',
            "json", 422, "taskRoles.m.commands[0]"),
    Hostile("lone surrogate in a secret", _json('"parameters": {}, "secrets": {"s": "a\\ud83d"}'),
            "json", 422, "secrets.s"),
    Hostile("lone surrogate in a key", _json('"parameters": {"k\\udc00": 1}'), "json", 422, "parameters.k"),
    Hostile("lone surrogate in yaml", _yaml('description: "a\\ud800"\n'), "yaml", 422, "<line 3, column"),
    # Python converts at most 4,300 digits: the ValueError answered 500.
    Hostile("json integer of 5,000 digits", _json('"parameters": {"n": ' + "9" * 5000 + "}"), "json", 422,
            "parameters.n"),
    Hostile("yaml integer of 5,000 digits", _yaml("parameters: {n: " + "9" * 5000 + "}\n"), "yaml", 422,
            "parameters.n"),
    Hostile("gpu count of 5,000 digits",
            b'{"name": "x", "taskRoles": {"m": {"commands": ["true"], "resourcePerInstance": {"gpu": '
            + b"1" * 5000 + b"}}}}", "json", 422, "taskRoles.m.resourcePerInstance.gpu"),
    Hostile("integer past 64 bits", _json('"parameters": {"n": 99999999999999999999}'), "json", 422, "parameters.n"),
    Hostile("json NaN", _json('"parameters": {"n": NaN}'), "json", 422, "parameters.n"),
    Hostile("json Infinity", _json('"parameters": {"n": -Infinity}'), "json", 422, "parameters.n"),
    Hostile("yaml .inf", _yaml("parameters: {n: .inf}\n"), "yaml", 422, "parameters.n"),
    # execve refused it at launch; the task failed as "command not found".
    Hostile("env value over 128 KiB", _yaml("    env: {BIG: " + "a" * 140_000 + "}\n").replace(
        b"taskRoles: {m: {commands: ['true']}}\n", b"taskRoles:\n  m:\n    commands: ['true']\n"),
            "yaml", 422, "taskRoles.m.env.BIG"),
    Hostile("env over 128 KiB once a parameter is filled in",
            _yaml("parameters: {p: " + "a" * 70_000 + "}\n").replace(
                b"taskRoles: {m: {commands: ['true']}}\n",
                b"taskRoles:\n  m:\n    commands: ['true']\n    env: {X: '<% $parameters.p %><% $parameters.p %>'}\n"),
            "yaml", 422, "taskRoles.m.env.X"),
    # Older finds, kept so they stay fixed.
    Hostile("alias bomb", ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcd", "bcde"))).encode() + _yaml(""),
            "yaml", 422, "<document>"),
    Hostile("python object tag", _yaml("p: !!python/object/apply:os.system ['touch /tmp/owned']\n"), "yaml", 422,
            "<line"),
    Hostile("not UTF-8", b"name: \xff\xfe\ntaskRoles: {}\n", "yaml", 422, "<document>"),
    Hostile("NUL in a command", b'{"name": "x", "taskRoles": {"m": {"commands": ["a\\u0000b"]}}}', "json", 422,
            "taskRoles.m.commands[0]"),
    Hostile("duplicate key", b"name: x\nname: y\ntaskRoles: {m: {commands: ['true']}}\n", "yaml", 422, "<line"),
    Hostile("a list, not a job", b"[1, 2, 3]", "json", 422, "<document>"),
    Hostile("over 1 MiB", b"name: x\n#" + b"a" * (1 << 20) + b"\n", "yaml", 413, ""),
)
