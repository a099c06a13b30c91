"""Time-sharing's rules in one place: when a running job's turn is over for a waiting one
(``SchedulerConfig.timeshare``; docs/scheduling.md).

Jobs of one VC and priority wait in order of least attained service (GPU-seconds over the
whole chain), as Tiresias orders them (Gu et al., NSDI'19), and a waiting job may suspend
a running suspendable one whose slice is over. Not for any running job with more service
than the waiting one, though:

* only one that has received ``turn_ratio`` times the waiting job's service: two jobs of
  similar service do not alternate every slice, each paying a checkpoint, where first come
  first served would finish one of them; the turns between two jobs grow geometrically
  (Tiresias reaches the same with levels of service, but a job then cannot take its turn
  from one of the same level however much more it has received);
* and only one that has received more than ``turn_floor``: a job is not suspended before
  it has had that much, so short jobs, the most of them, finish in one go — where jobs
  are of similar length (a VC's sweep of one model) suspending them at half way only
  delays them all, as round robin does.

Pure functions of the configuration, a job and the time: the scheduler's planner
(``preemption``) and the simulator's test of whether a cycle could decide anything
(``sim.queue``) use the same ones.
"""

from __future__ import annotations

from trainyard.scheduler.snapshot import RunningJob, SchedulerConfig


def slice_over(config: SchedulerConfig, running: RunningJob, now: float) -> bool:
    """Whether ``running`` may lose its turn at ``now`` at all: time-sharing is on, it is
    suspendable, guaranteed work, and has run a whole time slice since it last (re)started
    — so no job is suspended more than once per slice."""
    return (
        config.timeshare
        and running.suspendable
        and running.guaranteed
        and now - running.started_at >= config.time_slice
    )


def turn_threshold(config: SchedulerConfig, waiting_service: float) -> float:
    """The service (GPU-seconds) a running job must have received, beyond which a job that
    has received ``waiting_service`` may take its turn from it."""
    return max(config.turn_floor, config.turn_ratio * waiting_service)


def turn_over_for(config: SchedulerConfig, waiting_service: float, running: RunningJob, now: float) -> bool:
    """Whether a waiting job that has received ``waiting_service`` (of ``running``'s
    priority and VC, which the caller checks) may suspend ``running`` at ``now``."""
    return slice_over(config, running, now) and running.attained_at(now) > turn_threshold(config, waiting_service)
