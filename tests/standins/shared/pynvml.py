"""``pynvml`` for another process, served by THE NVML stand-in (``tests/standins/nvml.py``).

``FakeNvml.share`` names this directory in ``PYTHONPATH``, so that a process the test
starts (the Slurm task sampler, inside a job's step) imports this module as ``pynvml``.
It loads the real nvidia-ml-py (its constants and error classes are the real ones), puts
it in its own place in ``sys.modules`` (what ``import pynvml`` then returns), and has it
answer from the fake machine the test shared.
"""

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_TESTS = _HERE.parents[1]

_spec = importlib.machinery.PathFinder.find_spec(
    "pynvml", [p for p in sys.path if Path(p or ".").resolve() != _HERE])
if _spec is None or _spec.loader is None:
    raise ImportError("the NVML stand-in needs the real nvidia-ml-py installed for " + sys.executable)
_real = importlib.util.module_from_spec(_spec)
sys.modules["pynvml"] = _real
_spec.loader.exec_module(_real)

sys.path.insert(0, str(_TESTS))
from standins.nvml import STATE_VARIABLE, FakeNvml  # noqa: E402

FakeNvml.serve(_real, Path(os.environ[STATE_VARIABLE]))
