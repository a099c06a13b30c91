"""The traces shipped with the package, the names ``yard sim`` takes for them, and
``$TRAINYARD_TRACES`` for another folder."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from trainyard.sim.jobs import load_philly, parse_cluster
from trainyard.sim.openb import load_nodes
from trainyard.sim.traces import (
    OPENB_NODES,
    PHILLY_JOBS,
    SHIPPED,
    open_text,
    openb_variants,
    resolve,
    trace_file,
    trace_stem,
)

PAPER_POD_LISTS = [
    "cpu0",
    "cpu037",
    "cpu050",
    "cpu072",
    "cpu100",
    "cpu200",
    "cpu235",
    "cpu300",
    "default",
    "gpushare20",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpuspec05",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "multigpu20",
    "multigpu30",
    "multigpu40",
]


@pytest.fixture(autouse=True)
def only_the_shipped_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINYARD_TRACES", raising=False)


def test_the_shipped_traces_are_compressed_small_and_each_named_in_their_readme() -> None:
    files = sorted(p for p in SHIPPED.rglob("*") if p.is_file())
    data = [p for p in files if p.name != "README.md"]
    assert data and all(p.suffix == ".gz" for p in data), "every trace is shipped gzip-compressed"
    assert sum(p.stat().st_size for p in files) < 10 * 1024 * 1024
    readme = (SHIPPED / "README.md").read_text()
    rows = [_shell_pattern(name) for name in re.findall(r"^\| `([^`]+)`", readme, re.MULTILINE)]
    for path in data:
        relative = path.relative_to(SHIPPED).as_posix()
        named = any(row.fullmatch(relative) for row in rows)
        assert named, f"{relative} is shipped but its source and licence are not in {SHIPPED / 'README.md'}"
    for fact in ("Apache-2.0", "CC-BY-4.0", "MIT", "USENIX ATC'23", "USENIX ATC'19", "OSDI'21"):
        assert fact in readme


def _shell_pattern(name: str) -> re.Pattern[str]:
    """A README row's file name as the shell reads it: ``{a,b}`` and ``{1..8}`` alternatives,
    ``*`` any part of one name."""
    out = []
    for part in re.split(r"(\{[^}]*\})", name):
        if part.startswith("{"):
            first, dots, last = part[1:-1].partition("..")
            choices = [str(i) for i in range(int(first), int(last) + 1)] if dots else part[1:-1].split(",")
            out.append("(" + "|".join(_shell_pattern(c).pattern for c in choices) + ")")
        else:
            out.append("[^/]*".join(re.escape(piece) for piece in part.split("*")))
    return re.compile("".join(out))


def test_every_pod_list_of_the_fgd_paper_is_shipped_and_readable_compressed() -> None:
    assert openb_variants() == PAPER_POD_LISTS
    path = resolve("--pods", "openb:gpushare40")
    assert (
        path == SHIPPED / "openb" / "openb_pod_list_gpushare40.csv.gz"
        and trace_stem(path) == "openb_pod_list_gpushare40"
    )
    with open_text(path) as f:
        assert f.readline().startswith("name,cpu_milli,memory_mib,num_gpu,gpu_milli")


def test_names_resolve_to_the_shipped_files_and_paths_to_themselves(tmp_path: Path) -> None:
    assert resolve("--nodes", "openb") == trace_file(*OPENB_NODES) == SHIPPED / "openb/openb_node_list_gpu_node.csv.gz"
    assert resolve("--pods", "openb") == SHIPPED / "openb/openb_pod_list_default.csv.gz"
    assert resolve("--cluster", "philly") == SHIPPED / "philly/cluster_machine_list.csv.gz"
    assert resolve("--vc-quotas", "philly") == SHIPPED / "philly/philly_vc_nodes_helios_artifact.csv.gz"
    mine = tmp_path / "nodes.csv"
    mine.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1024,2,A10\n")
    assert resolve("--nodes", str(mine)) == mine
    assert [len(n.gpus) for n in load_nodes(resolve("--nodes", str(mine)))] == [2]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        pytest.param(
            "--nodes",
            "alibaba",
            "--nodes: unknown trace 'alibaba'; use openb, or an openb node list CSV "
            "(./alibaba for a file of that name)",
            id="an unknown name lists the names",
        ),
        pytest.param(
            "--pods",
            "openb:gpushare45",
            "--pods: no openb pod list 'gpushare45'; choose one of: openb, openb:cpu0,",
            id="an unknown pod list lists the pod lists",
        ),
        pytest.param(
            "--cluster",
            "nodes.csv",
            "--cluster: no file nodes.csv; give NxG (e.g. 92x8) or a machine list CSV, or a name: philly",
            id="a missing file says what else the option takes",
        ),
    ],
)
def test_what_names_nothing_is_refused_naming_the_option_and_the_choices(option: str, value: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        resolve(option, value)
    assert str(refused.value).startswith(says)


def test_trainyard_traces_names_another_folder_searched_first_plain_or_gzipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "philly").mkdir()
    (tmp_path / "philly" / "philly_jobs_pollux.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,60,1,60,vc1\n"
    )
    (tmp_path / "openb").mkdir()
    with gzip.open(tmp_path / "openb" / "openb_pod_list_mine.csv.gz", "wt") as f:
        f.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,100,1,500\n")
    monkeypatch.setenv("TRAINYARD_TRACES", str(tmp_path))
    assert trace_file(*PHILLY_JOBS) == tmp_path / "philly" / "philly_jobs_pollux.csv"
    assert len(load_philly(trace_file(*PHILLY_JOBS))) == 1
    assert resolve("--pods", "openb:mine") == tmp_path / "openb" / "openb_pod_list_mine.csv.gz"
    # What the folder lacks still comes from the shipped traces.
    assert "mine" in openb_variants() and "default" in openb_variants()
    assert sum(len(n.gpus) for n in parse_cluster("philly")) == 2490


def test_a_trace_found_nowhere_says_where_it_was_looked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_TRACES", str(tmp_path))
    with pytest.raises(FileNotFoundError) as missing:
        trace_file("pai2020", "pai_job_table.csv")
    assert f"no trace file pai2020/pai_job_table.csv[.gz] in {tmp_path} or {SHIPPED}" in str(missing.value)
    assert "set TRAINYARD_TRACES to a folder that holds it" in str(missing.value)
