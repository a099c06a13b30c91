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
#   4. examples/suspend-resume's PyTorch loop on the GPU (--device cuda), suspended with
#      `yard suspend`, resumed with `yard resume`, ending bit for bit as an uninterrupted run;
#   5. NVML monitoring: /metrics has the GPUs' utilization and memory, and the job's own;
#   6. containers on the GPU (CDI), where Podman and the NVIDIA Container Toolkit are here.
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
