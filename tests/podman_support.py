"""What the container tests share: whether Podman can run them here, and the test image.

CI (``TRAINYARD_REQUIRE_PODMAN=1``, set by ``.ci/run``) fails rather than skips when
Podman is unusable; elsewhere the tests skip without Podman or without root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from deadlines import scaled

REPO = Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("TRAINYARD_REQUIRE_PODMAN") == "1"

needs_podman = pytest.mark.skipif(
    not REQUIRED and (shutil.which("podman") is None or os.geteuid() != 0),
    reason="podman (as root) is not available (.ci/run installs it)",
)


def build_test_image() -> str:
    """The test image's name, built once per machine (``scripts/dev-image.sh`` caches it)."""
    result = subprocess.run([str(REPO / "scripts" / "dev-image.sh"), "build"], capture_output=True, text=True,
                            check=False, timeout=scaled(1800))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split("=", 1)[1]


def tiny_image(folder: Path, name: str) -> str:
    """A throwaway image of one small file, ``localhost/<name>:1``, in this machine's Podman
    (for tests that remove images: never the shared test image)."""
    (folder / "hello.txt").write_text("hello\n")
    subprocess.run(["tar", "cf", str(folder / "root.tar"), "-C", str(folder), "hello.txt"], check=True)
    image = f"localhost/{name}:1"
    subprocess.run(["podman", "import", "-q", str(folder / "root.tar"), image], check=True, capture_output=True)
    return image
