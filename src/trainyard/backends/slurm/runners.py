"""The two fixed shell scripts every Slurm job of Trainyard runs; they hold no job data.

A job's strings (its name, env values, commands) never appear in a batch script or on
an ``#SBATCH`` line: the batch script is this fixed text, its per-task arguments are
numbers and validated paths passed as argv, and each task reads its env (NUL-separated
``NAME=value`` pairs, handed to ``env`` as literal arguments) and its commands
(``script.sh``, run by bash exactly as written) from files in its task directory.
"""

from __future__ import annotations

# Usage: gang-runner.sh TASK_RUNNER HET [GROUP CPUS MEM_MB GRES TASK_DIR]...  (GRES: gpu:2, gpu:a100:1, none)
GANG_RUNNER = r"""#!/bin/bash
# Trainyard's batch script for one gang (written by the Slurm backend; holds no job data).
# Starts one step per task, inside the task's own component (node) of the allocation and
# with the task's own CPUs, memory and GPUs, then waits for every step.
set -u
runner="$1"
het="$2"
shift 2
while [ "$#" -ge 5 ]; do
    group="$1" cpus="$2" mem="$3" gres="$4" dir="$5"
    shift 5
    step=(srun --nodes=1 --ntasks=1 --cpus-per-task="$cpus" --mem="$mem" --gres="$gres" --kill-on-bad-exit=0
          --output="$dir/output.log" --open-mode=append)
    if [ "$het" = 1 ]; then step+=(--het-group="$group"); fi
    (
        "${step[@]}" /bin/bash "$runner" "$dir"
        rc=$?
        # The task runner records the task's own status; srun's failure only stands in
        # when the task runner could not record one (the step failed to start, or was
        # killed). srun's 0 proves nothing about the task: then Slurm's state decides.
        if [ "$rc" -ne 0 ] && [ ! -e "$dir/exit" ]; then
            printf '%s\n' "$rc" > "$dir/exit.srun.$$" && mv -n "$dir/exit.srun.$$" "$dir/exit"
            rm -f "$dir/exit.srun.$$"
        fi
    ) &
done
wait
"""

# Usage: task-runner.sh TASK_DIR
TASK_RUNNER = r"""#!/bin/bash
# Runs one Trainyard task inside its Slurm step (written by the Slurm backend; holds no job data).
# The task's env is TASK_DIR/env, NUL-separated NAME=value pairs passed to env(1) as
# arguments (never evaluated); its commands are TASK_DIR/script.sh, run by bash as written.
# Nothing else of this step's environment reaches the task but Slurm's own variables, as
# with --export=NONE (SLURM_*, SLURMD_NODENAME, and PMI_*/PMIX_* for MPI launchers): the
# env file holds the whole clean environment.
set -u
dir="$1"
cd "$dir/work" || exit 1
mapfile -d '' -t assignments < "$dir/env" || exit 1
slurm=()
for name in "${!SLURM@}" "${!PMI@}"; do slurm+=("$name=${!name}"); done
# Slurm sets CUDA_VISIBLE_DEVICES to the GPUs of this step; pinning comes last, so that
# a job's env can never widen its own GPU allocation. No GPUs: hide them all.
if [ -n "${SLURM_STEP_GPUS-}" ] && [ -n "${CUDA_VISIBLE_DEVICES-}" ]; then
    pinning=("CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES" "NVIDIA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES")
else
    pinning=("CUDA_VISIBLE_DEVICES=" "NVIDIA_VISIBLE_DEVICES=none")
fi
# A stop (scancel --signal=TERM) reaches the task's processes directly; this shell only
# outlives it to record the task's exit status. Bash runs a trap only after the
# foreground command has ended, so $? below is always the task's own status (a task in
# the background and `wait` would lose it when the signal interrupts the wait).
trap ':' TERM
env -i -- "${slurm[@]}" "${assignments[@]}" "${pinning[@]}" CUDA_DEVICE_ORDER=PCI_BUS_ID /bin/bash "$dir/script.sh"
rc=$?
printf '%s\n' "$rc" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
exit "$rc"
"""
