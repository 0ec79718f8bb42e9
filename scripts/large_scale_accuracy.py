"""Accuracy of the default pasa_rs at large softmax scales, as a ratio to FP32 FlashAttention's.

Usage: python scripts/large_scale_accuracy.py [--seeds 10] [--rows 256] [--keys 512] [--scales 2e4 32768 ...]

Inputs of pasa_npu.accuracy.draw_large_scale: N(0, 1) Q, K, V ("normal"), and the same with keys in groups
of 8 near-equal ones ("ties"), 2 heads of --rows queries against --keys keys, D = 64. Per scale, on the golden
model: pasa_rs and the fp32 allocation against float64 attention. Printed, as a markdown table: the draws
whose output is non-finite; the relative RMSE as a ratio to fp32's on the same draw, median [min, max] over
the draws where fp32's is not 0 (and how many draws had both 0: every row's weight on one key, whose value
both return exactly); the worst |lse − lse64| as a ratio to fp32's, median [max], and pasa_rs's worst
|lse − lse64| relative to |lse64|; and the fraction of
(row, KV block) passes that pasa_rs reshifted. Everything is the golden model's emulation on the CPU.
"""

import argparse

import numpy as np

from pasa_npu import golden, metrics
from pasa_npu.accuracy import LARGE_SCALE_KINDS, draw_large_scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10, help="draws of each input kind per scale")
    ap.add_argument("--rows", type=int, default=256, help="query rows per head")
    ap.add_argument("--keys", type=int, default=512, help="keys per head")
    ap.add_argument("--scales", type=float, nargs="+", default=[0.125, 2e4, 32768.0, 1e5, 1e6])
    args = ap.parse_args()
    print(f"{args.seeds} draws of each of {', '.join(LARGE_SCALE_KINDS)}; (1, 2, {args.rows}, 64) queries against "
          f"{args.keys} keys; ratios to fp32's on the same draw")
    print("| scale | non-finite draws | RMSE ratio: median [min, max] | draws with both 0 | lse error ratio: "
          "median [max] | worst lse error / abs(lse) | reshifted |")
    print("|---|---|---|---|---|---|---|")
    for scale in args.scales:
        ratios, both_zero, lse_ratios, lse_rel, bad, stats = [], 0, [], [], 0, {}
        for kind in LARGE_SCALE_KINDS:
            for seed in range(args.seeds):
                q, k, v = draw_large_scale(kind, np.random.default_rng(seed), s1=args.rows, s2=args.keys)
                ref, lse64 = golden.reference(q, k, v, scale=scale)
                out32, lse32 = golden.attention(q, k, v, precision="fp32", scale=scale)
                out, lse = golden.attention(q, k, v, precision="pasa_rs", scale=scale, stats=stats)
                if not (np.isfinite(out).all() and np.isfinite(lse).all()):
                    bad += 1
                    continue
                err, err32 = metrics.rmse(out, ref), metrics.rmse(out32, ref)
                if err32 > 0:
                    ratios.append(err / err32)
                elif err == 0:
                    both_zero += 1
                else:
                    ratios.append(float("inf"))
                lse_ratios.append(np.abs(lse - lse64).max() / np.abs(lse32 - lse64).max())
                lse_rel.append((np.abs(lse - lse64) / np.abs(lse64)).max())
        rmse = f"{np.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]" if ratios else "-"
        lse = f"{np.median(lse_ratios):.2f} [{max(lse_ratios):.2f}]" if lse_ratios else "-"
        print(f"| {scale:g} | {bad} | {rmse} | {both_zero} | {lse} | {max(lse_rel, default=float('nan')):.1e} | "
              f"{stats['reshifted_row_blocks'] / stats['row_blocks']:.0%} |", flush=True)


if __name__ == "__main__":
    main()
