#!/usr/bin/env bash
# The checks that need a GPU, in one run (a GPU machine is lent rarely and briefly):
# the agent's CUDA tests (in-process and real `kvcast serve agent --device cuda` processes)
# the loopback transfer benchmark with both agents' blocks in GPU memory, and the device
# copies step by step (bench_device_copy.py); and, since that host's CPUs are quieter than a
# shared VM's, the sidecar's tick on a trace-shaped state (bench_tick_trace.py).
#     benchmarks/gpu_check.sh [OUTDIR]      (kvcast installed; OUTDIR defaults to ./gpu_check;
#                                            ROUNDS=N sets the benchmark's rounds, default 7)
# Writes OUTDIR/gpu.txt, agent_tests.log, bench_agent_transfer_cuda.json, bench_device_copy.json,
# bench_tick_trace.json.
set -uo pipefail
out=${1:-gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  echo "cpus: $(nproc)"
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'available', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
} 2>&1 | tee "$out/gpu.txt"
status=0
timeout 240 $py -m pytest -q -p no:cacheprovider -n 8 -rs tests/serving/agent 2>&1 \
  | tee "$out/agent_tests.log" || status=1
timeout 180 $py benchmarks/bench_agent_transfer.py --device cuda --rounds "${ROUNDS:-7}" \
  > "$out/bench_agent_transfer_cuda.json" 2> "$out/bench.err" || status=1
timeout 60 $py benchmarks/bench_device_copy.py > "$out/bench_device_copy.json" \
  2>> "$out/bench.err" || status=1
timeout 120 $py benchmarks/bench_tick_trace.py --ticks 300 > "$out/bench_tick_trace.json" \
  2>> "$out/bench.err" || status=1
cat "$out/bench_agent_transfer_cuda.json" "$out/bench_device_copy.json" "$out/bench_tick_trace.json" \
  "$out/bench.err"
exit $status
