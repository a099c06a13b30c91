"""The Slurm backend's image cache (``base.ImageCache``): which images each compute node's
engine holds, pulling one there ahead of the jobs, evicting one. Each action is a short
Slurm job of its own on each node (``srun``, one CPU), all nodes at once, running the
engine as the server's account (root: the engine that runs the tasks' containers); the
server records when it pulled an image to a node under ``<state_dir>/images/<node>/``."""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from trainyard.backends.base import ImagePull, ImageRemoval, NodeImage
from trainyard.backends.containers import (
    ENGINE_ENV,
    PULL_TIMEOUT_SECONDS,
    ContainerEngine,
    ContainerError,
    image_removal,
    parse_image_list,
    pull_record_path,
    pulled_at,
    record_pull,
)
from trainyard.backends.slurm.commands import SlurmCommands, SlurmError

log = logging.getLogger(__name__)

# Each step: a Slurm job of one CPU and this much memory, at most this many at once,
# listing (or removing) for at most this long.
IMAGE_STEP_MEMORY_MB = 512
IMAGE_STEPS_AT_ONCE = 8
IMAGE_LIST_SECONDS = 300.0
# srun's own line about the command's exit status, which is not the command's answer.
_SRUN_EXITED = re.compile(r"srun: error: \S+: task \d+: Exited with exit code \d+\s*$")
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # one fit for a path
_T = TypeVar("_T")


class NodeImages:
    """The image cache of the nodes of ``partition`` (``usable_nodes`` says which take
    work now); ``containers`` is the engine the backend runs containers with (read at each
    call: None, no engine configured)."""

    def __init__(self, commands: SlurmCommands, state_dir: Path, partition: str | None, name_prefix: str,
                 containers: Callable[[], ContainerEngine | None], usable_nodes: Callable[[], list[str]]) -> None:
        self.commands = commands
        self.state_dir = state_dir
        self.partition = partition
        self.name_prefix = name_prefix
        self._containers = containers
        self._usable_nodes = usable_nodes


    def node_images(self) -> list[NodeImage]:
        """Each usable node's images, from its own engine (``_image_step``); a node whose
        step failed is left out (logged), unless every one failed (ContainerError)."""
        engine = self._engine()
        fmt = "{{json .}}" if engine.kind == "docker" else "json"
        found: list[NodeImage] = []
        errors = []
        nodes = self._image_nodes(None)
        answers = self._on_nodes(nodes, lambda name: self._image_step(
            name, engine.command("images", "--format", fmt), IMAGE_LIST_SECONDS))
        for node, done in zip(nodes, answers, strict=True):
            if isinstance(done, str) or done.returncode != 0:
                why = done if isinstance(done, str) else (done.stderr.strip()[-500:] or f"exit {done.returncode}")
                errors.append(f"node {node}: {why}")
                continue
            try:
                rows = parse_image_list(engine.kind, done.stdout)
            except ValueError as exc:
                errors.append(f"node {node}: {engine.kind} images printed no list ({exc})")
                continue
            records = self._pull_records(node)
            found += [NodeImage(node, image, image_id, size, created,
                                pulled_at(pull_record_path(records, image)) if records is not None else None)
                      for image, image_id, size, created in rows]
        if errors:
            log.warning("could not list the images of some nodes: %s", "; ".join(errors))
            if not found and len(errors) == len(nodes):
                raise ContainerError(f"could not list any node's images: {'; '.join(errors)}")
        return found

    def pull_image(self, image: str, node: str | None = None) -> list[ImagePull]:
        """On each node (or ``node``), a step that checks whether its engine holds ``image``,
        then one that pulls it where it does not, all nodes at once."""
        engine = self._engine()

        def pull(name: str) -> ImagePull:
            there = self._image_step(name, engine.exists_command(image), IMAGE_LIST_SECONDS)
            if isinstance(there, str):
                return ImagePull(name, image, False, 0.0, f"could not pull {image} on node {name}: {there}")
            if there.returncode == 0:
                return ImagePull(name, image, pulled=False, seconds=0.0)
            started = time.monotonic()
            done = self._image_step(name, engine.pull_command(image), PULL_TIMEOUT_SECONDS)
            seconds = time.monotonic() - started
            if isinstance(done, str) or done.returncode != 0:
                said = done if isinstance(done, str) else ((done.stderr or done.stdout).strip().splitlines() or
                                                           [f"exit {done.returncode}"])[-1]
                return ImagePull(name, image, False, seconds, f"could not pull {image} on node {name}: {said}")
            if (records := self._pull_records(name)) is not None:
                record_pull(pull_record_path(records, image), image, datetime.now(UTC))
            return ImagePull(name, image, pulled=True, seconds=seconds)

        return self._on_nodes(self._image_nodes(node), pull)

    def remove_image(self, image: str, node: str | None = None) -> list[ImageRemoval]:
        """On each node (or ``node``), a step that removes ``image`` (``containers.image_removal``:
        never forced, so a container that uses it keeps it)."""
        engine = self._engine()

        def remove(name: str) -> ImageRemoval:
            done = self._image_step(name, engine.remove_image_command(image), IMAGE_LIST_SECONDS)
            if isinstance(done, str):
                return ImageRemoval(name, image, False, f"could not remove {image} from node {name}: {done}")
            result = image_removal(engine.kind, name, image, done.returncode, done.stderr or done.stdout)
            if result.removed and (records := self._pull_records(name)) is not None:
                pull_record_path(records, image).unlink(missing_ok=True)
            return result

        return self._on_nodes(self._image_nodes(node), remove)

    def _engine(self) -> ContainerEngine:
        if (engine := self._containers()) is None:
            raise ContainerError("the compute nodes have no container engine configured (container_engine: podman, "
                                 "installed at the same path on every node)")
        return engine

    def _image_nodes(self, node: str | None) -> list[str]:
        """``node``, or every node of the partition that Slurm would start work on now."""
        return [node] if node is not None else self._usable_nodes()

    def _on_nodes(self, nodes: list[str], step: Callable[[str], _T]) -> list[_T]:
        """``step`` for each of ``nodes``, all at once, answers in their order."""
        if not nodes:
            return []
        with ThreadPoolExecutor(max_workers=min(len(nodes), IMAGE_STEPS_AT_ONCE)) as pool:
            return list(pool.map(step, nodes))

    def _image_step(self, node: str, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str] | str:
        """``argv`` (the engine's command line) run on ``node`` by a Slurm job of its own (``srun``,
        one CPU, ``IMAGE_STEP_MEMORY_MB``) as this server's account (root: the engine that runs
        the tasks' containers) with the engine's clean environment; Slurm's or the command's
        answer, or why there was none."""
        srun = ["srun", f"--job-name={self.name_prefix}-images", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
                "--cpus-per-task=1", f"--mem={IMAGE_STEP_MEMORY_MB}", "--export=NONE", "--quiet"]
        if self.partition is not None:
            srun.append(f"--partition={self.partition}")
        srun += ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in ENGINE_ENV.items()), *argv]
        try:
            done = self.commands.run(srun, check=False, timeout=timeout)
        except SlurmError as exc:
            return str(exc)
        # srun's own line about the command's exit status ("srun: error: n2: task 0: Exited
        # with exit code 1"), even with --quiet: the command's answer is the rest.
        done.stderr = "".join(line for line in done.stderr.splitlines(keepends=True)
                              if not _SRUN_EXITED.match(line))
        return done

    def _pull_records(self, node: str) -> Path | None:
        """Where the server records when it pulled an image to ``node`` (None: a name unfit for a path)."""
        return self.state_dir / "images" / node if _NODE_NAME.fullmatch(node) else None
