"""``yard env``: environments jobs run in (HAI's haienv): build one from a requirements
file, list, show and delete them; admins declare base environments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import BaseModel

from trainyard.cli import render
from trainyard.cli.admin_commands import removal_text
from trainyard.client import Client, UsageError
from trainyard.core.states import EnvironmentState
from trainyard.schemas.environments import EnvironmentView

WAIT_HINT = "`yard env show {name}` says when it is READY; `yard logs {job}` shows the build"


def _requirements(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read requirements file {name!r}: {getattr(exc, 'strerror', None) or exc}") from exc


def _details(env: EnvironmentView) -> str:
    lines = [
        f"environment {env.name}: {env.state}" + (f" ({env.message})" if env.message else ""),
        f"  kind:       {env.kind}" + (f", on base {env.base}" if env.base else ""),
        f"  owner:      {env.owner}; visible to "
        + {"everyone": "every user", "group": f"group {env.group}"}.get(env.visibility, "its owner alone"),
        f"  runs:       {env.path + '/bin/python' if env.path else 'in image ' + str(env.image)}",
    ]
    if env.buildJobId is not None:
        lines.append(f"  build job:  {env.buildJobId} (`yard logs {env.buildJobId}`)")
    if env.requirements:
        lines.append("  requirements:")
        lines += [f"    {line}" for line in env.requirements.splitlines()]
    lines.append(f"  created:    {render.when(env.createdAt)}")
    return "\n".join(lines)


def _create(client: Client, args: argparse.Namespace) -> tuple[EnvironmentView, str, int]:
    if args.base_path is None and args.image is None and args.requirements is None:
        raise UsageError("give the packages: `yard env create NAME -r requirements.txt` "
                         "(admins: --base-path PREFIX or --image IMAGE for a base environment)")
    requirements = _requirements(args.requirements) if args.requirements is not None else None
    env = client.create_environment(args.name, requirements=requirements, base=args.base, group=args.group,
                                    vc=args.vc, base_path=args.base_path, image=args.image)
    if env.state != EnvironmentState.BUILDING:
        return env, f"created base environment {env.name}: READY", 0
    if not args.wait:
        text = f"building environment {env.name} as job {env.buildJobId}; " + WAIT_HINT.format(
            name=env.name, job=env.buildJobId)
        return env, text, 0
    env = client.wait_environment(env.name)
    if env.state == EnvironmentState.READY:
        return env, f"environment {env.name} is READY: `environment: {env.name}` in a job file runs in it", 0
    return env, f"environment {env.name} FAILED: {env.message}; its build log: `yard logs {env.buildJobId}`", 1


def cmd_env(client: Client, args: argparse.Namespace) -> int:
    status = 0
    result: BaseModel | list[EnvironmentView]
    if args.action == "create":
        result, text, status = _create(client, args)
    elif args.action == "show":
        env = client.environment(args.name)
        result, text = env, _details(env)
    elif args.action == "delete":
        removed = client.delete_environment(args.name, force=args.force)
        result, text = removed, removal_text(removed)
    else:
        envs = client.environments()
        result = envs
        text = render.table(
            ["NAME", "KIND", "STATE", "OWNER", "VISIBLE TO", "BASE", "RUNS"],
            [[e.name, e.kind, e.state, e.owner, e.group if e.visibility == "group" else e.visibility,
              e.base or "-", e.path or f"image {e.image}"] for e in envs])
    if args.json:
        render.print_json(result)
    else:
        print(text, file=sys.stderr if status else sys.stdout)
    return status
