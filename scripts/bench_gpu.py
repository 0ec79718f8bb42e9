"""Speed and accuracy of the Triton kernel on a CUDA GPU against PyTorch SDPA (flash, cuDNN, efficient).

    PYTHONPATH=python python3 scripts/bench_gpu.py --out DIR [--quick] [--sweep [D ...]]

Times are medians of ``triton.testing.do_bench`` over input sets rotated between calls (enough sets to
exceed twice the L2 cache, so small shapes are not timed from cache), and the median of ROUNDS such
measurements taken round-robin over the methods (their spread is recorded); decode is timed as
CUDA-graph replays. TFLOP/s count 4·B·H·S1·S2·D
(halved for causal). Columns: ``pasa_fp32`` (PASA, FP32 row state), ``pasa`` (all-FP16 state),
``pasa_rs`` (row-shifted PASA: centred K, per-row shift, FP32 merge), ``fp32`` (our FP32-state
FlashAttention-2, same kernel without the shift), the same PASA with K' = M·K fused into the loop
instead of the pre-pass, and SDPA's flash, cuDNN and efficient backends. Accuracy: relative RMSE
against float64 attention and NaN count, on N(0, 1) inputs, on Q, K ~ N(30, 1) (V ~ N(0, 1)), where
FP16 Q·Kᵀ overflows, and on Q/K resonance (RESONANCE). Writes results.json, table.md and gpu.png.
``pasa_fp32`` and ``pasa_rs`` take the backend's default K' variant: the pre-pass for prefill, fused
for decode; ``*_fused`` and ``*_prepass`` force one (timed on SHIFT_SHAPES).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench, do_bench_cudagraph

from pasa_npu.accuracy import source_commit
from pasa_npu.backends import triton as tb

L2_BYTES = 50 * 2**20
ROUNDS = 3
SDPA = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}
OURS = {"pasa_fp32": dict(precision="pasa_fp32"), "pasa": dict(precision="pasa"),
        "pasa_rs": dict(precision="pasa_rs"), "fp32": dict(precision="fp32"),
        "pasa_fp32_fused": dict(precision="pasa_fp32", shift="fused"),
        "pasa_fp32_prepass": dict(precision="pasa_fp32", shift="prepass"),
        "pasa_rs_fused": dict(precision="pasa_rs", shift="fused"),
        "pasa_rs_prepass": dict(precision="pasa_rs", shift="prepass")}
#: Variants that force the K' pre-pass or its fused form: timed on SHIFT_SHAPES only (the default
#: picks one of them).
VARIANTS = ("pasa_fp32_fused", "pasa_fp32_prepass", "pasa_rs_fused", "pasa_rs_prepass")
#: The two K' variants are timed on these shapes only.
SHIFT_SHAPES = ("d64_s4096", "d128_s4096", "d256_s4096", "qwen2_7b", "decode")


def ours(q, k, v, causal, precision, shift=None, config=None):
    return tb.attention(q, k, v, precision=precision, beta=None, block_q=128, block_kv=128,
                        scale=q.shape[-1] ** -0.5, mask=None, band=(None, 0) if causal else None,
                        shift=shift, config=config)[0]


def sdpa(q, k, v, causal, backend):
    g = q.shape[1] // k.shape[1]
    with sdpa_kernel([backend]):
        if g > 1:  # SDPA's GQA: enable_gqa where the backend has it (K/V not copied)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def method(name):
    if name in OURS:
        return lambda q, k, v, c: ours(q, k, v, c, **OURS[name])
    return lambda q, k, v, c: sdpa(q, k, v, c, SDPA[name])


def inputs(b, h, hkv, s1, s2, d, n_sets, bias=0.0, seed=0, phase=None):
    """``n_sets`` draws of (Q, K, V): Q, K ~ N(bias, 1), V ~ N(0, 1); or with ``phase`` (degrees) the
    Q/K resonance of pasa_npu.accuracy's hard cases: Q = a·cos θ + N(0, 1), K = 40 + a'·cos(θ + phase)
    + N(0, 1) along the head dim, θ = 2π·3·d/D, a, a' ~ U(32, 36) per row (|Q·Kᵀ| ≈ 600·D)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sets = []
    for _ in range(n_sets):
        q = torch.randn(b, h, s1, d, device="cuda", generator=gen) + bias
        k = torch.randn(b, hkv, s2, d, device="cuda", generator=gen) + bias
        v = torch.randn(b, hkv, s2, d, device="cuda", generator=gen)
        if phase is not None:
            theta = 2 * math.pi * 3 * torch.arange(d, device="cuda") / d
            amp = lambda *shape: 32 + 4 * torch.rand(*shape, 1, device="cuda", generator=gen)  # noqa: E731
            q = q - bias + amp(b, h, s1) * torch.cos(theta)  # the N(0, 1) draws plus the resonance
            k = k - bias + 40 + amp(b, hkv, s2) * torch.cos(theta + math.radians(phase))
        sets.append(tuple(t.half() for t in (q, k, v)))
    return sets


def time_ms(fn, sets, causal):
    """Median ms over do_bench's repetitions, rotating through the input sets. Decode (one query
    row) and short prefills (S1·S2 up to 2^22) are timed as CUDA-graph replays of the first set: their
    kernels run for tens of µs, which the host's launch work (Python, argument checks, 2-3 launches) can
    otherwise exceed."""
    if sets[0][0].shape[2] == 1 or sets[0][0].shape[2] * sets[0][1].shape[2] <= 1 << 22:
        q, k, v = sets[0]
        return do_bench_cudagraph(lambda: fn(q, k, v, causal), rep=100, return_mode="median")
    it = [0]

    def call():
        q, k, v = sets[it[0] % len(sets)]
        it[0] += 1
        fn(q, k, v, causal)

    return do_bench(call, warmup=25, rep=100, return_mode="median")


def flops(b, h, s1, s2, d, causal):
    f = 4.0 * b * h * s1 * s2 * d
    return f / 2 if causal else f


def ref64(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(g, 1) for t in (k, v))
    s = (q.double() @ k.mT) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


#: Accuracy inputs: label -> inputs() keywords.
ACCURACY_INPUTS = {"N(0,1)": {}, "N(30,1)": dict(bias=30.0), "resonance 0°": dict(phase=0.0),
                   "resonance 180°": dict(phase=180.0)}


def accuracy(names, d, causal, kind):
    q, k, v = inputs(1, 8, 8, 2048, 2048, d, 1, seed=123, **ACCURACY_INPUTS[kind])[0]
    ref = ref64(q, k, v, causal)
    row = {}
    for name in names:
        if name.endswith("_prepass"):
            continue  # the same function as the default on prefill shapes
        try:
            out = method(name)(q, k, v, causal).double()
        except RuntimeError as e:
            row[name] = {"error": str(e).splitlines()[0][:120]}
            continue
        nan = int(torch.isnan(out).sum())
        ok = torch.isfinite(out)
        err = float(((out[ok] - ref[ok]) ** 2).mean().sqrt() / (ref ** 2).mean().sqrt()) if ok.any() else math.nan
        row[name] = {"rmse": err, "nan": nan}
    return row


def roofline():
    """The two ceilings, measured: device-to-device copy bandwidth and FP16 GEMM rate."""
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), return_mode="median")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    bm = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    ms_mm = do_bench(lambda: a @ bm, return_mode="median")
    return {"copy_TBps": 2 * x.numel() / ms / 1e9, "fp16_gemm_TFLOPs": 2 * 8192**3 / ms_mm / 1e9}


def env_info():
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": smi,
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
            "command": " ".join(["python3"] + sys.argv), "commit": source_commit()}


def prefill_grid(quick):
    ds = (64, 128, 256)
    ss = (4096,) if quick else (1024, 2048, 4096, 8192, 16384)
    grid = []
    for d in ds:
        for s in ss:
            for causal in (False, True):
                grid.append(dict(name=f"d{d}_s{s}", b=16384 // s, h=2048 // d, hkv=2048 // d, s1=s, s2=s, d=d,
                                 causal=causal))
    grid += [dict(name="qwen2_7b", b=1, h=28, hkv=4, s1=5676, s2=5676, d=128, causal=c) for c in (False, True)]
    grid.append(dict(name="video_dit", b=50, h=5, hkv=5, s1=9216, s2=9216, d=64, causal=False))
    grid.append(dict(name="decode", b=16, h=32, hkv=8, s1=1, s2=8192, d=128, causal=False))
    return grid


#: Configurations (BLOCK_M, num_warps, num_stages, KV splits or None for the heuristic's) swept
#: per head dim at S = 4096; the decode shape (16, 32, 8, 1, 8192, 128) under the key "decode"
#: (there the heuristic of the first benchmarks gave 64 splits of its 64 KV blocks, the current one 2).
SWEEP = {
    64: ((128, 4, 3, None), (128, 8, 3, None), (128, 8, 2, None), (64, 4, 3, None), (128, 4, 2, None)),
    128: ((128, 8, 3, None), (128, 8, 2, None), (128, 4, 3, None), (64, 4, 3, None), (64, 4, 4, None),
          (128, 8, 4, None)),
    256: ((64, 8, 1, None), (128, 8, 1, None), (64, 4, 1, None), (64, 8, 2, None), (128, 8, 2, None)),
    "decode": ((16, 4, 2, None), (16, 8, 2, None), (16, 4, 3, None), (16, 2, 2, None), (16, 4, 1, None),
               (16, 4, 2, 1), (16, 4, 2, 2), (16, 4, 2, 6), (16, 4, 2, 8), (16, 4, 2, 16), (16, 4, 1, 8),
               (16, 4, 1, 16)),
}


def sweep(out_dir, dims):
    """Time every configuration of SWEEP[d] for d in ``dims`` (fp32, pasa_fp32 and pasa_rs, causal and not);
    a configuration that does not compile or fit shared memory is recorded as an error."""
    rows = []
    for d in dims:
        if d == "decode":
            shape, causals = (16, 32, 8, 1, 8192, 128), (False,)
        else:
            shape, causals = (4, 2048 // d, 2048 // d, 4096, 4096, d), (False, True)
        b, h, hkv, s1, s2, dd = shape
        sets = inputs(*shape, 2 if d == "decode" else 1)
        for prec in ("fp32", "pasa_fp32", "pasa_rs"):
            for causal in causals:
                for cfg in SWEEP[d]:
                    try:
                        ms = time_ms(lambda q, k, v, c: ours(q, k, v, c, prec, config=cfg), sets, causal)
                        tf = flops(b, h, s1, s2, dd, causal) / ms / 1e9
                    except Exception as e:
                        tf = f"error: {str(e).splitlines()[0][:80]}"
                    rows.append({"d": d, "precision": prec, "causal": causal, "config": cfg, "tflops": tf})
                    print("sweep", d, prec, causal, cfg, tf, flush=True)
        del sets
    (out_dir / "sweep.json").write_text(json.dumps(rows, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="S = 4096 and the model shapes only (the video-DiT "
                    "shape, many batches of few heads, among them), accuracy at d = 128")
    ap.add_argument("--sweep", nargs="*", metavar="D", help="sweep the kernel's tile configurations "
                    "(SWEEP) for these head dims and/or 'decode' (all when none is named), then stop")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    res = {"env": env_info(), "roofline": roofline(), "speed": [], "accuracy": []}
    print(json.dumps(res["env"]), json.dumps(res["roofline"]), flush=True)
    if args.sweep is not None:
        sweep(args.out, [x if x == "decode" else int(x) for x in args.sweep] or list(SWEEP))
        return
    names = list(OURS) + list(SDPA)
    for cfg in prefill_grid(args.quick):
        b, h, hkv, s1, s2, d, causal = (cfg[x] for x in ("b", "h", "hkv", "s1", "s2", "d", "causal"))
        set_bytes = 2 * (b * h * s1 * d * 2 + 2 * b * hkv * s2 * d)
        sets = inputs(b, h, hkv, s1, s2, d, max(1, min(8, math.ceil(2 * L2_BYTES / set_bytes))))
        row = dict(cfg)
        times = {}
        # ROUNDS passes over the methods, round-robin: the same kernel timed minutes apart moved by
        # up to 13% between two runs of this script, more than within one pass.
        for _ in range(ROUNDS):
            for name in names:
                if name in VARIANTS and cfg["name"] not in SHIFT_SHAPES:
                    continue
                try:
                    ms = time_ms(method(name), sets, causal)
                    times.setdefault(name, []).append(ms)
                except RuntimeError as e:
                    row[name] = None
                    row[name + "_error"] = str(e).splitlines()[0][:120]
        for name, ts in times.items():
            ms = statistics.median(ts)
            row[name] = flops(b, h, s1, s2, d, causal) / ms / 1e9
            row[name + "_ms"] = ms
            row[name + "_spread"] = (max(ts) - min(ts)) / ms
        res["speed"].append(row)
        print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                       if not k.endswith(("_ms", "_error", "_spread"))), flush=True)
        del sets
        torch.cuda.empty_cache()
    for d in ((128,) if args.quick else (64, 128, 256)):
        for kind in ACCURACY_INPUTS:
            for causal in (False, True):
                row = {"d": d, "input": kind, "causal": causal, **accuracy(names, d, causal, kind)}
                res["accuracy"].append(row)
                print("accuracy", json.dumps(row), flush=True)
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    write_table(res, args.out / "table.md")
    plot(res, args.out / "gpu.png")


def write_table(res, path):
    cols = list(OURS) + list(SDPA)
    ratios = (("pasa_fp32", "fp32"), ("pasa_rs", "fp32"), ("pasa_rs", "sdpa_flash"))
    lines = ["| shape (B, H, Hkv, S1, S2, D) | causal | " + " | ".join(cols) + " | "
             + " | ".join(f"{a} / {b}" for a, b in ratios) + " |",
             "|---|---|" + "---|" * (len(cols) + len(ratios))]
    for r in res["speed"]:
        cells = [(f"{r[c]:.0f}" if r[c] >= 100 else f"{r[c]:.1f}") if isinstance(r.get(c), float)
                 else ("n/a" if c in r else "–") for c in cols]
        cells += [f"{r[a] / r[b]:.2f}" if r.get(a) and r.get(b) else "–" for a, b in ratios]
        lines.append(f"| {r['name']} ({r['b']}, {r['h']}, {r['hkv']}, {r['s1']}, {r['s2']}, {r['d']}) | "
                     f"{'yes' if r['causal'] else 'no'} | " + " | ".join(cells) + " |")
    spreads = sorted(v for r in res["speed"] for k, v in r.items() if k.endswith("_spread"))
    if spreads:
        lines += ["", f"Spread (max − min) / median of a cell's {ROUNDS} passes: median "
                  f"{100 * statistics.median(spreads):.1f}%, largest {100 * spreads[-1]:.1f}%."]
    lines += ["", "| D | input | causal | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    for r in res["accuracy"]:
        cells = []
        for c in cols:
            x = r.get(c, {})
            cells.append("–" if not x else "n/a" if "error" in x else f"{x['rmse']:.2e} ({x['nan']} NaN)")
        lines.append(f"| {r['d']} | {r['input']} | {'yes' if r['causal'] else 'no'} | "
                     + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in res["speed"] if r["name"].startswith("d")]
    ds = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(2, len(ds), figsize=(5 * len(ds), 8), squeeze=False)
    for ci, causal in enumerate((False, True)):
        for di, d in enumerate(ds):
            ax = axes[ci][di]
            sel = [r for r in rows if r["d"] == d and r["causal"] == causal]
            xs = [r["s1"] for r in sel]
            for c in ("pasa_fp32", "pasa", "pasa_rs", "fp32", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"):
                ys = [r.get(c) if isinstance(r.get(c), float) else math.nan for r in sel]
                ax.plot(xs, ys, marker="o", label=c)
            ax.set_xscale("log", base=2)
            ax.set_title(f"D={d}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{res['env']['gpu']}, torch {res['env']['torch']}, triton {res['env']['triton']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
