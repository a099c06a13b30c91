"""The simulator's defaults that ``yard sim``'s options show: constants only, no imports, so
that the command line can name them without loading the simulator."""

SUSPEND_COST = 120.0  # seconds of a suspended job's GPUs lost to saving and restoring its checkpoint
SUSPENDABLE = ("all", "half", "none")  # which jobs can be suspended: all, even job ids, none
# Seconds an elastic job's resize costs its progress: a restart from its checkpoint. Pollux's
# simulator charges a re-allocation 30 s; a real DDP job's restart takes about that.
RESIZE_COST = 30.0
ELASTIC = ("off", "asked", "half", "least")  # whether jobs are elastic, and from which minimum
