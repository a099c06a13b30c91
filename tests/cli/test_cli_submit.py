"""`yard submit --dry-run`: what it says of the job as Trainyard will run it."""

from __future__ import annotations

from collections.abc import Callable

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def test_a_dry_run_says_the_image_each_role_is_pulled_as(yard: Yard, tmp_path) -> None:
    """A trial: `--dry-run` showed `image: python:3.11-slim` as written, though the job runs
    (and is pulled) as docker.io/library/python:3.11-slim, as the portal shows it."""
    job = tmp_path / "job.yaml"
    job.write_text("name: img\nimage: python:3.11-slim\ntaskRoles:\n  w:\n    commands: ['true']\n"
                   "  bare:\n    image: registry.example.org/team/trainer:2\n    commands: ['true']\n")
    code, out, err = yard("submit", str(job), "--dry-run", "--no-workdir")
    assert code == 0, err
    assert out.splitlines()[-2:] == ["# role w runs in image docker.io/library/python:3.11-slim",
                                     "# role bare runs in image registry.example.org/team/trainer:2"]
