"""How long the monitoring history is kept, at which resolutions (the ``monitor_retention``
setting).

A retention is a list of tiers, finest first: raw samples kept for a while, then averages
over ``step`` seconds kept longer. Written as ``raw:1h,1m:1d,10m:30d`` (the default): raw
samples for an hour, per-minute averages for a day, per-10-minute averages for 30 days.
``monitor/history.py`` downsamples and prunes by it; the window queries read the finest
tier that still covers a window.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.core.durations import format_duration, parse_duration

DEFAULT_MONITOR_RETENTION = "raw:1h,1m:1d,10m:30d"
MAX_TIERS = 6
MAX_STEP_SECONDS = 86400


@dataclass(frozen=True)
class RetentionTier:
    step: int  # seconds one row covers; 0: raw samples
    keep_seconds: float  # rows older than this are removed

    def __str__(self) -> str:
        return f"{'raw' if self.step == 0 else format_duration(self.step)}:{format_duration(self.keep_seconds)}"


def parse_retention(text: str) -> tuple[RetentionTier, ...]:
    """The tiers of ``text`` (``raw:1h,1m:1d,10m:30d``), checked; ValueError says what is wrong."""
    tiers = []
    for part in text.split(","):
        step_text, sep, keep_text = part.strip().partition(":")
        if not sep:
            raise ValueError(f"{part.strip()!r}: write each tier as RESOLUTION:KEEP, e.g. 1m:1d")
        step = 0.0 if step_text.strip() == "raw" else parse_duration(step_text)
        if step != int(step):
            raise ValueError(f"{part.strip()!r}: a resolution is a whole number of seconds")
        tiers.append(RetentionTier(int(step), parse_duration(keep_text)))
    check_retention(tiers)
    return tuple(tiers)


def check_retention(tiers: list[RetentionTier]) -> None:
    """The rules that keep downsampling exact and the history bounded."""
    if not tiers or tiers[0].step != 0:
        raise ValueError("the first tier must be raw samples, e.g. raw:1h")
    if len(tiers) > MAX_TIERS:
        raise ValueError(f"at most {MAX_TIERS} tiers")
    for tier in tiers:
        if tier.keep_seconds <= 0:
            raise ValueError(f"{tier}: keep each tier for more than 0 seconds")
        if tier.step > MAX_STEP_SECONDS:
            raise ValueError(f"{tier}: a resolution is at most 1d")
    for finer, coarser in zip(tiers, tiers[1:], strict=False):
        if coarser.step <= finer.step or (finer.step and coarser.step % finer.step):
            raise ValueError(f"{coarser}: each resolution must be a multiple of the one before ({finer}), "
                             "so that its averages are made of whole rows of it")
        # A bucket is averaged from the finer rows once it is complete: they must outlive it.
        if finer.keep_seconds < 2 * coarser.step:
            raise ValueError(f"{finer}: keep it at least twice the next resolution ({coarser}), so that "
                             "its rows are averaged before they go")
        if coarser.keep_seconds < finer.keep_seconds:
            raise ValueError(f"{coarser}: keep a coarser tier at least as long as a finer one ({finer})")


DEFAULT_RETENTION_TIERS = parse_retention(DEFAULT_MONITOR_RETENTION)
