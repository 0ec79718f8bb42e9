"""On-device check of the deployed PasaFusedAttention op (run by scripts/build_and_deploy.sh on an NPU).

Compares ``pasa_npu.fused_attention(..., backend="npu")`` on NPU tensors with the golden model of the same
allocation, on a few shapes (GQA, tails, a mask, decode, a biased input FP16 FlashAttention overflows on),
and with float64 attention: the kernel's relative RMSE (eq. 19) against float64 may exceed the golden's
by at most 10%, and no output may be non-finite. Exit status 0 when every case passes, 1 when one fails,
3 when the npu backend is not available (the reason is printed).

Never run in this repository's CI (no NPU there).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import pasa_npu
from pasa_npu import golden, metrics
from pasa_npu.backends import npu
from pasa_npu.precision import ALLOCATIONS

#: The allocations the kernel implements (those with a tiling key).
PRECISIONS = tuple(name for name, a in ALLOCATIONS.items() if a.kernel_key is not None)

# (B, N, Nkv, S1, S2, D, mask, bias): bias is added to Q and K (FP16 FA overflows at 30).
CASES = [
    (1, 4, 4, 256, 256, 128, False, 0.0),
    (2, 8, 2, 200, 333, 64, True, 0.0),
    (1, 16, 1, 1, 4096, 128, False, 0.0),   # decode, split-KV
    (1, 2, 2, 512, 512, 128, False, 30.0),  # FP16 FlashAttention gives NaN here
]


def check(case, precision: str, rng: np.random.Generator) -> tuple[bool, str]:
    b, n, nkv, s1, s2, d, with_mask, bias = case
    q = (rng.standard_normal((b, n, s1, d)) + bias).astype(np.float16)
    k = (rng.standard_normal((b, nkv, s2, d)) + bias).astype(np.float16)
    v = rng.standard_normal((b, nkv, s2, d)).astype(np.float16)
    mask = rng.random((b, 1, s1, s2)) < 0.2 if with_mask else None
    scale = d ** -0.5
    dev = [torch.from_numpy(x).to("npu") for x in (q, k, v)]
    out, _ = pasa_npu.fused_attention(
        *dev, atten_mask=None if mask is None else torch.from_numpy(mask).to("npu"), num_heads=n,
        num_key_value_heads=nkv, input_layout="BNSD", scale=scale, precision=precision, backend="npu")
    out = out.cpu().numpy()
    g_out, _ = golden.attention(q, k, v, precision=precision, scale=scale, mask=mask)
    ref, _ = golden.reference(q, k, v, scale=scale, mask=mask)  # float64
    kernel_err, golden_err = metrics.rmse(out, ref), metrics.rmse(g_out, ref)
    ok = bool(np.isfinite(out).all()) and kernel_err <= 1.1 * golden_err + 1e-6
    return ok, f"{case} {precision}: rmse kernel {kernel_err:.3e}, golden {golden_err:.3e}"


def main() -> int:
    reason = npu.unavailable_reason()
    if reason is not None:
        print(f"npu_check: the npu backend is not available: {reason}", file=sys.stderr)
        return 3
    rng = np.random.default_rng(0)
    failed = 0
    runs = [(case, precision) for case in CASES for precision in PRECISIONS
            # FlashAttention's unscaled FP16 S overflows on biased inputs by design (the case PASA and the
            # overflow-free allocations are for)
            if ALLOCATIONS[precision].shifted or ALLOCATIONS[precision].overflow_free or case[-1] == 0.0]
    for case, precision in runs:
        ok, line = check(case, precision, rng)
        failed += not ok
        print(("ok   " if ok else "FAIL ") + line)
    print(f"npu_check: {failed} of {len(runs)} cases failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
