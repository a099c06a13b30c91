"""``yard sim placement`` and ``yard sim queue`` end to end, on the shared traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_data import DEFAULT_PODS, NODES

from trainyard.cli.main import main


@pytest.mark.slow  # replays the default pod list at six arrival levels
def test_sim_placement_writes_the_curve_the_plot_and_a_json_summary(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "placement", "--nodes", str(NODES), "--pods", str(DEFAULT_PODS), "--policy", "bestfit",
                 "--seeds", "42", "--tune", "1.3", "--out", str(tmp_path), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert list(summary["gpu_alloc_pct"]) == ["50", "80", "90", "100", "110", "130"]
    assert summary["gpu_alloc_pct"]["50"] == pytest.approx(50, abs=0.5)
    assert summary["gpu_alloc_pct"]["100"] <= 100 and summary["scorer"] == "bestfit-cpu-gpu"
    rows = Path(summary["csv"]).read_text().splitlines()
    assert rows[0].startswith("arrived_pct,gpu_alloc_pct,frag_gpu_pct") and len(rows) == 1 + 131
    assert Path(summary["png"]).read_bytes()[:4] == b"\x89PNG"


def test_sim_placement_refuses_an_unknown_policy_with_the_choices(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "placement", "--nodes", str(NODES), "--pods", str(DEFAULT_PODS), "--policy", "magic",
                 "--out", str(tmp_path)])
    assert code == 2
    assert "unknown policy 'magic'; choose one of: random, dotprod" in capsys.readouterr().err


def test_sim_queue_reports_jct_queueing_utilisation_and_the_sharing_test(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "queue", "--trace", "philly", "--cluster", "16x8", "--policy", "default",
                 "--start", "2017-10-09", "--end", "2017-10-09T04:00", "--vc-quotas", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("avg_jct_h", "median_jct_h", "p99_jct_h", "avg_queueing_h", "p99_queueing_h", "makespan_h",
                "gpu_utilisation", "preemptions", "vc_avg_queueing_h", "sharing"):
        assert key in report
    assert report["gpus"] == 128 and report["jobs"] > 0
    assert all({"shared_avg_queueing_h", "alone_avg_queueing_h"} <= set(row) for row in report["sharing"].values())


def test_the_report_draws_every_pod_list_in_one_grid(tmp_path: Path) -> None:
    from trainyard.sim.plots import plot_grid

    curve = [None] * 80 + [float(k) for k in range(80, 101)]
    panels = [(f"list{i}", [("fgd", curve), ("default", curve)]) for i in range(5)]  # 5: a row half empty
    plot_grid(panels, tmp_path / "grid.png")
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"


def test_sim_queue_says_how_to_find_the_traces_when_they_are_not_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINYARD_TRACES", str(tmp_path))  # as an installed package without the variable
    assert main(["sim", "queue", "--trace", "philly", "--cluster", "4x8"]) == 2
    assert "set TRAINYARD_TRACES to the folder of the shared traces" in capsys.readouterr().err


def test_the_cli_stops_quietly_when_its_reader_goes_away() -> None:
    import subprocess
    import sys

    flood = ("import sys; from trainyard.cli import main as m; "
             "m._main = lambda argv: [print('x' * 1000) for _ in range(10_000)] and 0; sys.exit(m.main([]))")
    done = subprocess.run(f"{sys.executable} -c \"{flood}\" | head -c 10", shell=True, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout == "x" * 10 and done.stderr == ""


def test_sim_placement_refuses_a_tune_that_is_no_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "placement", "--nodes", str(NODES), "--pods", str(DEFAULT_PODS), "--tune", "0",
                 "--out", str(tmp_path)])
    assert code == 2 and "--tune must be > 0" in capsys.readouterr().err
