"""Talking to a JupyterLab session through ``yard up``'s proxy, as a notebook's browser tab
does: a kernel started over HTTP, code run over the kernel's WebSocket (Jupyter's messaging
protocol, version 5.3)."""

from __future__ import annotations

import json
import uuid

import httpx
from deadlines import scaled
from websockets.sync.client import connect

from e2e.server import Server


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def run_code(server: Server, token: str, session: int, code: str) -> str:
    """Start a kernel through the proxy, run ``code`` over its WebSocket, return its value."""
    base = f"{server.url}/sessions/{session}"
    kernel = httpx.post(f"{base}/api/kernels", headers=bearer(token), json={"name": "python3"}, timeout=scaled(30))
    assert kernel.status_code == 201, kernel.text
    msg_id = uuid.uuid4().hex
    request = {
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type": "execute_request",
                   "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }
    channels = f"ws{base[4:]}/api/kernels/{kernel.json()['id']}/channels"
    with connect(channels, additional_headers=bearer(token), open_timeout=scaled(30)) as ws:
        ws.send(json.dumps(request))
        while True:
            message = json.loads(ws.recv(timeout=scaled(60)))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            assert message["msg_type"] != "error", message["content"]
            if message["msg_type"] == "execute_result":
                return str(message["content"]["data"]["text/plain"])
