#!/usr/bin/env bash
# Nsight Compute profile of the Triton attention kernel, pasa_rs and fp32 FlashAttention at
# D = 64, 128 and 256 (B = 4, H = 2048/D, S = 4096, non-causal), and a count of the matrix, exp and
# local-memory instructions in the SASS of every attention_kernel cubin in Triton's cache. On the GPU
# machine, from the repo root:
#   bash scripts/profile_gpu.sh OUT_DIR
set -euo pipefail
out=${1:?usage: profile_gpu.sh OUT_DIR}
mkdir -p "$out"
export PYTHONPATH=python
code='
import torch
from pasa_npu.backends import triton as tb
for d in (64, 128, 256):
    q, k, v = (torch.randn(4, 2048 // d, 4096, d, device="cuda").half() for _ in range(3))
    for p in ("pasa_rs", "fp32"):
        tb.attention(q, k, v, precision=p, beta=None, block_q=128, block_kv=128, scale=d ** -0.5, mask=None)
torch.cuda.synchronize()
'
ncu --clock-control none --kernel-name attention_kernel --launch-count 6 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 -c "$code" > "$out/ncu.txt" 2>&1 || true
for f in $(find ~/.triton/cache -name 'attention_kernel.cubin'); do
  echo "$f HGMMA=$(cuobjdump -sass "$f" | grep -c HGMMA) MUFU=$(cuobjdump -sass "$f" | grep -c MUFU) LDGSTS=$(cuobjdump -sass "$f" | grep -c LDGSTS) LDL=$(cuobjdump -sass "$f" | grep -c LDL)"
done > "$out/sass_counts.txt"
grep -E "attention_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Block Size|Local Memory Spill" "$out/ncu.txt" || true
