"""Time versions of the Triton kernel against each other in one process, round-robin, and check which of
them give bit-identical outputs: the A/B benchmark behind each kernel change (docs/benchmarks/gpu_notes.md).

    PYTHONPATH=python python3 scripts/bench_variants.py --out DIR NAME=PKG[:METHOD,...] [NAME=PKG ...] \\
        [--same NAME NAME] [--shapes NAME,...] [--methods METHOD,...] [--sweep [SHAPE,...]] [--public]

Each PKG is a directory holding a ``pasa_npu`` package (e.g. ``git archive COMMIT python | tar -x -C DIR``
gives ``DIR/python``); it is imported under its own name, so the versions' kernels are compiled and
timed side by side (each with ``--methods``, or the methods its spec names), with SDPA's flash and
cuDNN backends as references. A cell is the median of
ROUNDS ``triton.testing.do_bench`` medians taken round-robin over the versions and methods (decode:
CUDA-graph replays), on inputs rotated between calls. ``--same A B`` compares A's and B's outputs and
lse on every timed shape and method, bit for bit. ``--sweep [SHAPE,...]`` times the last version over
the tile configurations of SWEEP (of the shapes named, or all). ``--public`` times each version through its
public call, ``fused_attention`` (BNSD, no lse; causal as FIA's sparse_mode 3), instead of the backend's
``attention`` (which computes the lse); ``--same`` then compares the public call's outputs. Writes
variants.json (after every shape) and prints a table of TFLOP/s (decode: GB/s of K and V).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import L2_BYTES, SDPA, env_info, flops, inputs, sdpa, time_ms  # noqa: E402

ROUNDS = 3
#: name -> (B, H, Hkv, S1, S2, D, causal): the shapes the GPU speed goals are stated on, one row each.
SHAPES = {
    "d64": (4, 32, 32, 4096, 4096, 64, False),
    "d64_causal": (4, 32, 32, 4096, 4096, 64, True),
    "d128": (4, 16, 16, 4096, 4096, 128, False),
    "d128_causal": (4, 16, 16, 4096, 4096, 128, True),
    "d256": (4, 8, 8, 4096, 4096, 256, False),
    "d256_causal": (4, 8, 8, 4096, 4096, 256, True),
    "qwen2_7b_causal": (1, 28, 4, 5676, 5676, 128, True),
    "video_dit": (50, 5, 5, 9216, 9216, 64, False),
    "prefill_128k_causal": (1, 2, 2, 131072, 131072, 128, True),
    "decode": (16, 32, 8, 1, 8192, 128, False),
    # Beyond those rows: head dims between powers of two, wide GQA, 2k causal, decode over 128k keys, decode
    # of one sequence (16 KV splits) and of one KV head (MQA: 128 splits), short prefills of one sequence.
    "d96": (4, 24, 24, 4096, 4096, 96, False),
    "d160_causal": (4, 12, 12, 4096, 4096, 160, True),
    "llama70b_causal": (1, 64, 8, 8192, 8192, 128, True),
    "s2k_causal": (8, 32, 8, 2048, 2048, 128, True),
    "decode_128k": (1, 32, 8, 1, 131072, 128, False),
    "decode_b1": (1, 32, 8, 1, 4096, 128, False),
    "prefill_512": (1, 32, 8, 512, 512, 128, False),
    "prefill_2k_causal": (1, 32, 8, 2048, 2048, 128, True),
    "decode_mqa_32k": (1, 8, 1, 1, 32768, 128, False),
}
#: shape -> method -> configurations (BLOCK_M, num_warps, num_stages, KV splits or None) of ``--sweep``.
SWEEP = {
    "d64": {m: ((64, 4, 3, None), (128, 8, 3, None), (128, 4, 2, None), (64, 4, 4, None))
            for m in ("fp32_frame", "fp32")},
    "d128": {m: ((128, 8, 3, None), (128, 8, 2, None), (64, 4, 3, None)) for m in ("fp32_frame", "fp32")},
    "qwen2_7b_causal": {m: ((128, 8, 3, None), (128, 8, 2, None), (64, 4, 3, None)) for m in ("fp32_frame", "fp32")},
    "video_dit": {m: ((64, 4, 3, None), (128, 8, 3, None), (128, 8, 2, None), (64, 4, 4, None))
                  for m in ("fp32_frame", "fp32")},
    "d256": {"fp32_frame": ((128, 8, 2, None), (64, 4, 2, None), (64, 8, 2, None), (128, 8, 1, None))},
    "decode_b1": {"fp32_frame": tuple((16, 4, 2, splits) for splits in (4, 8, 16, 32))},
    "prefill_512": {m: ((128, 8, 3, None), (64, 4, 3, None), (64, 4, 2, None), (64, 8, 3, None))
                    for m in ("fp32_frame", "fp32")},
    "prefill_2k_causal": {m: ((128, 8, 3, None), (64, 4, 3, None), (64, 4, 2, None), (64, 8, 3, None))
                          for m in ("fp32_frame", "fp32")},
    "decode_mqa_32k": {"fp32_frame": tuple((16, 4, 2, splits) for splits in (16, 32, 64, 128))},
}


def load(name: str, pkg: Path, tmp: Path):
    """The Triton backend of the ``pasa_npu`` package in ``pkg``, imported as ``pasa_<name>`` from a copy in ``tmp``
    whose torch.library operators are renamed into a namespace of that name (two copies cannot define one
    operator)."""
    src = pkg / "pasa_npu"
    if not src.is_dir():
        raise SystemExit(f"{pkg} holds no pasa_npu package")
    dst = tmp / f"pasa_{name}"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for py in dst.rglob("*.py"):
        py.write_text(py.read_text().replace('"pasa_npu::', f'"pasa_{name}::'))
    return importlib.import_module(f"pasa_{name}.backends.triton")


@functools.lru_cache(maxsize=None)
def default_block(tb, precision: str, d: int) -> int:
    """The KV block the public call takes for ``precision`` at head dim ``d`` on the Triton backend ``tb``:
    ``problem.default_block_kv`` of the version's package, or 128 for a version without it."""
    pkg = importlib.import_module(tb.__name__.rsplit(".", 2)[0])
    rule = getattr(pkg.problem, "default_block_kv", None)
    return 128 if rule is None else rule(pkg.precision.get_allocation(precision), d, "triton")


def run(tb, q, k, v, causal, method, config=None):
    """``method`` is a precision, PRECISION@BLOCK_KV for another KV block than :func:`default_block`'s, and either
    with /KERNEL ("classic" or "gluon", the backend's ``kernel``) for that kernel instead of the one its rule
    picks."""
    method, _, kernel = method.partition("/")
    precision, _, block_kv = method.partition("@")
    block_kv = int(block_kv) if block_kv else default_block(tb, precision, q.shape[-1])
    extra = {"kernel": kernel} if kernel else {}
    return tb.attention(q, k, v, precision=precision, beta=None, block_q=128, block_kv=block_kv,
                        scale=q.shape[-1] ** -0.5, mask=None, band=(None, 0) if causal else None, config=config,
                        **extra)


#: FIA's compressed causal mask (sparse_mode 3), for --public.
_CAUSAL_MASK = {}


def run_public(tb, q, k, v, causal, method):
    """``method`` through the version's public call (no lse, as a caller who does not ask for it); a /KERNEL
    suffix is ignored (the public call's rule picks the kernel)."""
    precision, _, block_kv = method.partition("/")[0].partition("@")
    pkg = importlib.import_module(tb.__name__.rsplit(".", 2)[0])
    extra = {"block_kv": int(block_kv)} if block_kv else {}
    if causal:
        if q.device not in _CAUSAL_MASK:
            _CAUSAL_MASK[q.device] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=q.device), diagonal=1)
        extra.update(sparse_mode=3, atten_mask=_CAUSAL_MASK[q.device])
    return pkg.fused_attention(q, k, v, num_heads=q.shape[1], num_key_value_heads=k.shape[1], input_layout="BNSD",
                               scale=q.shape[-1] ** -0.5, precision=precision, **extra)


def rate(shape, ms):
    """TFLOP/s, or for decode GB/s of K and V."""
    b, h, hkv, s1, s2, d, causal = shape
    if s1 == 1:
        return 2 * b * hkv * s2 * d * 2 / ms / 1e6
    return flops(b, h, s1, s2, d, causal) / ms / 1e9


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("versions", nargs="+", metavar="NAME=PKG[:METHOD,...]")
    ap.add_argument("--same", nargs=2, action="append", default=[], metavar=("A", "B"))
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names of SHAPES")
    ap.add_argument("--methods", default="pasa_rs,fp32",
                    help="comma-separated precisions of every version (PRECISION@BLOCK_KV: another KV block; "
                         "PRECISION/KERNEL: the classic or gluon kernel)")
    ap.add_argument("--sdpa", default="sdpa_flash,sdpa_cudnn", help="SDPA backends timed beside them, comma-separated")
    ap.add_argument("--sweep", nargs="?", const=",".join(SWEEP), default="", metavar="SHAPE,...",
                    help="sweep SWEEP's configurations of these shapes (all of SWEEP's without a value)")
    ap.add_argument("--public", action="store_true", help="time each version's public call, fused_attention")
    return ap.parse_args(argv)


def main():
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(tmp))
    versions, methods = {}, {}
    for spec in args.versions:
        name, _, pkg = spec.partition("=")
        pkg, _, only = pkg.partition(":")
        versions[name] = load(name, Path(pkg), tmp)
        methods[name] = (only or args.methods).split(",")
    res = {"env": env_info(), "versions": args.versions, "rows": [], "same": [], "sweep": []}
    print(json.dumps(res["env"]), flush=True)
    for shape_name in args.shapes.split(","):
        shape = SHAPES[shape_name]
        b, h, hkv, s1, s2, d, causal = shape
        set_bytes = 2 * (b * h * s1 * d * 2 + 2 * b * hkv * s2 * d)
        sets = inputs(b, h, hkv, s1, s2, d, max(1, min(8, -(-2 * L2_BYTES // set_bytes))))
        call = run_public if args.public else run
        cells = {(vn, m): (lambda q, k, v, c, tb=tb, m=m: call(tb, q, k, v, c, m)[0])
                 for vn, tb in versions.items() for m in methods[vn]}
        cells.update({("sdpa", m): (lambda q, k, v, c, m=m: sdpa(q, k, v, c, SDPA[m]))
                      for m in args.sdpa.split(",") if m})
        for a, bname in args.same:
            for m in set(methods[a]) & set(methods[bname]):
                q, k, v = sets[0]
                oa, la = call(versions[a], q, k, v, causal, m)
                ob, lb = call(versions[bname], q, k, v, causal, m)
                same = bool(torch.equal(oa, ob) and torch.equal(la, lb))
                diff = float((oa.float() - ob.float()).abs().max())
                res["same"].append({"shape": shape_name, "method": m, "a": a, "b": bname, "identical": same,
                                    "max_abs_diff": diff})
                print("same", shape_name, m, a, bname, same, diff, flush=True)
        times = {}
        for _ in range(ROUNDS):
            for key, fn in cells.items():
                try:
                    times.setdefault(key, []).append(time_ms(fn, sets, causal))
                except RuntimeError as e:
                    times[key] = [float("nan")]
                    print("error", shape_name, key, str(e).splitlines()[0][:120], flush=True)
        row = {"shape": shape_name, "dims": shape}
        for (vn, m), ts in times.items():
            ms = statistics.median(ts)
            row[f"{vn}:{m}"] = {"ms": ms, "rate": rate(shape, ms), "spread": (max(ts) - min(ts)) / ms}
        res["rows"].append(row)
        print(shape_name, " ".join(f"{k}={v['rate']:.1f}" for k, v in row.items() if isinstance(v, dict)),
              flush=True)
        (args.out / "variants.json").write_text(json.dumps(res, indent=1))  # after every row: a cut run keeps them
        del sets
        torch.cuda.empty_cache()
    if args.sweep:
        tb = list(versions.values())[-1]
        for shape_name in args.sweep.split(","):
            per_method = SWEEP[shape_name]
            shape = SHAPES[shape_name]
            b, h, hkv, s1, s2, d, causal = shape
            sets = inputs(b, h, hkv, s1, s2, d, 2)
            for causal in (False, True) if s1 > 1 else (False,):
                for m, configs in per_method.items():
                    for cfg in configs:
                        try:
                            ms = time_ms(lambda q, k, v, c, cfg=cfg, m=m: run(tb, q, k, v, c, m, cfg)[0], sets, causal)
                            r = rate((*shape[:6], causal), ms)
                        except Exception as e:  # a configuration that does not compile or fit shared memory
                            r = f"error: {str(e).splitlines()[0][:80]}"
                        res["sweep"].append({"shape": shape_name, "causal": causal, "method": m, "config": cfg,
                                             "rate": r})
                        print("sweep", shape_name, causal, m, cfg, r, flush=True)
            del sets
    (args.out / "variants.json").write_text(json.dumps(res, indent=1))
    names = [k for k in res["rows"][0] if ":" in k] if res["rows"] else []
    print("\n| shape | " + " | ".join(names) + " |")
    for row in res["rows"]:
        print(f"| {row['shape']} | " + " | ".join(f"{row[n]['rate']:.1f}" if n in row else "–" for n in names) + " |")


if __name__ == "__main__":
    main()
