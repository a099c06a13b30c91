"""The image cache on Slurm's compute nodes: list, pre-pull and evict, each through a short
Slurm job on the node running its engine (``SlurmBackend.node_images``/``pull_image``/
``remove_image``). The dev cluster's nodes share this machine's Podman storage, so what one
node pulls every node holds; the test asks each node all the same."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from podman_support import needs_podman, tiny_image

from slurm.conftest import World, make_world
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.slurm.commands import SlurmCommands

pytestmark = needs_podman


@pytest.fixture
def podman_world(slurm: SlurmCommands, tmp_path: Path, _sqlite_template: Path) -> Iterator[World]:
    yield from make_world(slurm, tmp_path, _sqlite_template, containers=ContainerEngine.find("podman", "runc"))


def test_an_image_is_pulled_to_two_nodes_listed_per_node_and_evicted_from_every_node(podman_world) -> None:
    backend = podman_world.backend
    folder = podman_world.tmp / "image"
    folder.mkdir()
    image = tiny_image(folder, f"trainyard-slurm-cache-{uuid4().hex[:8]}")
    # No registry here: the image travels as an archive, which `podman pull` reads like one.
    archive = folder / "image.tar"
    subprocess.run(["podman", "save", "-q", "-o", str(archive), image], check=True)
    subprocess.run(["podman", "rmi", image], check=True, capture_output=True)
    try:
        source = f"docker-archive:{archive}"
        [n1] = backend.pull_image(source, "n1")
        assert (n1.node, n1.pulled, n1.error) == ("n1", True, "")
        [n2] = backend.pull_image(source, "n2")
        assert (n2.node, n2.error) == ("n2", "")  # pulled again: an archive is never "there"
        holding = {i.node for i in backend.node_images() if i.image == image}
        assert {"n1", "n2"} <= holding
        removals = backend.remove_image(image)
        assert {"n1", "n2"} <= {r.node for r in removals}  # every node Slurm would run work on
        assert not any(r.error for r in removals) and any(r.removed for r in removals)
        assert not any(i.image == image for i in backend.node_images())
        [again] = backend.remove_image(image, "n2")
        assert (again.removed, again.error, again.note) == (False, "", f"{image} not on node n2")
    finally:
        subprocess.run(["podman", "rmi", image], check=False, capture_output=True)
