"""Print the host tiling's plans (pasa::ComputeTiling, through pasa_npu.npu_host_model.tiling) as the
Markdown table of docs/npu.md: per head dim and allocation, the block sizes, the cores used and the bytes
each plan takes in UB (per AIV), L1, L0A/L0B/L0C (per AI core) and the GM workspace.

    python scripts/npu_tiling_table.py [--batch 1 --heads 32 --kv-heads 8 --seq 4096]
"""

from __future__ import annotations

import argparse

import torch

from pasa_npu import npu_host_model

FIELDS = ("blockQ", "baseK", "blockDim", "ubBytes", "l1Bytes", "l0aBytes", "l0bBytes", "l0cBytes", "workspace_bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=4096)
    a = ap.parse_args()
    print("| D | precision | " + " | ".join(FIELDS) + " |")
    print("|---" * (len(FIELDS) + 2) + "|")
    for d in (64, 80, 96, 128, 256):
        q = torch.zeros(a.batch, a.heads, a.seq, d, dtype=torch.float16)
        k = torch.zeros(a.batch, a.kv_heads, a.seq, d, dtype=torch.float16)
        for precision in npu_host_model.PRECISIONS:
            t = npu_host_model.tiling(q, k, k, num_heads=a.heads, num_key_value_heads=a.kv_heads,
                                      input_layout="BNSD", scale=d ** -0.5, precision=precision)
            print(f"| {d} | {precision} | " + " | ".join(str(t[f]) for f in FIELDS) + " |")


if __name__ == "__main__":
    main()
