"""PageAttention decode on a CUDA GPU: the Triton kernel reading K/V through a block table, the same
kernel on dense K/V, and SDPA on a gathered cache.

    PYTHONPATH=python python3 scripts/bench_paged.py --out DIR [--batches 1 8 64 256] [--kv 1024 8192 32768]

One decode step (S1 = 1), FP16, D = 128, 32 query heads over 8 KV heads, pages of PAGE keys placed in a
shuffled cache. Columns, each the median of ``triton.testing.do_bench``:

* ``paged``: the backend's ``attention`` on the caches (one kernel over all batches reading the table and
  the (B, 3) int32 lengths/bands in place; those built beforehand, as a serving loop keeps them);
* ``paged_call``: the same through ``pasa_npu.fused_attention`` (argument checks, and the backend building
  the lengths on the host and copying them to the GPU on every call);
* ``dense``: the same kernel on contiguous (B, Nkv, S2, D) keys and values (``attention`` too);
* ``sdpa_gather``: ``index_select`` of the pages into a dense cache, then
  ``F.scaled_dot_product_attention(enable_gqa=True)`` (what a framework without a paged kernel does).

Each time is also given as a fraction of the bandwidth ceiling: the K and V bytes a step must read
(2·B·S2·Nkv·D·2) over the time, divided by the device-to-device copy bandwidth measured here (read +
write of a large tensor). Writes results.json and table.md to --out with the device, versions, date and
command. Shapes whose caches do not fit in free memory are skipped and listed.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HEADS, KV_HEADS, D, PAGE = 32, 8, 128, 128
PRECISIONS = ("fp32", "pasa_fp32", "pasa_rs")


def _positive_ints(name, values):
    if not values or any(x < 1 for x in values):
        raise ValueError(f"{name} must be positive integers, got {values}")
    return values


def _copy_bandwidth(do_bench) -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (each byte read once and written once)."""
    src = torch.empty(2**29, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3)


def _case(b, s2, precision, do_bench, backend, pasa_npu):
    """Times (µs) of the three methods on one shape; the paged output checked against the dense one."""
    g = torch.Generator(device="cuda").manual_seed(b * 7 + s2)
    pages = s2 // PAGE
    q = torch.randn(b, HEADS, 1, D, device="cuda", dtype=torch.float16, generator=g)
    kc = torch.randn(b * pages, KV_HEADS, PAGE, D, device="cuda", dtype=torch.float16, generator=g)
    vc = torch.randn(b * pages, KV_HEADS, PAGE, D, device="cuda", dtype=torch.float16, generator=g)
    table = torch.randperm(b * pages, device="cuda", generator=g).to(torch.int32).view(b, pages)
    # Dense copies of the same keys (B, Nkv, S2, D): what the gather produces.
    flat = table.view(-1).long()

    def gather():
        k = kc.index_select(0, flat).view(b, pages, KV_HEADS, PAGE, D).transpose(1, 2).reshape(b, KV_HEADS, s2, D)
        v = vc.index_select(0, flat).view(b, pages, KV_HEADS, PAGE, D).transpose(1, 2).reshape(b, KV_HEADS, s2, D)
        return k, v

    k, v = gather()
    lens = [s2] * b
    kw = dict(num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD", scale=D ** -0.5,
              actual_seq_lengths_kv=lens, precision=precision, backend="triton")
    common = dict(precision=precision, beta=None, block_q=128, block_kv=128, scale=D ** -0.5, mask=None)
    kv_info = torch.tensor([[s2, -1, s2]] * b, dtype=torch.int32, device="cuda")  # length, band (unused)
    paged = lambda: backend.attention(q, kc, vc, block_table=table, page=PAGE, kv_info=kv_info,  # noqa: E731
                                      **common)[0]
    call = lambda: pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=PAGE, **kw)[0]  # noqa: E731
    dense = lambda: backend.attention(q, k, v, **common)[0]  # noqa: E731
    out_p, out_d = call(), dense()
    # Equal lengths: both calls split the same KV blocks over B·Nkv programs, so they agree (recorded as
    # a check: anything beyond an FP16 ulp of the output would be a bug in the paged addressing).
    diff = (out_p.float() - out_d.float()).abs().max().item()
    times = {"paged": do_bench(paged, return_mode="median") * 1e3,
             "paged_call": do_bench(call, return_mode="median") * 1e3,
             "dense": do_bench(dense, return_mode="median") * 1e3}
    if precision == PRECISIONS[0]:
        def sdpa():
            kk, vv = gather()
            return F.scaled_dot_product_attention(q, kk, vv, scale=D ** -0.5, enable_gqa=True)
        times["sdpa_gather"] = do_bench(sdpa, return_mode="median") * 1e3
    del kc, vc, k, v
    return times, diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for results.json and table.md")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--kv", type=int, nargs="+", default=[1024, 8192, 32768], help="key lengths (multiples of 128)")
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    args = ap.parse_args(argv)
    _positive_ints("--batches", args.batches)
    _positive_ints("--kv", args.kv)
    if any(s % PAGE for s in args.kv):
        raise ValueError(f"--kv must be multiples of the page length {PAGE}, got {args.kv}")
    if not torch.cuda.is_available():
        sys.exit("bench_paged.py needs a CUDA GPU (torch.cuda.is_available() is False): it times the Triton "
                 "kernel and SDPA on the device; the CPU interpreter path is tested by tests/test_paged.py")
    import triton
    from triton.testing import do_bench

    import pasa_npu
    from pasa_npu.backends import triton as backend

    start = time.time()
    bw = _copy_bandwidth(do_bench)
    rows, skipped = [], []
    for s2 in args.kv:
        for b in args.batches:
            kv_bytes = 2 * b * s2 * KV_HEADS * D * 2
            # Caches, their dense copies and the gathered ones: about 3× the K/V bytes, plus headroom.
            if 3 * kv_bytes + 2**30 > torch.cuda.mem_get_info()[0]:
                skipped.append({"batch": b, "kv": s2, "reason": f"needs ~{3 * kv_bytes / 2**30:.1f} GiB"})
                continue
            for precision in args.precisions:
                times, diff = _case(b, s2, precision, do_bench, backend, pasa_npu)
                torch.cuda.empty_cache()
                for method, us in times.items():
                    rows.append({"batch": b, "kv": s2, "precision": precision if method != "sdpa_gather" else "fp16",
                                 "method": method, "us": round(us, 2),
                                 "bw_fraction": round(kv_bytes / (us * 1e-6) / bw, 4),
                                 "max_abs_diff_paged_vs_dense": diff if method == "paged_call" else None})
                print(f"B={b:4d} KV={s2:6d} {precision:10s} " + "  ".join(f"{m} {t:9.1f} µs" for m, t in times.items()),
                      flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join([sys.executable, *sys.argv]), "copy_bandwidth_GBps": round(bw / 1e9, 1),
            "shape": {"heads": HEADS, "kv_heads": KV_HEADS, "head_dim": D, "page": PAGE, "s1": 1},
            "seconds": round(time.time() - start, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, "skipped": skipped}, indent=1))
    lines = [f"# Paged decode on {meta['device']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}; `{meta['command']}`", "",
             f"S1 = 1, {HEADS} query / {KV_HEADS} KV heads, D = {D}, pages of {PAGE}; median µs of do_bench and "
             f"the fraction of the K/V bytes' copy-bandwidth ceiling ({meta['copy_bandwidth_GBps']} GB/s measured).",
             "", "| batch | KV | precision | method | µs | of ceiling | paged − dense max abs |",
             "|---:|---:|---|---|---:|---:|---:|"]
    for r in rows:
        diff = "" if r["max_abs_diff_paged_vs_dense"] is None else f"{r['max_abs_diff_paged_vs_dense']:.2g}"
        lines.append(f"| {r['batch']} | {r['kv']} | {r['precision']} | {r['method']} | {r['us']:.1f} | "
                     f"{r['bw_fraction']:.3f} | {diff} |")
    for s in skipped:
        lines.append(f"\nSkipped B={s['batch']} KV={s['kv']}: {s['reason']}")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}/results.json and table.md ({meta['seconds']} s)")


if __name__ == "__main__":
    main()
