"""`yard doctor`'s probe of one compute node, run there in a Slurm step (``slurm/doctor.py``).

It runs under the node's own ``/usr/bin/python3`` (given as ``-c`` text, so it needs
nothing on the node but that interpreter: not even the shared directory it checks), so it
imports only the standard library and keeps to Python 3.7: an older node must still say
which version it has. Its one argument is a JSON request; it prints one JSON object a line:

1. ``{"listening": PORT, "time": T}`` as soon as it listens on a port of the task range
   (the server then connects to the node's address and sends the request's token);
2. ``{"result": {...}}`` once it has looked at everything: who it runs as, the Python
   version, the shared directory (the server's nonce read back; a file written beside it,
   whose owner shows a root_squash), bubblewrap, Podman, the accounts asked about, the
   GPUs NVML sees, NVIDIA's MPS control program, and whether the server's connection arrived.

Nothing it reads comes from a user: the request is the server's, the paths are its state
directory's, and every program it starts gets an argv list, never a shell.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROBE_SECONDS = 20


def say(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def listen(low: int, high: int) -> tuple[socket.socket | None, str]:
    """A listening socket on a free port of [low, high), on every address."""
    error = "no port tried"
    for port in random.sample(range(low, high), min(20, high - low)):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
            sock.listen(4)
            return sock, ""
        except OSError as exc:
            sock.close()
            error = f"port {port}: {exc}"
    return None, error


def shared(request: dict[str, Any]) -> dict[str, Any]:
    """The server's nonce read back here, and a file written beside it."""
    found: dict[str, Any] = {"read": False, "wrote": False, "error": ""}
    try:
        with open(request["nonce_file"]) as file:
            found["read"] = file.read().strip() == request["nonce"]
        if not found["read"]:
            found["error"] = f"{request['nonce_file']} holds another nonce: another directory is mounted there"
    except OSError as exc:
        found["error"] = f"cannot read {request['nonce_file']}: {exc.strerror}"
        return found
    try:
        with open(request["node_file"], "w") as file:
            file.write(request["nonce"] + "\n")
        found["wrote"] = True
        found["owner"] = os.stat(request["node_file"]).st_uid
    except OSError as exc:
        found["error"] = f"cannot write {request['node_file']}: {exc.strerror}"
    return found


def run(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True,
                              timeout=PROBE_SECONDS, env={"PATH": PATH}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    text = (done.stdout + done.stderr).strip()
    return done.returncode == 0, text.splitlines()[-1] if text else f"exit status {done.returncode}"


def bwrap() -> dict[str, Any]:
    """Whether bubblewrap runs a command in new namespaces here (as the tasks' sandbox will)."""
    path = shutil.which("bwrap", path=PATH)
    if path is None:
        return {"path": None, "ok": False, "error": "bubblewrap (bwrap) is not installed"}
    works, text = run([path, "--unshare-pid", "--unshare-ipc", "--dev-bind", "/", "/", "--proc", "/proc",
                       "--tmpfs", "/tmp", "--", "true"])
    return {"path": path, "ok": works, "error": "" if works else text}


def podman() -> dict[str, Any]:
    path = shutil.which("podman", path=PATH)
    if path is None:
        return {"path": None, "ok": False, "error": "podman is not installed"}
    works, text = run([path, "--version"])
    return {"path": path, "ok": works, "version": text if works else "", "error": "" if works else text}


def accounts(names: list[str]) -> dict[str, Any]:
    """Each account's uid and gid here, or None where it does not exist."""
    found: dict[str, Any] = {}
    for name in names:
        try:
            entry = pwd.getpwnam(name)
            found[name] = [entry.pw_uid, entry.pw_gid]
        except KeyError:
            found[name] = None
    return found


def gpus() -> dict[str, Any]:
    """How many GPUs NVML sees here (nvidia-ml-py, else nvidia-smi); count None without NVML."""
    try:
        import pynvml  # type: ignore[import-untyped,unused-ignore]

        pynvml.nvmlInit()
        return {"count": int(pynvml.nvmlDeviceGetCount()), "source": "NVML"}
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - NVML's own error types: no driver, no device
        return {"count": None, "error": f"NVML: {exc}"}
    smi = shutil.which("nvidia-smi", path=PATH)
    if smi is None:
        return {"count": None, "error": "no NVML here (neither nvidia-ml-py for this python3 nor nvidia-smi)"}
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True,
                              timeout=PROBE_SECONDS, env={"PATH": PATH}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"count": None, "error": f"nvidia-smi -L: {exc}"}
    if done.returncode != 0:
        return {"count": None, "error": "nvidia-smi -L: %s" % (done.stderr.strip() or done.returncode)}
    return {"count": sum(1 for line in done.stdout.splitlines() if line.startswith("GPU ")), "source": "nvidia-smi"}


def mps() -> dict[str, Any]:
    """Where NVIDIA's MPS control program and nvidia-smi are (None: not here): a task given
    part of a GPU is held to its share through them (``slurm/mpsstep``)."""
    return {"control": shutil.which("nvidia-cuda-mps-control", path=PATH), "smi": shutil.which("nvidia-smi", path=PATH)}


def reached(sock: socket.socket | None, token: str, deadline: float) -> dict[str, Any]:
    """Whether the server's connection came, with its token, before the deadline."""
    if sock is None:
        return {"reached": False, "error": "not listening"}
    sock.settimeout(max(0.1, deadline - time.time()))
    try:
        conn, peer = sock.accept()
        conn.settimeout(5)
        got = conn.recv(len(token) + 1).decode("ascii", "replace")
        conn.close()
    except OSError as exc:
        return {"reached": False, "error": f"no connection from the server: {exc}"}
    finally:
        sock.close()
    return {"reached": got == token, "peer": peer[0], "error": "" if got == token else "wrong token"}


def ephemeral_ports() -> list[int] | None:
    """The kernel's range for outgoing connections' local ports (a task port inside it may be taken)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            return [int(word) for word in file.read().split()[:2]]
    except (OSError, ValueError):
        return None


def main(argv: list[str]) -> int:
    request = json.loads(argv[1])
    sock, error = listen(*request["ports"])
    say({"listening": sock.getsockname()[1] if sock else None, "error": error, "time": time.time()})
    deadline = time.time() + request.get("wait_seconds", PROBE_SECONDS)
    result = {
        "uid": os.getuid(), "gid": os.getgid(), "python": list(sys.version_info[:3]),
        "executable": sys.executable, "shared": shared(request), "bwrap": bwrap(), "podman": podman(),
        "accounts": accounts(request["accounts"]), "gpus": gpus(), "mps": mps(),
        "ephemeral_ports": ephemeral_ports(),
    }
    result["port"] = reached(sock, request["token"], deadline)
    say({"result": result, "time": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
