"""``yard up``: start the server in the foreground with the settings and flags given."""

from __future__ import annotations

import argparse
import os
import sys

from pydantic import ValidationError


def run_up(args: argparse.Namespace) -> int:
    from trainyard.api.server import StartupError, serve
    from trainyard.api.serverlog import configure_server_logging
    from trainyard.core.settings import Settings, misspelled_environment

    configure_server_logging()  # queries of URLs redacted: they carry tokens (api/serverlog.py)
    for name, meant in misspelled_environment(os.environ):
        print(f"yard up: {name} is not a setting and is ignored; did you mean {meant}?", file=sys.stderr)
    overrides = {
        "host": args.host,
        "port": args.port,
        "local_gpus": args.local_gpus,
        "local_gpu_model": args.local_gpu_model,
        "local_cpus": args.local_cpus,
        "local_memory_mb": args.local_memory_mb,
        "task_user": args.task_user,
        "task_work_dir": args.task_work_dir,
        "task_accounts": args.task_accounts,
        "task_sandbox": args.task_sandbox,
        "task_limits": args.task_limits,
        "backend": args.backend,
        "slurm_partition": args.slurm_partition,
    }
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
        serve(settings)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else "?"
        flag = f"--{name.replace('_', '-')} / " if hasattr(args, name) else ""
        where = f"{flag}TRAINYARD_{name.upper()}"
        print(f"yard up: invalid setting {name} ({where}): {error['msg']}", file=sys.stderr)
        return 2
    except (StartupError, ValueError) as exc:
        print(f"yard up: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
