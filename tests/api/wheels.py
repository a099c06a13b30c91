"""Small wheels made in a test, so that environments build without any package index."""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

from deadlines import scaled


def tiny_wheel(folder: Path, name: str, source: str, version: str = "0.1") -> Path:
    """A pure-Python wheel of one module ``name`` (``source`` its code), built to the wheel
    spec (PEP 427) with its RECORD of hashes: what ``pip wheel`` of a one-module project
    makes, without the build tools this machine may lack."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: trainyard-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def local_requirements(wheels: Path, *packages: str) -> str:
    return "\n".join(["--no-index", f"--find-links {wheels}", *packages]) + "\n"


def node_venv(prefix: Path, python: str, wheels: Path | None = None, *packages: str) -> Path:
    """A virtualenv at ``prefix`` made by ``python`` (its ``bin/python`` links to it), with
    ``packages`` installed from ``wheels`` (no index): what an environment's build job makes,
    without a job."""
    import subprocess

    subprocess.run([python, "-m", "venv", "--without-pip", str(prefix)], check=True, capture_output=True,
                   timeout=scaled(120))
    if packages:
        # This run's pip installs into it (``--python``): giving the venv a pip of its own
        # (ensurepip) cost 2.8 s of CPU, 14-20 s of a loaded machine's wall, against 0.7 s.
        subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install",
                        "--disable-pip-version-check", "--no-index", "--find-links", str(wheels), *packages],
                       check=True, capture_output=True, timeout=scaled(120))
    return prefix
