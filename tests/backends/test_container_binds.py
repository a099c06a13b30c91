"""What a container engine is told to bind (issue 27's red team, against the container path):
no path may carry the engine's own options, and no bind source may be a folder its owner
could swap for a link between Trainyard's check and the engine's open."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainyard.backends.containers import ContainerError, unswappable, volume


@pytest.mark.parametrize(("source", "target"), [("/srv/team", "/mnt/x:U"), ("/srv/a:b", "/mnt/x"),
                                                ("/srv/team", "/mnt/x,relabel=shared"), ("/srv/t\nx", "/mnt/x")])
def test_a_path_holding_the_engine_s_separators_is_never_bound(source: str, target: str) -> None:
    with pytest.raises(ValueError, match="container engine would read as options"):
        volume(source, target, read_only=False)
    assert volume("/srv/team", "/mnt/x", read_only=True) == "/srv/team:/mnt/x:ro"


@pytest.fixture
def root_owned() -> Iterator[Path]:
    """A folder only root may change, and every folder above it (unlike /tmp)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to give a folder to another account")
    base = Path(tempfile.mkdtemp(prefix="trainyard-binds-", dir="/var/lib"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def test_a_folder_another_account_could_replace_is_bound_from_the_root_owned_folder_above(root_owned: Path) -> None:
    """A user's own environment sits in a folder of theirs: bound from that folder, whose
    parent is root's, a link they swap in for the environment resolves in the container."""
    theirs = root_owned / "alice"
    (theirs / "env" / "bin").mkdir(parents=True)
    os.chown(theirs, 65534, 65534)
    assert unswappable(str(theirs / "env")) == str(theirs)
    assert unswappable(str(root_owned)) == str(root_owned)


def test_a_folder_under_a_world_writable_top_folder_is_refused_and_one_not_here_is_kept(tmp_path: Path) -> None:
    if not os.stat("/tmp").st_mode & 0o002:
        pytest.skip("no world-writable /tmp here")
    if os.geteuid() != 0:
        pytest.skip("as another account, a folder of its own counts as root's")
    with pytest.raises(ContainerError, match="may be changed by accounts other than root"):
        unswappable(str(tmp_path / "env"))
    assert unswappable("/nowhere/alice/env") == "/nowhere/alice/env"  # a compute node's: not ours to tell
