"""The public traces the tests replay: those shipped with the package (``trainyard.sim.traces``)."""

from __future__ import annotations

from pathlib import Path

from trainyard.sim.traces import FGD_REFERENCE, OPENB_NODES, PHILLY_JOBS, trace_file

NODES: Path = trace_file(*OPENB_NODES)
DEFAULT_PODS = trace_file("openb", "openb_pod_list_default.csv")
GPUSPEC25_PODS = trace_file("openb", "openb_pod_list_gpuspec25.csv")
REFERENCE = trace_file(*FGD_REFERENCE)
PHILLY = trace_file(*PHILLY_JOBS)
