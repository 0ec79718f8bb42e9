"""What Triton reaches on this GPU for FlashAttention-2's forward at all: a minimal kernel (one head dim, no
masks, tails, GQA, layouts or lse) timed beside our ``fp32`` and the default through the public call, and SDPA's
flash and cuDNN backends, on one non-causal shape.

    PYTHONPATH=python python3 scripts/bench_triton_floor.py --out DIR [--shape B H S D]

writes ``floor.json`` (TFLOP/s of each tile configuration of the minimal kernel, with the scale applied after
the subtraction of the row maximum, as our kernels do, or folded into one FMA per score; of the same kernel
software-pipelined by hand, Q·Kᵀ of the next block issued before the softmax of this one; persistent, one program
per SM looping over the query tiles, its loop nest as written or flattened by Triton (``tl.range(flatten=True)``);
and of the others) and prints a table. The minimal kernels' outputs are checked against float32 attention before
they are timed: a wrong one is reported and not timed, as is a configuration that does not fit the GPU (shared
memory).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import env_info  # noqa: E402

import pasa_npu  # noqa: E402

#: (BLOCK_M, BLOCK_N, num_warps, num_stages) of the minimal kernel.
CONFIGS = ((128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3), (64, 128, 4, 3), (128, 128, 8, 2), (128, 64, 8, 4),
           (128, 64, 8, 2))


@triton.jit
def _tile(Q, base, tile, D: tl.constexpr, BLOCK_M: tl.constexpr):
    """Query tile ``tile`` of the (batch, head) at ``base``: its rows, Q, and the empty row state (m, l, O)."""
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    q = tl.load(Q + base + rows[:, None] * D + tl.arange(0, D)[None, :])
    return (rows, q, tl.full([BLOCK_M], float("-inf"), tl.float32), tl.zeros([BLOCK_M], tl.float32),
            tl.zeros([BLOCK_M, D], tl.float32))


@triton.jit
def _scores(q, K, base, start, D: tl.constexpr, BLOCK_N: tl.constexpr):
    """Q·Kᵀ of the keys from ``start`` on, FP32."""
    keys = start + tl.arange(0, BLOCK_N)
    return tl.dot(q, tl.trans(tl.load(K + base + keys[:, None] * D + tl.arange(0, D)[None, :])))


@triton.jit
def _softmax_block(s, m, l, acc, V, base, start, c, D: tl.constexpr, BLOCK_N: tl.constexpr, FMA: tl.constexpr):
    """FlashAttention-2's update of the row state (m, l, O) by the block of scores ``s`` of the keys from ``start``
    on, ``c`` = scale·log2(e); V's block is read after P. FMA: scale·S − scale·m in one FMA per score (the max's own
    score can miss 2^0 by an ulp); else subtract, then scale (our kernels' form). Returns (m, l, O)."""
    if FMA:
        m_new = tl.maximum(m, tl.max(s, 1) * c)
        p = tl.exp2(s * c - m_new[:, None])
        alpha = tl.exp2(m - m_new)
    else:
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2((s - m_new[:, None]) * c)
        alpha = tl.exp2((m - m_new) * c)
    keys = start + tl.arange(0, BLOCK_N)
    v = tl.load(V + base + keys[:, None] * D + tl.arange(0, D)[None, :])
    return m_new, l * alpha + tl.sum(p, 1), tl.dot(p.to(tl.float16), v, acc * alpha[:, None])


@triton.jit
def _store(O, base, rows, acc, l, D: tl.constexpr):
    tl.store(O + base + rows[:, None] * D + tl.arange(0, D)[None, :], (acc / l[:, None]).to(tl.float16))


@triton.jit
def minimal_attention(Q, K, V, O, sm_scale, S, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      FMA: tl.constexpr):
    """Out = softmax(scale·Q·Kᵀ)·V of one (batch, head) per program column, contiguous (B·H, S, D) tensors, S a
    multiple of both blocks."""
    base = tl.program_id(1).to(tl.int64) * S * D
    rows, q, m, l, acc = _tile(Q, base, tl.program_id(0), D, BLOCK_M)
    c = sm_scale * 1.4426950408889634
    for start in range(0, S, BLOCK_N):
        m, l, acc = _softmax_block(_scores(q, K, base, start, D, BLOCK_N), m, l, acc, V, base, start, c, D, BLOCK_N,
                                   FMA)
    _store(O, base, rows, acc, l, D)


@triton.jit
def pipelined_attention(Q, K, V, O, sm_scale, S, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """:func:`minimal_attention` (the subtract-then-scale form) with Q·Kᵀ of block j + 1 issued before the softmax of
    block j, FlashAttention-3's overlap written in the loop (the last iteration computes one block more, of keys
    it wraps around to, and discards it)."""
    base = tl.program_id(1).to(tl.int64) * S * D
    rows, q, m, l, acc = _tile(Q, base, tl.program_id(0), D, BLOCK_M)
    c = sm_scale * 1.4426950408889634
    s = _scores(q, K, base, 0, D, BLOCK_N)
    for start in range(0, S, BLOCK_N):
        s_next = _scores(q, K, base, (start + BLOCK_N) % S, D, BLOCK_N)
        m, l, acc = _softmax_block(s, m, l, acc, V, base, start, c, D, BLOCK_N, False)
        s = s_next
    _store(O, base, rows, acc, l, D)


@triton.jit
def persistent_attention(Q, K, V, O, sm_scale, S, n_tiles, D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, FLATTEN: tl.constexpr):
    """:func:`minimal_attention` (the subtract-then-scale form) with one program per SM looping over the
    ``n_tiles`` query tiles of every (batch, head): the next tile's loads may start under this one's end.
    FLATTEN: Triton flattens the loop nest into one loop to pipeline across tiles."""
    tiles_per_head = S // BLOCK_M
    c = sm_scale * 1.4426950408889634
    for t in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=FLATTEN):
        base = (t // tiles_per_head).to(tl.int64) * S * D
        rows, q, m, l, acc = _tile(Q, base, t % tiles_per_head, D, BLOCK_M)
        for start in range(0, S, BLOCK_N):
            m, l, acc = _softmax_block(_scores(q, K, base, start, D, BLOCK_N), m, l, acc, V, base, start, c, D,
                                       BLOCK_N, False)
        _store(O, base, rows, acc, l, D)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shape", type=int, nargs=4, default=(4, 16, 4096, 128), metavar=("B", "H", "S", "D"))
    args = ap.parse_args()
    b, h, s, d = args.shape
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    flop = 4 * b * h * s * s * d
    rate = lambda fn: flop / triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") / 1e9  # noqa: E731
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    res = {"env": env_info(), "shape": [b, h, s, d], "minimal": [], "pipelined": [], "persistent": [], "others": {}}
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    variants = [("minimal", dict(FMA=fma)) for fma in (False, True)]
    variants += [("pipelined", {})] + [("persistent", dict(FLATTEN=flatten)) for flatten in (False, True)]
    kernels = {"minimal": minimal_attention, "pipelined": pipelined_attention, "persistent": persistent_attention}
    for name, extra in variants:
        for bm, bn, warps, stages in CONFIGS:
            def run(name=name, bm=bm, bn=bn, warps=warps, stages=stages, extra=extra):
                grid, tiles = ((sms,), ((s // bm) * b * h,)) if name == "persistent" else ((s // bm, b * h), ())
                kernels[name][grid](q, k, v, o, d ** -0.5, s, *tiles, D=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps,
                                    num_stages=stages, **extra)
            label = f"{name} {extra} {bm, bn, warps, stages}"
            try:
                run()
            except OutOfResources as e:
                print(label, "does not fit:", e, flush=True)
                continue
            err = float((o.float() - want).abs().max())
            if err > 1e-2:
                print(label, f"is wrong: max error {err}", flush=True)
                res[name].append({**extra, "config": [bm, bn, warps, stages], "wrong": err})
                continue
            res[name].append({**extra, "config": [bm, bn, warps, stages], "rate": rate(run)})
            print(label, round(res[name][-1]["rate"]), flush=True)
    kw = dict(num_heads=h, input_layout="BNSD", scale=d ** -0.5)
    for precision in ("fp32", pasa_npu.DEFAULT_PRECISION):
        res["others"][precision] = rate(lambda p=precision: pasa_npu.fused_attention(q, k, v, precision=p, **kw))
    for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            res["others"][name] = rate(lambda: F.scaled_dot_product_attention(q, k, v))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "floor.json").write_text(json.dumps(res, indent=1))
    cudnn = res["others"]["sdpa_cudnn"]
    print("\n| kernel | TFLOP/s | / cuDNN |\n|---|---|---|")
    for name in ("minimal", "pipelined", "persistent"):
        best = max((r for r in res[name] if "rate" in r), key=lambda r: r["rate"])
        print(f"| {name} {best['config']} {dict((k, v) for k, v in best.items() if k.isupper())} | "
              f"{best['rate']:.0f} | {best['rate'] / cudnn:.2f} |")
    for name, r in res["others"].items():
        print(f"| {name} | {r:.0f} | {r / cudnn:.2f} |")


if __name__ == "__main__":
    main()
