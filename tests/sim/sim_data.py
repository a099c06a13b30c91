"""Where the tests find the shared public traces (see ``trainyard.sim.traces``)."""

from __future__ import annotations

from pathlib import Path

from trainyard.sim.traces import traces_dir

TRACES: Path = traces_dir()
OPENB = TRACES / "openb"
NODES = OPENB / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = OPENB / "openb_pod_list_default.csv"
REFERENCE = TRACES / "fgd_expected_results" / "analysis_allo_discrete.csv.gz"
PHILLY = TRACES / "philly" / "philly_jobs_pollux.csv"
