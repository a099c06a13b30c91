"""``yard dev``: interactive JupyterLab sessions on the cluster (HAI's Studio): start one,
list yours, renew one before its lifetime ends, stop one."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

import httpx
from pydantic import BaseModel

from trainyard.cli import render
from trainyard.client import Client, UsageError, WaitTimeout
from trainyard.core.priorities import Priority
from trainyard.core.states import FINAL_JOB_STATES, JobState
from trainyard.schemas.sessions import SessionView

OPEN_TIMEOUT_SECONDS = 120.0


def _left(session: SessionView, now: datetime) -> str:
    if session.state in FINAL_JOB_STATES:
        return "-"
    if session.expiresAt is None:
        return f"{session.hours:g} h from its start"
    return render.seconds_text(max(0.0, (session.expiresAt - now).total_seconds()))


def _idle(session: SessionView) -> str:
    if session.state != JobState.RUNNING:
        return "-"
    if session.checkError:
        return "unknown"
    return "-" if session.idleSeconds is None else render.seconds_text(session.idleSeconds)


def _started_text(client: Client, session: SessionView) -> str:
    return (f"session {session.id} ({session.name}): {session.state}\n"
            f"open {client.url}{session.url} once it runs (signed in to the portal as {session.user}); it lives "
            f"{session.hours:g} h from its start: `yard dev renew {session.id}` extends it, "
            f"`yard dev stop {session.id}` ends it")


def _wait_open(client: Client, session: SessionView) -> SessionView:
    """Wait until the session runs and JupyterLab answers through the server."""
    deadline = time.monotonic() + OPEN_TIMEOUT_SECONDS
    while (session := client.session(session.id)).state != JobState.RUNNING:
        if session.state in FINAL_JOB_STATES:
            raise UsageError(f"session {session.id} ended before it opened: {session.state} ({session.stateMessage}); "
                             f"`yard logs {session.id}` shows JupyterLab's output")
        time.sleep(0.5)  # it may wait in the queue for as long as the cluster is full
    headers = {"Authorization": client._http.headers.get("Authorization", "")}
    url = f"{client.url}{session.url}api/status"
    with httpx.Client(headers=headers, timeout=10, trust_env=False) as http:
        while True:
            try:
                if http.get(url).status_code == 200:
                    return session
            except httpx.HTTPError:
                pass
            if (session := client.session(session.id)).state in FINAL_JOB_STATES:
                raise UsageError(f"session {session.id} ended before it opened: {session.state} "
                                 f"({session.stateMessage}); `yard logs {session.id}` shows JupyterLab's output")
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"session {session.id} runs but JupyterLab has not answered at {url} in "
                                  f"{OPEN_TIMEOUT_SECONDS:g} s: `yard logs {session.id}` shows why")
            time.sleep(0.5)


def cmd_dev(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | list[SessionView]
    now = datetime.now(UTC)
    if args.action == "list":
        sessions = client.sessions(everyone=args.all)
        result = sessions
        text = render.table(
            ["ID", "NAME", "USER", "STATE", "GPU", "ENDS IN", "IDLE", "KERNELS", "OPEN"],
            [[s.id, s.name, s.user, s.state, render.num(s.gpu), _left(s, now), _idle(s),
              "-" if s.kernels is None else s.kernels, f"{client.url}{s.url}" if s.state == JobState.RUNNING else "-"]
             for s in sessions])
    elif args.action == "renew":
        session = client.renew_session(args.id, hours=args.hours)
        result = session
        text = (f"session {session.id} renewed: it ends in {_left(session, now)}"
                if session.expiresAt is not None else f"session {session.id} renewed: {_left(session, now)}")
    elif args.action == "stop":
        session = client.stop_session(args.id)
        result, text = session, f"session {session.id}: {session.state}"
    else:
        session = client.start_session(
            gpu=args.gpu, image=args.image, environment=args.environment, storages=args.storage or None,
            hours=args.hours, virtualCluster=args.vc, priority=str(Priority.OPPO) if args.oppo else args.priority,
            cpu=args.cpu, memoryMB=args.memory_mb, name=args.name)
        text = _started_text(client, session)
        if args.wait:
            session = _wait_open(client, session)
            text = f"session {session.id} is open: {client.url}{session.url}"
        result = session
    if args.json:
        render.print_json(result)
    else:
        print(text)
    return 0
