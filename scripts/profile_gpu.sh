#!/usr/bin/env bash
# Nsight Compute profile of the Triton kernel (fp32 FA vs PASA, d = 128, S = 4096, non-causal), and
# a count of the matrix instructions in its SASS. On the GPU machine, from the repo root:
#   bash scripts/profile_gpu.sh OUT_DIR
set -euo pipefail
out=${1:?usage: profile_gpu.sh OUT_DIR}
mkdir -p "$out"
export PYTHONPATH=python
code='
import torch
from pasa_npu.backends import triton as tb
q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda").half() for _ in range(3))
for p in ("fp32", "pasa_fp32"):
    tb.attention(q, k, v, precision=p, beta=None, block_q=128, block_kv=128, scale=128 ** -0.5, mask=None)
torch.cuda.synchronize()
'
ncu --clock-control none --kernel-name attention_kernel --launch-count 2 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 -c "$code" > "$out/ncu.txt" 2>&1 || true
for f in $(find ~/.triton/cache -name 'attention_kernel.cubin'); do
  echo "$f HGMMA=$(cuobjdump -sass "$f" | grep -c HGMMA) HMMA=$(cuobjdump -sass "$f" | grep -c ' HMMA') MUFU=$(cuobjdump -sass "$f" | grep -c MUFU) LDL=$(cuobjdump -sass "$f" | grep -c LDL)"
done > "$out/sass_counts.txt"
grep -E "attention_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc|Shared Memory Config|Dynamic Shared" "$out/ncu.txt" || true
cat "$out/sass_counts.txt"
