"""Per-call time of the public call, ``pasa_npu.fused_attention``, against PyTorch's SDPA (CUDA).

What a user pays per call in eager mode: argument handling, backend dispatch and the kernels, timed
as the wall time of many back-to-back calls with one synchronisation at the end (so host overhead
that the GPU cannot hide shows), after warm-up. Shapes: decode (B × 32 query / 8 KV heads, one query,
4096 keys, D = 128) at batch 1 and 8, and a 512 × 512 prefill (on an sm_90 GPU the Gluon kernel's, by the rule of
``pasa_npu.backends.triton.gluon_block``). Also: the same calls replayed from a captured CUDA graph, and under
``torch.compile``.

    PYTHONPATH=python python3 scripts/bench_call.py --out docs/benchmarks/call

writes ``call.json`` and ``call.md`` (device, versions, date, this command) into ``--out``; with
``--profile`` instead ``breakdown.md``: the host time of each stage of a call and each kernel's device time.
``--versions NAME=PKG ...`` times the ``fused_attention`` of each package (a directory holding a ``pasa_npu``
package, imported under its own name as in ``bench_variants.py``) in place of this one's, in the same rounds:
the A/B of a change to the call's host path.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

import pasa_npu

SHAPES = {  # name: (B, N, Nkv, S1, S2, D)
    "decode_b1": (1, 32, 8, 1, 4096, 128),
    "decode_b8": (8, 32, 8, 1, 4096, 128),
    "prefill_512": (1, 32, 8, 512, 512, 128),
}


def _per_call(fn, calls: int, repeats: int, *, until_done: bool, warmup: int = 10, best: bool = False) -> float:
    """Median (``best``: minimum) over ``repeats`` of the time of ``calls`` back-to-back calls after ``warmup``
    calls, µs per call: until the GPU has finished them (one sync at the end: the wall time a caller sees),
    or only the host's time issuing them (no sync inside the timed loop)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if until_done:
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return min(samples) if best else _median(samples)


def _interleaved_wall(fns: dict, calls: int, repeats: int) -> dict[str, list[float]]:
    """Wall µs per call of back-to-back calls of each of ``fns`` (one sync at the end), ``repeats`` samples
    each, taken in rounds that visit every function once: the host's speed drifts (±30% between runs on
    the H100 machine), and alternating puts the drift on all of them alike."""
    for fn in fns.values():
        for _ in range(10):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_per_call(fn, calls, 1, until_done=True, warmup=0))
    return samples


def _median(xs) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _wall_per_call(fn, calls: int, repeats: int) -> float:
    """Wall time per call of back-to-back calls and one sync, µs (median over ``repeats``)."""
    return _per_call(fn, calls, repeats, until_done=True)


def _graph_per_call(fn, calls: int, repeats: int) -> float:
    """The same call captured once in a CUDA graph and replayed: device time per call, µs."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _wall_per_call(graph.replay, calls, repeats)


@contextlib.contextmanager
def _gluon_rule_sends(kernel: str):
    """The public call's Hopper kernel pinned for the block: the Gluon rule's work threshold
    (``pasa_npu.backends.triton.GLUON_MIN_WORK``) at 0 for ``kernel`` "gluon", beyond any call for "classic", and the
    kept plans dropped so that the next call plans again; the threshold restored after."""
    from pasa_npu import interface
    from pasa_npu.backends import triton as tb
    rule = tb.GLUON_MIN_WORK
    tb.GLUON_MIN_WORK = 0 if kernel == "gluon" else 2 ** 62
    interface._PLANS.clear()
    try:
        yield
    finally:
        tb.GLUON_MIN_WORK = rule


def _host_per_call(fn, calls: int, repeats: int) -> float:
    """Host time per call of back-to-back calls, µs (median over ``repeats``): the time the host spends
    issuing them."""
    return _per_call(fn, calls, repeats, until_done=False)


def _kernel_times(fn, calls: int = 30) -> list[tuple[str, float]]:
    """(kernel name, device µs per call) of what one call runs, from the PyTorch profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = []
    for ev in prof.key_averages():
        dev = getattr(ev, "device_time_total", 0)
        if dev > 0:
            times.append((ev.key.split("(")[0][:40], dev / calls))
    return sorted(times, key=lambda t: -t[1])


def _profile(precisions, out: Path, calls: int, repeats: int, command: str) -> int:
    """Where an eager call's time goes: host µs of a planned call (a repeated signature) and of each of its
    stages (its signature, the plan's allocations and Python, its kernel launches), of an unplanned
    call (validation, backend selection, run, finish), the device time of each kernel, written to
    breakdown.md; then a cProfile of the host side of 500 decode_b1 calls."""
    import cProfile
    import pstats

    from pasa_npu import interface
    from pasa_npu.backends import triton_launch
    from pasa_npu.problem import call_signature

    lines = ["| shape | precision | eager wall | host: call | signature | plan: Python, allocations | plan: launches "
             "| rest (the call's wrapper) | host: unplanned call | device: graph replay "
             "| kernels (device µs) |", "|---" * 11 + "|"]
    for name, (b, n, nkv, s1, s2, d) in SHAPES.items():
        q = torch.randn(b, n, s1, d, device="cuda", dtype=torch.float16)
        k = torch.randn(b, nkv, s2, d, device="cuda", dtype=torch.float16)
        v = torch.randn(b, nkv, s2, d, device="cuda", dtype=torch.float16)
        for precision in ["sdpa", *precisions]:
            kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, precision=precision)
            if precision == "sdpa":
                def call():
                    return F.scaled_dot_product_attention(q, k, v, scale=d ** -0.5, enable_gqa=True)
            else:
                def call(kw=kw):
                    return pasa_npu.fused_attention(q, k, v, **kw)
            cells = [name, precision, _wall_per_call(call, calls, repeats), _host_per_call(call, calls, repeats)]
            if precision != "sdpa":
                seen = {}
                real = interface._fused_attention
                interface._fused_attention = lambda *args: seen.setdefault("options", args[3]) and real(*args)
                try:
                    call()
                finally:
                    interface._fused_attention = real
                plan = interface._PLANS[call_signature(q, k, v, seen["options"])]
                stages = [_host_per_call(lambda: call_signature(q, k, v, seen["options"]), calls, repeats)]
                launch = triton_launch.Launch.__call__
                # The plan's Python and allocations alone.
                triton_launch.Launch.__call__ = lambda self, tensors, **options: None
                def planned():  # no mask, table, sink or device lengths
                    return plan.run(q, k, v, None, None, None, None)
                try:
                    stages.append(_host_per_call(planned, calls, repeats))
                finally:
                    triton_launch.Launch.__call__ = launch
                stages.append(_host_per_call(planned, calls, repeats) - stages[-1])
                cells += stages + [cells[3] - sum(stages)]

                def unplanned(kw=kw):  # every call the first with its signature
                    interface._PLANS.clear()
                    return pasa_npu.fused_attention(q, k, v, **kw)
                cells.append(_host_per_call(unplanned, calls, repeats))
            else:
                cells += ["–"] * 5
            try:
                cells.append(_graph_per_call(call, calls, repeats))
            except RuntimeError:  # an allocation whose safety net needs a sync cannot be captured
                cells.append("refused")
            kernels = ", ".join(f"{k_} {t:.1f}" for k_, t in _kernel_times(call))
            lines.append("| " + " | ".join(c if isinstance(c, str) else f"{c:.1f}" for c in cells) + f" | {kernels} |")
            print(lines[-1])
    import triton

    head = [f"# Where fused_attention's eager per-call time goes ({torch.cuda.get_device_name()})", "",
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}, torch {torch.__version__}, triton "
            f"{triton.__version__}, Python {platform.python_version()}; `{command}`.",
            "µs per call, medians. Eager wall: back-to-back calls, one sync at the end (as in call.md). Host: the "
            "host time of issuing a call with a repeated signature (a planned call, docs/fia.md), then of each "
            "stage alone: its signature, the plan with its Triton launches replaced by nothing (its Python and "
            "tensor allocations), the launches (the plan's time with them, less that), "
            "and the rest (the call's wrapper: argument passing); then a call whose signature is new (validation, "
            "backend selection, run, finish). Device: CUDA-graph replays of the call, and each kernel's time from "
            "the PyTorch profiler.", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / "breakdown.md").write_text("\n".join(head + lines) + "\n")

    b, n, nkv, s1, s2, d = SHAPES["decode_b1"]
    q = torch.randn(b, n, s1, d, device="cuda", dtype=torch.float16)
    k = torch.randn(b, nkv, s2, d, device="cuda", dtype=torch.float16)
    for precision in precisions:
        def call():
            return pasa_npu.fused_attention(q, k, k, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                                            scale=d ** -0.5, precision=precision)

        for _ in range(20):
            call()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            call()
        torch.cuda.synchronize()
        prof.disable()
        print(f"== {precision}: host time of 500 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


def _versions(specs: list[str], tmp: Path) -> dict:
    """NAME=PKG specs -> {label prefix: the package's fused_attention}, each package imported as ``pasa_NAME``
    (``bench_variants.load``); none: this package's, unlabelled."""
    if not specs:
        return {"": pasa_npu.fused_attention}
    from bench_variants import load

    calls = {}
    for spec in specs:
        name, _, pkg = spec.partition("=")
        load(name, Path(pkg), tmp)
        calls[f"{name}:"] = importlib.import_module(f"pasa_{name}").fused_attention
    return calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for call.json and call.md")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--precisions", nargs="+", default=[pasa_npu.DEFAULT_PRECISION, "fp32"])
    parser.add_argument("--profile", action="store_true",
                        help="instead: where each call's time goes (breakdown.md in --out), and a cProfile of the "
                             "host side of 500 decode_b1 calls per precision")
    parser.add_argument("--versions", nargs="+", default=[], metavar="NAME=PKG",
                        help="time each package's fused_attention (a directory holding pasa_npu) side by side")
    parser.add_argument("--no-compiled", action="store_true", help="skip the torch.compile column")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_call.py needs a CUDA GPU", file=sys.stderr)
        return 2
    command = "PYTHONPATH=python python3 scripts/bench_call.py " + " ".join(argv or sys.argv[1:])
    if args.profile:
        return _profile(args.precisions, Path(args.out), args.calls, args.repeats, command)
    tmp = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(tmp))
    versions = _versions(args.versions, tmp)
    labels = [f"{v}{p}" for v in versions for p in args.precisions]
    rows = []
    for name, (b, n, nkv, s1, s2, d) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, n, s1, d, device="cuda", dtype=torch.float16, generator=g)
        k = torch.randn(b, nkv, s2, d, device="cuda", dtype=torch.float16, generator=g)
        v = torch.randn(b, nkv, s2, d, device="cuda", dtype=torch.float16, generator=g)
        scale = d ** -0.5

        def sdpa():
            return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)

        fns = {"sdpa": sdpa}
        for version, attend in versions.items():
            for precision in args.precisions:
                def call(attend=attend, precision=precision):
                    return attend(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=scale,
                                  precision=precision)
                fns[version + precision] = call
        eager = _interleaved_wall(fns, args.calls, args.repeats)
        row = dict(shape=name, B=b, N=n, Nkv=nkv, S1=s1, S2=s2, D=d, sdpa_us=_median(eager["sdpa"]),
                   sdpa_graph_us=_graph_per_call(sdpa, args.calls, args.repeats))
        for precision in labels:
            call = fns[precision]
            row[f"{precision}_us"] = _median(eager[precision])
            # The ratio of each round's two samples: the drift between rounds cancels.
            row[f"{precision}_vs_sdpa"] = _median(x / y for x, y in zip(eager[precision], eager["sdpa"]))
            row[f"{precision}_vs_sdpa_range"] = [min(x / y for x, y in zip(eager[precision], eager["sdpa"])),
                                                 max(x / y for x, y in zip(eager[precision], eager["sdpa"]))]
            try:
                row[f"{precision}_graph_us"] = _graph_per_call(call, args.calls, args.repeats)
            except RuntimeError as e:  # an allocation whose safety net needs a sync cannot be captured
                row[f"{precision}_graph_us"] = None
                row[f"{precision}_graph_error"] = str(e).splitlines()[0]
            if not args.no_compiled:
                torch._dynamo.reset()
                compiled = torch.compile(call, fullgraph=True)
                row[f"{precision}_compiled_us"] = _wall_per_call(compiled, args.calls, args.repeats)
        rows.append(row)
        print(json.dumps(row))

    import triton

    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                python=platform.python_version(), date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                command=command,
                calls=args.calls, repeats=args.repeats)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "call.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    lines = [f"# fused_attention per-call time vs SDPA ({meta['device']})", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}; `{meta['command']}`.",
             "Eager: median wall time per call over back-to-back calls (one sync at the end), SDPA and each "
             "precision measured in alternating rounds; /SDPA: the median of each round's ratio [its range over "
             f"the {args.repeats} rounds]. Graph: replays of a captured CUDA graph. Compiled: "
             "torch.compile(fullgraph=True). µs.", "",
             "| shape | SDPA | SDPA graph | " + " | ".join(f"{p} | {p} graph | {p} compiled | {p}/SDPA"
                                                    for p in labels) + " |",
             "|---" * (3 + 4 * len(labels)) + "|"]
    for r in rows:
        cells = [r["shape"], f"{r['sdpa_us']:.1f}", f"{r['sdpa_graph_us']:.1f}"]
        for p in labels:
            graph = r[f"{p}_graph_us"]
            cells += [f"{r[f'{p}_us']:.1f}", "refused" if graph is None else f"{graph:.1f}",
                      f"{r[f'{p}_compiled_us']:.1f}" if f"{p}_compiled_us" in r else "–",
                      "{:.2f} [{:.2f}–{:.2f}]".format(r[f"{p}_vs_sdpa"], *r[f"{p}_vs_sdpa_range"])]
        lines.append("| " + " | ".join(cells) + " |")
    (out / "call.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
