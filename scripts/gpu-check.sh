#!/usr/bin/env bash
# Trainyard on a machine with NVIDIA GPUs, end to end: what CI cannot run, having no GPU.
#
#   scripts/gpu-check.sh [REPORT_DIR]        (from the checkout, Trainyard installed)
#
# Starts `yard up` on the machine's own GPUs (found through NVML: no --local-gpus) in a
# scratch home, tasks under the server's own account, then checks, printing what it sees:
#   1. the node and GPUs Trainyard found (model, memory) and NVML's view of them;
#   2. a PyTorch job on one GPU: it sees exactly that device and computes on it;
#   3. two half-GPU jobs sharing one device, each told the same device;
#   3b. enforced shares (NVIDIA MPS, issue 36), where nvidia-cuda-mps-control is installed:
#      two quarter-GPU jobs on one device, each an MPS client with its memory limit; the one
#      that allocates past its share fails alone with CUDA's out-of-memory error while the
#      other's result equals the same computation run alone; a quarter-GPU job's matmul
#      throughput is about a quarter of a whole GPU's (gpu_share_threads on; 0.12 to 0.50);
#      no MPS daemon is left after the jobs. Without MPS: yard up must say shares are not
#      enforced. (The MPS checks were written without a GPU: never run on one yet.)
#   4. examples/suspend-resume's PyTorch loop on the GPU (--device cuda), suspended with
#      `yard suspend`, resumed with `yard resume`, ending bit for bit as an uninterrupted run;
#   5. NVML monitoring: /metrics has the GPUs' utilization and memory, and the job's own;
#   6. containers on the GPU (CDI), where Podman and the NVIDIA Container Toolkit are here.
# Not covered: Slurm's MPS path (slurm/mpsstep.py), which needs a Slurm node with a GPU and
# per-user accounts. Its check would run 3b's two quarter jobs there and add: one daemon per
# user per device, as the account, in the trainyard-mps cgroup, its CUDA_VISIBLE_DEVICES the
# UUID that nvidia-smi gives for the step's SLURM_STEP_GPUS; the task's CUDA sees one device
# (its UUID) and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT applies to it; a client that sets another
# device in CUDA_VISIBLE_DEVICES reaches none; after scancel -s KILL the keeper quits the daemon.
# Exits non-zero at the first check that fails; REPORT_DIR gets the server's log.
# Written for the first session lent a GPU; not yet run on one (none was lent when it was
# written), so expect to fix a detail or two the first time.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
report=${1:-$(mktemp -d)}
mkdir -p "$report"
export TRAINYARD_HOME
TRAINYARD_HOME=$(mktemp -d /tmp/yard-gpu-check.XXXXXX)
chmod 755 "$TRAINYARD_HOME"
port=${TRAINYARD_CHECK_PORT:-18642}
python=$(command -v python3)

step() { printf '\n=== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

step "GPUs as the driver sees them"
nvidia-smi -L || fail "nvidia-smi: no NVIDIA driver here"

step "yard up (NVML, no --local-gpus), home $TRAINYARD_HOME"
TRAINYARD_GPU_SHARE_THREADS=true \
    yard up --port "$port" --task-accounts server --task-sandbox none > "$report/yard-up.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    [[ -f $TRAINYARD_HOME/client.json ]] && yard nodes > /dev/null 2>&1 && break
    kill -0 $server 2>/dev/null || { cat "$report/yard-up.log"; fail "yard up ended"; }
    sleep 0.5
done
sed -n '1,40p' "$report/yard-up.log"
yard nodes
yard nodes | grep -q "simulated" && fail "the GPUs are simulated: NVML found none"

submit() {  # a job file on stdin; prints the job's id
    yard submit - | sed -n 's/^submitted job \([0-9]*\).*/\1/p'
}

step "a PyTorch job on one GPU"
one=$(submit <<EOF
name: gpu-one
taskRoles:
  main:
    resourcePerInstance: {gpu: 1, cpu: 2, memoryMB: 8192}
    commands:
      - echo "CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES"
      - >-
        $python -c "import torch; n = torch.cuda.device_count(); assert n == 1, n;
        a = torch.randn(4096, 4096, device='cuda'); s = float((a @ a).sum());
        print('torch', torch.__version__, 'sees', n, 'GPU:', torch.cuda.get_device_name(0), 'matmul ok', s == s)"
EOF
)
yard wait "$one" || { yard job "$one"; yard logs "$one"; fail "the one-GPU job"; }
yard logs "$one"
yard logs "$one" | grep -q "sees 1 GPU" || fail "the job did not see its one GPU"

step "two half-GPU jobs on one device"
half() {
    submit <<EOF
name: gpu-half-$1
taskRoles:
  main:
    resourcePerInstance: {gpu: 0.5, cpu: 1, memoryMB: 4096}
    commands:
      - echo "CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES"
      - $python -c "import torch; x = torch.ones(1 << 20, device='cuda'); print('half', int(x.sum()))"
      - sleep 5
EOF
}
a=$(half a)
b=$(half b)
yard wait "$a" && yard wait "$b" || fail "the half-GPU jobs"
yard logs "$a"
yard logs "$b"
[[ $(yard logs "$a" | grep CUDA_VISIBLE) == $(yard logs "$b" | grep CUDA_VISIBLE) ]] \
    || fail "two halves were given different devices on a one-GPU placement"

step "enforced GPU shares (NVIDIA MPS)"
nvidia-smi --query-gpu=index,compute_mode --format=csv,noheader
if ! command -v nvidia-cuda-mps-control > /dev/null; then
    grep -q "fractional GPU shares are not enforced" "$report/yard-up.log" \
        || fail "no nvidia-cuda-mps-control here, and yard up did not say that shares are not enforced"
    echo "skipped: nvidia-cuda-mps-control is not installed here (yard up says shares are not enforced)"
else
    grep "fractional GPU shares are enforced by NVIDIA MPS" "$report/yard-up.log" \
        || fail "yard up did not say that MPS enforces GPU shares"
    if nvidia-smi --query-gpu=compute_mode --format=csv,noheader | grep -qv Default; then
        echo "note: a device is not in the Default compute mode: two users' MPS daemons cannot share it"
    fi
    marks=$(mktemp -d /tmp/yard-gpu-check-mps.XXXXXX)
    chmod 777 "$marks"
    # The device's memory as NVML says (under MPS, what CUDA reports may be the client's limit).
    device_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | sort -n | head -1)
    # B: a fixed computation within its share (15% of the device), run while A fails; its
    # result must equal the same computation run alone, here, outside Trainyard and MPS.
    cat > "$marks/compute.py" <<'PY'
import sys
import torch
torch.manual_seed(0)
block = torch.empty(int(sys.argv[1]) * 15 // 100 << 20, dtype=torch.uint8, device="cuda")
a = torch.randn(2048, 2048, device="cuda", dtype=torch.float64)
b = a
for _ in range(20):
    b = (b @ a).tanh()
print("result", repr(float(b.sum())))
PY
    # A: allocates 30% of the device, past its 25% share: CUDA's out-of-memory error, in A alone.
    cat > "$marks/overrun.py" <<'PY'
import sys
import torch
free, total = torch.cuda.mem_get_info()
print("CUDA says", free >> 20, "MiB free of", total >> 20, "MiB; the device has", sys.argv[2], "MiB")
try:
    x = torch.empty(int(sys.argv[2]) * 30 // 100 << 20, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as e:
    print("OOM as expected:", str(e).splitlines()[0])
    sys.exit(0)
finally:
    open(sys.argv[1], "w").close()
sys.exit("allocated 30% of the device past a 25% share: not enforced")
PY
    # Compute share: the same matmul loop in a whole GPU and in a quarter (25% of the threads).
    cat > "$marks/rate.py" <<'PY'
import time
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
for _ in range(3):
    a @ a
torch.cuda.synchronize()
n, t = 0, time.time()
while time.time() - t < 10:
    a @ a
    n += 1
    if n % 8 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print("rate", n / (time.time() - t))
PY
    chmod 644 "$marks"/*.py
    alone=$("$python" "$marks/compute.py" "$device_mib" | sed -n 's/^result //p')
    [[ -n $alone ]] || fail "the reference computation did not run"
    quarter_b=$(submit <<EOF
name: gpu-mps-b
taskRoles:
  main:
    resourcePerInstance: {gpu: 0.25, cpu: 1, memoryMB: 4096}
    commands:
      - env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_)' | sort
      - touch $marks/b-started
      - for _ in \$(seq 600); do [ -e $marks/a-done ] && break; sleep 0.1; done
      - $python $marks/compute.py $device_mib
EOF
)
    quarter_a=$(submit <<EOF
name: gpu-mps-a
taskRoles:
  main:
    resourcePerInstance: {gpu: 0.25, cpu: 1, memoryMB: 4096}
    commands:
      - env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_)' | sort
      - for _ in \$(seq 600); do [ -e $marks/b-started ] && break; sleep 0.1; done
      - $python $marks/overrun.py $marks/a-done $device_mib
EOF
)
    yard wait "$quarter_a" || { yard logs "$quarter_a"; fail "the quarter job past its share did not fail alone with OOM"; }
    yard wait "$quarter_b" || { yard logs "$quarter_b"; fail "the quarter job within its share failed"; }
    yard logs "$quarter_a"
    yard logs "$quarter_b"
    yard logs "$quarter_a" | grep -q "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" || fail "job A got no MPS memory limit"
    [[ $(yard logs "$quarter_a" | grep CUDA_VISIBLE) == $(yard logs "$quarter_b" | grep CUDA_VISIBLE) ]] \
        || fail "the two quarters were not on one device"
    shared=$(yard logs "$quarter_b" | sed -n 's/^result //p')
    echo "B alone: $alone; B beside A's OOM: $shared"
    # Within rounding: cuBLAS may pick another kernel for a client with fewer threads.
    [[ -n $shared ]] && "$python" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-9 * abs(a))" \
        "$alone" "$shared" || fail "the other share's result changed"
    rates=()
    for gpu in 1 0.25; do
        job=$(submit <<EOF
name: gpu-mps-rate
taskRoles:
  main:
    resourcePerInstance: {gpu: $gpu, cpu: 1, memoryMB: 4096}
    commands:
      - $python $marks/rate.py
EOF
)
        yard wait "$job" || { yard logs "$job"; fail "the throughput job with gpu $gpu"; }
        rates+=("$(yard logs "$job" | sed -n 's/^rate //p')")
    done
    echo "matmuls/s: whole GPU ${rates[0]}, quarter ${rates[1]}"
    "$python" -c "import sys; r = float(sys.argv[2]) / float(sys.argv[1]); print('ratio', round(r, 3));
sys.exit(0 if 0.12 <= r <= 0.50 else 'the quarter share ran at %.2f of a whole GPU' % r)" "${rates[@]}" \
        || fail "compute share not respected"
    if pgrep -u "$(id -u)" -f nvidia-cuda-mps-control; then fail "an MPS daemon outlived the shared jobs"; fi
    echo "enforced shares: OOM alone, the neighbour unaffected, compute within the share; daemons gone"
fi

step "suspend and resume a PyTorch loop on the GPU (bit for bit)"
steps=1500
reference=$(mktemp -d)
(cd "$reference" && TRAINYARD_JOB_DIR=$reference "$python" -u "$repo/examples/suspend-resume/train_torch.py" \
    --steps $steps --device cuda > reference.log)
cat "$reference/result.json"
job=$(submit <<EOF
name: gpu-suspend-resume
preemption: suspend
suspendGracePeriodSeconds: 60
suspendSignal: SIGUSR1
taskRoles:
  train:
    resourcePerInstance: {gpu: 1, cpu: 2, memoryMB: 8192}
    commands:
      - exec $python -u $repo/examples/suspend-resume/train_torch.py --steps $steps --step-seconds 0.01 --device cuda
EOF
)
for _ in $(seq 240); do yard jobs | grep -E "^$job " | grep -q RUNNING && break; sleep 0.25; done
sleep 5  # a few hundred steps in
yard suspend "$job"
for _ in $(seq 240); do yard jobs | grep -E "^$job " | grep -q SUSPENDED && break; sleep 0.25; done
yard jobs | grep -E "^$job "
yard resume "$job"
yard wait "$job" || { yard job "$job"; fail "the suspended job"; }
yard job "$job" | sed -n '1,60p'
result=$(find "$TRAINYARD_HOME" -path "*/result.json" -newer "$reference/result.json" | head -1)
[[ -n $result ]] || fail "no result.json in the job's directory"
cat "$result"
"$python" - "$reference/result.json" "$result" <<'PY' || fail "the resumed run differs from the uninterrupted one"
import json, sys
reference, resumed = (json.load(open(path)) for path in sys.argv[1:])
print("segments:", [(s["attempt"], s["from"], s["to"], s["ended"]) for s in resumed["segments"]])
assert len(resumed["segments"]) >= 2, "the job was never suspended"
for key in ("steps", "loss", "sha256"):
    print(f"{key}: {reference[key]} | {resumed[key]}")
    assert reference[key] == resumed[key], key
PY
echo "bit for bit: the suspended and resumed run equals the uninterrupted one"

step "NVML monitoring: /metrics while a job uses the GPU"
busy=$(submit <<EOF
name: gpu-busy
taskRoles:
  main:
    resourcePerInstance: {gpu: 1, cpu: 2, memoryMB: 8192}
    commands:
      - >-
        $python -c "import torch, time; a = torch.randn(8192, 8192, device='cuda'); t = time.time();
        exec('while time.time() - t < 25: a = (a @ a).tanh()'); torch.cuda.synchronize(); print('busy done')"
EOF
)
sleep 20
token=$("$python" -c "import json, os; print(json.load(open(os.environ['TRAINYARD_HOME'] + '/client.json'))['token'])")
curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$port/metrics" > "$report/metrics.txt" \
    || fail "GET /metrics"
grep -E "^trainyard_(gpu|task_gpu)_" "$report/metrics.txt" | head -30
grep -qE "^trainyard_task_gpu_utilization_ratio.*job=\"$busy\"" "$report/metrics.txt" \
    || fail "no GPU utilization for the busy job"
yard wait "$busy"
yard job "$busy" | grep -iE "gpu|efficien" | head -10

step "containers on the GPU (CDI)"
if command -v podman > /dev/null && command -v nvidia-ctk > /dev/null; then
    nvidia-ctk cdi list
else
    echo "skipped: podman or nvidia-ctk (the NVIDIA Container Toolkit) is not installed here"
fi
grep -iE "cdi|container" "$report/yard-up.log" | head -5 || true

step "all GPU checks passed"
