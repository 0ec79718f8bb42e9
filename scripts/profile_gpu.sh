#!/usr/bin/env bash
# Nsight Compute profile of the Triton attention kernel as the public call runs it: the default allocation
# (fp32_frame) and fp32 FlashAttention through pasa_npu.fused_attention at D = 64, 128 and 256 (B = 4,
# H = 2048/D, S = 4096, non-causal) and Qwen2-7B causal (28/4 heads, S = 5676, D = 128), one call each, and a
# count of the matrix, exp and local-memory instructions in the SASS of every attention_kernel cubin in
# Triton's cache. On the GPU machine, from the repo root:
#   bash scripts/profile_gpu.sh OUT_DIR
set -euo pipefail
out=${1:?usage: profile_gpu.sh OUT_DIR}
mkdir -p "$out"
export PYTHONPATH=python
code='
import torch
import pasa_npu
shapes = [(4, 2048 // d, 2048 // d, 4096, d, 0) for d in (64, 128, 256)] + [(1, 28, 4, 5676, 128, 3)]
causal = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="cuda"), diagonal=1)  # FIA compressed mask
for b, n, nkv, s, d, sparse_mode in shapes:
    q = torch.randn(b, n, s, d, device="cuda").half()
    k, v = (torch.randn(b, nkv, s, d, device="cuda").half() for _ in range(2))
    for p in (pasa_npu.DEFAULT_PRECISION, "fp32"):
        pasa_npu.fused_attention(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                                 scale=d ** -0.5, sparse_mode=sparse_mode, atten_mask=causal if sparse_mode else None,
                                 precision=p)
torch.cuda.synchronize()
'
ncu --clock-control none --kernel-name attention_kernel --launch-count 8 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 -c "$code" > "$out/ncu.txt" 2>&1 || true
for f in $(find ~/.triton/cache -name 'attention_kernel.cubin'); do
  echo "$f HGMMA=$(cuobjdump -sass "$f" | grep -c HGMMA) MUFU=$(cuobjdump -sass "$f" | grep -c MUFU) LDGSTS=$(cuobjdump -sass "$f" | grep -c LDGSTS) LDL=$(cuobjdump -sass "$f" | grep -c LDL)"
done > "$out/sass_counts.txt"
grep -E "attention_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Block Size|Local Memory Spill" "$out/ncu.txt" || true
