"""A job directory's disk use as the API shows it (``services/jobdirs``): briefly cached while
the job runs, but never a figure measured before the job ended once it has."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from trainyard.backends.base import DirUsage
from trainyard.backends.jobdirs import measure
from trainyard.core.clock import FakeClock
from trainyard.core.states import JobState
from trainyard.services.jobdirs import JobDirUsage


class Dirs:
    """A backend with job directories (``JobDirectories``), one folder per job."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def job_dir(self, job_id: int) -> Path:
        return self.root / str(job_id)

    def job_dir_usage(self, job_id: int) -> DirUsage | None:
        return measure(self.job_dir(job_id))

    def job_dir_ids(self) -> list[int]:
        return [int(p.name) for p in self.root.iterdir()]

    def remove_job_dir(self, job_id: int) -> None:
        raise NotImplementedError


def test_the_figure_is_cached_while_the_job_runs_and_measured_again_once_it_ended(tmp_path: Path) -> None:
    clock, dirs = FakeClock(), Dirs(tmp_path)
    dirs.job_dir(7).mkdir()
    usage = JobDirUsage(dirs, clock, retention_seconds=3600)  # type: ignore[arg-type]
    assert usage.view(7, JobState.RUNNING, None).files == 0
    (dirs.job_dir(7) / "last-words").write_text("x" * 1000)
    clock.advance(0.5)
    assert usage.view(7, JobState.RUNNING, None).files == 0  # within the cache's time: the same figure
    ended = clock.now()
    clock.advance(0.1)
    view = usage.view(7, JobState.SUCCEEDED, ended)  # what the job wrote last counts
    assert (view.files, view.removeAfter) == (1, ended + timedelta(hours=1))
