#!/usr/bin/env bash
# Nsight Compute profile of the attention kernels as the public call runs them, beside SDPA cuDNN: the default
# allocation (fp32_frame) and fp32 FlashAttention through pasa_npu.fused_attention at D = 64, 128 and 256 (B = 4,
# H = 2048/D, S = 4096, non-causal; on an sm_90 GPU these take the Gluon kernel) and Qwen2-7B causal (28/4 heads,
# S = 5676, D = 128), one call each, then SDPA's cuDNN backend on the same shapes; every counter of ncu's full set,
# the stall reasons of each SASS instruction (the source page), and a count of the matrix, exp and local-memory
# instructions in the SASS of every attention_kernel cubin in Triton's cache. On the GPU machine, from the repo root:
#   bash scripts/profile_gpu.sh OUT_DIR [SHAPE ...]      (SHAPE: d64 d128 d256 qwen2_7b_causal; default all four)
# writes OUT_DIR/ncu.txt (details page), ncu_raw.csv (every metric), ncu_source.csv.gz (per-instruction SASS
# counters), sass_counts.txt and res_usage.txt, and prints the headline counters.
set -euo pipefail
out=${1:?usage: profile_gpu.sh OUT_DIR [SHAPE ...]}
shift
mkdir -p "$out"
export PYTHONPATH=python
export PROFILE_SHAPES="${*:-d64 d128 d256 qwen2_7b_causal}"
code='
import os
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import pasa_npu
known = {f"d{d}": (4, 2048 // d, 2048 // d, 4096, d, 0) for d in (64, 128, 256)}
known["qwen2_7b_causal"] = (1, 28, 4, 5676, 128, 3)
shapes = [known[name] for name in os.environ["PROFILE_SHAPES"].split()]
causal = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="cuda"), diagonal=1)  # FIA compressed mask
for b, n, nkv, s, d, sparse_mode in shapes:
    q = torch.randn(b, n, s, d, device="cuda").half()
    k, v = (torch.randn(b, nkv, s, d, device="cuda").half() for _ in range(2))
    for p in (pasa_npu.DEFAULT_PRECISION, "fp32"):
        pasa_npu.fused_attention(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                                 scale=d ** -0.5, sparse_mode=sparse_mode, atten_mask=causal if sparse_mode else None,
                                 precision=p)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(sparse_mode), enable_gqa=n != nkv)
torch.cuda.synchronize()
'
ncu --clock-control none --kernel-name regex:'attention_kernel|cudnn|sdpa|fmha' --set full --import-source no \
    -f -o "$out/profile" python3 -c "$code" > "$out/ncu_log.txt" 2>&1 || true
rep="$out/profile.ncu-rep"
ncu --import "$rep" --page details > "$out/ncu.txt" 2>&1 || true
ncu --import "$rep" --page raw --csv > "$out/ncu_raw.csv" 2>&1 || true
ncu --import "$rep" --page source --print-source sass --csv 2>&1 | gzip > "$out/ncu_source.csv.gz" || true
for f in $(find ~/.triton/cache -name 'attention_kernel.cubin'); do
  sass=$(cuobjdump -sass "$f")
  echo "$f HGMMA=$(grep -c HGMMA <<< "$sass") MUFU=$(grep -c MUFU <<< "$sass") LDGSTS=$(grep -c LDGSTS <<< "$sass")" \
    "LDL=$(grep -c LDL <<< "$sass")"
  cuobjdump -res-usage "$f" | grep -E "Function|REG" || true
done > "$out/sass_counts.txt"
tail -5 "$out/ncu_log.txt"
headline="^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy"
headline+="|Issue Slots Busy|Executed Ipc A|Shared Memory Configuration Size|Dynamic Shared|Local Memory Spill"
grep -E "$headline" "$out/ncu.txt" || true
