"""``yard sim placement`` and ``yard sim queue`` end to end, on the shared traces."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from deadlines import scaled
from sim_data import DEFAULT_PODS, NODES

from trainyard.cli.main import main


@pytest.mark.slow  # replays the default pod list at six arrival levels
def test_sim_placement_writes_the_curve_the_plot_and_a_json_summary(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "placement", "--nodes", "openb", "--pods", "openb", "--policy", "bestfit",
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
                "gpu_utilisation", "preemptions", "vc_avg_queueing_h", "sharing", "suspensions",
                "suspensions_per_job_hour", "lost_gpu_hours"):
        assert key in report
    assert (report["suspendable"], report["suspend_cost_s"], report["time_slice_s"]) == ("all", 120.0, 1800.0)
    assert report["gpus"] == 128 and report["jobs"] > 0
    assert all({"shared_avg_queueing_h", "alone_avg_queueing_h"} <= set(row) for row in report["sharing"].values())


def test_sim_queue_offers_exactly_the_suspendable_choices_and_shows_the_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["sim", "queue", "--suspendable", "some"])
    assert caught.value.code == 2
    assert "invalid choice: 'some' (choose from 'all', 'half', 'none')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sim", "queue", "--help"])
    assert "checkpoint save and restore (default 120)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("flags", "message"), [
    (["--suspend-cost", "-1"], "--suspend-cost must be >= 0 seconds"),
    (["--time-slice", "nan"], "--time-slice must be >= 0 seconds"),
])
def test_sim_queue_refuses_time_sharing_options_that_make_no_sense(
        flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "queue", "--cluster", "16x8", "--start", "2017-10-09", "--end", "2017-10-09T01:00",
                 *flags]) == 2
    assert message in capsys.readouterr().err


def test_the_report_draws_every_pod_list_in_one_grid(tmp_path: Path) -> None:
    from trainyard.sim.plots import plot_grid

    curve = [None] * 80 + [float(k) for k in range(80, 101)]
    panels = [(f"list{i}", [("fgd", curve), ("default", curve)]) for i in range(5)]  # 5: a row half empty
    plot_grid(panels, tmp_path / "grid.png")
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"


def test_sim_placement_takes_trace_names_and_lists_them_when_one_is_wrong(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _tiny_traces(tmp_path, monkeypatch)
    code = main(["sim", "placement", "--nodes", str(tmp_path / "nodes.csv"), "--pods", "openb:tiny", "--seeds", "1",
                 "--no-plot", "--out", str(tmp_path), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["capacity_gpus"] == 4 and summary["csv"].endswith("placement_openb_pod_list_tiny_default.csv")
    code = main(["sim", "placement", "--nodes", "openb", "--pods", "openb:gpushare45", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "yard sim placement: --pods: no openb pod list 'gpushare45'; choose one of:" in err
    assert "openb:gpushare40" in err and "Traceback" not in err


def test_without_matplotlib_a_placement_run_still_gives_its_numbers_and_says_why_there_is_no_plot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`pip install .` has no matplotlib: the run used to fail (exit 2) after its simulation."""
    _tiny_traces(tmp_path, monkeypatch)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails, as when not installed
    monkeypatch.delitem(sys.modules, "trainyard.sim.plots", raising=False)
    code = main(["sim", "placement", "--nodes", str(tmp_path / "nodes.csv"), "--pods", "openb:tiny", "--seeds", "1",
                 "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0 and "allocated %" in out and (tmp_path / "placement_openb_pod_list_tiny_default.csv").exists()
    assert "no plot: it needs matplotlib (pip install 'trainyard[sim]'" in err
    assert not list(tmp_path.glob("*.png"))


def test_sim_queue_replays_the_shipped_philly_machines_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "queue", "--trace", "philly", "--cluster", "philly", "--start", "2017-10-09",
                 "--end", "2017-10-09T01:00", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["gpus"] == 2490
    assert main(["sim", "queue", "--cluster", "philadelphia"]) == 2
    assert "--cluster: unknown trace 'philadelphia'; use philly, or NxG" in capsys.readouterr().err


def _tiny_traces(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4-GPU node list and a 5-pod openb pod list ``openb:tiny`` in ``$TRAINYARD_TRACES``."""
    (folder / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,A10\n"
                                      "n2,64000,262144,2,A10\n")
    (folder / "openb").mkdir()
    (folder / "openb" / "openb_pod_list_tiny.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},1000,1024,1,500\n" for i in range(5)))
    monkeypatch.setenv("TRAINYARD_TRACES", str(folder))


QUEUE_4H = ["sim", "queue", "--trace", "philly", "--cluster", "16x8", "--start", "2017-10-09", "--end",
            "2017-10-09T04:00"]


def _yard_on_a_terminal(argv: list[str], tmp_path: Path) -> tuple[str, str]:
    """Run ``yard ARGV`` with its stderr on a pseudo-terminal: (what the terminal showed, stdout)."""
    import os
    import pty
    import subprocess
    import sys

    controller, terminal = pty.openpty()
    stdout = tmp_path / "stdout"
    with open(stdout, "wb") as out:
        child = subprocess.Popen([sys.executable, "-m", "trainyard.cli.main", *argv], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=terminal)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert child.wait(timeout=scaled(60)) == 0, shown.decode(errors="replace")
    return shown.decode(), stdout.read_text()


def test_a_long_run_shows_a_progress_bar_on_a_terminal_and_erases_it_before_the_report(tmp_path: Path) -> None:
    shown, report = _yard_on_a_terminal(QUEUE_4H, tmp_path)
    assert "\rreplaying" in shown and "[" + "#" * 30 + "] 100%" in shown, shown
    assert "  0%" in shown  # drawn from the start, not only at the end
    assert shown.endswith("\r"), "the bar is erased, so the report starts on a clean line"
    assert report.startswith("policy default on 16x8 (128 GPUs)")


def test_with_json_a_terminal_shows_no_progress_bar(tmp_path: Path) -> None:
    shown, report = _yard_on_a_terminal([*QUEUE_4H, "--json"], tmp_path)
    assert shown == ""
    assert json.loads(report)["gpus"] == 128


def test_a_placement_run_prints_each_seed_above_its_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tiny_traces(tmp_path, monkeypatch)  # the child inherits TRAINYARD_TRACES
    shown, report = _yard_on_a_terminal(["sim", "placement", "--nodes", str(tmp_path / "nodes.csv"), "--pods",
                                         "openb:tiny", "--seeds", "1-2", "--no-plot", "--out", str(tmp_path)],
                                        tmp_path)
    lines = shown.replace("\r\n", "\n").split("\n")
    seeds = [line.rpartition("\r")[2] for line in lines if "seed " in line]
    assert [s.split(":")[0] for s in seeds] == ["seed 1", "seed 2"], shown
    assert "placing openb_pod_list_tiny, 2 seed(s) [" in shown
    assert "on openb_pod_list_tiny, 2 seed(s), 4 GPUs" in report


def test_off_a_terminal_a_run_draws_no_bar(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(QUEUE_4H) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("policy default on 16x8")


def test_the_cli_stops_quietly_when_its_reader_goes_away() -> None:
    import subprocess
    import sys

    flood = ("import sys; from trainyard.cli import main as m; "
             "m._main = lambda argv: [print('x' * 1000) for _ in range(10_000)] and 0; sys.exit(m.main([]))")
    done = subprocess.run(f"{sys.executable} -c \"{flood}\" | head -c 10", shell=True, capture_output=True,
                          text=True, timeout=scaled(60))
    assert done.stdout == "x" * 10 and done.stderr == ""


def test_sim_placement_refuses_a_tune_that_is_no_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "placement", "--nodes", str(NODES), "--pods", str(DEFAULT_PODS), "--tune", "0",
                 "--out", str(tmp_path)])
    assert code == 2 and "--tune must be > 0" in capsys.readouterr().err
