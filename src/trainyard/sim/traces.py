"""Where the simulator's public traces are, the short names ``yard sim`` takes for them, and
how a trace file is opened.

The traces the simulator and its tests replay ship inside the package
(``sim/data/traces``, gzip-compressed; their sources, licences and citations are in the
README.md there), so a clone or an installed package needs nothing beside it.
``$TRAINYARD_TRACES`` names another folder laid out the same way (``openb/…``,
``philly/…``, files plain or ``.gz``): a trace is looked up there first, then among the
shipped ones. Every reader of a trace opens it with ``open_text``, which decompresses
``.gz`` transparently, so a user's own CSV reads the same plain or gzipped.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

SHIPPED = Path(__file__).resolve().parent / "data" / "traces"

# The names each option of ``yard sim`` takes, as (folder, file) under a traces folder;
# and what else the option takes, for the error that lists the choices.
OPENB_NODES = ("openb", "openb_node_list_gpu_node.csv")
PHILLY_JOBS = ("philly", "philly_jobs_pollux.csv")
PHILLY_MACHINES = ("philly", "cluster_machine_list.csv")
PHILLY_VC_NODES = ("philly", "philly_vc_nodes_helios_artifact.csv")
FGD_REFERENCE = ("fgd_expected_results", "analysis_allo_discrete.csv")  # the FGD authors' results
NAMES: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "--nodes": {"openb": OPENB_NODES},
    "--cluster": {"philly": PHILLY_MACHINES},
    "--vc-quotas": {"philly": PHILLY_VC_NODES},
}
OTHERWISE = {
    "--nodes": "an openb node list CSV",
    "--pods": "an openb pod list CSV",
    "--cluster": "NxG (e.g. 92x8) or a machine list CSV",
    "--vc-quotas": "demand, or a vc,node num CSV",
}
OPENB_PODS = "openb_pod_list_"


def trace_roots() -> list[Path]:
    """The folders a trace is looked up in, in order."""
    configured = os.environ.get("TRAINYARD_TRACES")
    return ([Path(configured)] if configured else []) + [SHIPPED]


def trace_file(folder: str, name: str) -> Path:
    """A trace file by its folder and CSV name (``"philly", "philly_jobs_pollux.csv"``): the
    first of ``NAME`` or ``NAME.gz`` in ``trace_roots()``; FileNotFoundError saying where
    it looked otherwise."""
    roots = trace_roots()
    for root in roots:
        for candidate in (root / folder / name, root / folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(
        f"no trace file {folder}/{name}[.gz] in {' or '.join(str(r) for r in roots)}; "
        "set TRAINYARD_TRACES to a folder that holds it, or give the file's path"
    )


def open_text(path: Path | str) -> TextIO:
    """A CSV opened for reading as text, decompressed on the fly when its name ends in .gz."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


def trace_stem(path: Path) -> str:
    """``openb_pod_list_gpushare40`` for ``…/openb_pod_list_gpushare40.csv[.gz]``."""
    return path.name.removesuffix(".gz").removesuffix(".csv")


def openb_variants() -> list[str]:
    """The openb pod lists there are (``default``, ``gpushare40``, …), in every traces folder."""
    found = set()
    for root in trace_roots():
        for path in (root / "openb").glob(f"{OPENB_PODS}*.csv*"):
            if path.name.endswith((".csv", ".csv.gz")):
                found.add(trace_stem(path).removeprefix(OPENB_PODS))
    return sorted(found)


def _is_name(value: str) -> bool:
    # A path has a folder or a suffix; ``./openb`` reads a file that happens to be called so.
    return "/" not in value and "." not in value


def resolve(option: str, value: str) -> Path:
    """What ``value`` of a ``yard sim`` option names: a shipped trace (``openb``,
    ``openb:gpushare40``, ``philly``) or a file; ValueError naming the option and the
    choices when it is neither."""
    if not _is_name(value):
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"{option}: no file {value}; give {OTHERWISE[option]}, or a name: {_choices(option)}")
        return path
    if option == "--pods":
        source, _, variant = value.partition(":")
        if source == "openb":
            variant = variant or "default"
            if variant not in openb_variants():
                raise ValueError(f"{option}: no openb pod list {variant!r}; choose one of: {_choices(option)}")
            return trace_file("openb", f"{OPENB_PODS}{variant}.csv")
    elif value in NAMES[option]:
        return trace_file(*NAMES[option][value])
    raise ValueError(
        f"{option}: unknown trace {value!r}; use {_choices(option)}, or {OTHERWISE[option]} "
        f"(./{value} for a file of that name)"
    )


def _choices(option: str) -> str:
    if option == "--pods":
        return ", ".join(["openb", *(f"openb:{v}" for v in openb_variants())])
    return ", ".join(NAMES[option])
