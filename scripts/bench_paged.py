"""PageAttention decode and prefill on a CUDA GPU: the Triton kernel reading K/V through a block table,
the same kernel on dense K/V, and SDPA on a gathered cache.

    PYTHONPATH=python python3 scripts/bench_paged.py --out DIR [--batches 1 8 64 256] [--kv 1024 8192 32768]
        [--prefill-batches 1 8] [--prefill-lens 1024 4096 8192] [--parts decode prefill]

FP16, D = 128, 32 query heads over 8 KV heads, pages of PAGE keys placed in a shuffled cache. Decode: one
step (S1 = 1) over KV keys. Prefill: a prompt of L tokens attending causally to its own L keys, already
written to the paged cache (S1 = S2 = L; the pre-passes of ``pasa_rs`` read the pages too). Columns, each
the median of ``triton.testing.do_bench``:

* ``paged``: the backend's ``attention`` on the caches (one kernel over all batches reading the table and
  the (B, 3) int32 lengths/bands in place; those built beforehand, as a serving loop keeps them);
* ``paged_call``: the same through ``pasa_npu.fused_attention`` (argument checks, and the backend building
  the lengths on the host and copying them to the GPU on every call);
* ``dense``: the same kernel on contiguous (B, Nkv, S2, D) keys and values (``attention`` too);
* ``sdpa_gather``: ``index_select`` of the pages into a dense cache, then
  ``F.scaled_dot_product_attention(enable_gqa=True)`` (what a framework without a paged kernel does;
  causal for prefill).

A decode time is also given as a fraction of the bandwidth ceiling: the K and V bytes a step must read
(2·B·S2·Nkv·D·2) over the time, divided by the device-to-device copy bandwidth measured here (read +
write of a large tensor); a prefill time as TFLOP/s of the causal attention's 2·B·N·L²·D multiply-adds
(half of the full square). Writes results.json and table.md to --out with the device, versions, date
and command. Shapes whose caches do not fit in free memory are skipped and listed.
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
PRECISIONS = ("fp32_frame", "fp32", "pasa_fp32", "pasa_rs")


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


def _caches(b, s2, g):
    """Caches (B·pages, Nkv, PAGE, D) holding B sequences of s2 keys in shuffled pages, their (B, pages)
    int32 table, and the gather of the pages into dense (B, Nkv, s2, D) keys and values."""
    pages = s2 // PAGE
    kc = torch.randn(b * pages, KV_HEADS, PAGE, D, device="cuda", dtype=torch.float16, generator=g)
    vc = torch.randn(b * pages, KV_HEADS, PAGE, D, device="cuda", dtype=torch.float16, generator=g)
    table = torch.randperm(b * pages, device="cuda", generator=g).to(torch.int32).view(b, pages)
    flat = table.view(-1).long()

    def gather():
        return tuple(c.index_select(0, flat).view(b, pages, KV_HEADS, PAGE, D).transpose(1, 2)
                     .reshape(b, KV_HEADS, s2, D) for c in (kc, vc))
    return kc, vc, table, gather


def _case(b, s2, precision, do_bench, backend, pasa_npu):
    """Decode: times (µs) of the methods on one shape; the paged output checked against the dense one."""
    g = torch.Generator(device="cuda").manual_seed(b * 7 + s2)
    q = torch.randn(b, HEADS, 1, D, device="cuda", dtype=torch.float16, generator=g)
    kc, vc, table, gather = _caches(b, s2, g)
    k, v = gather()  # dense copies of the same keys: what the gather produces
    kw = dict(num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD", scale=D ** -0.5,
              actual_seq_lengths_kv=[s2] * b, precision=precision, backend="triton")
    common = dict(precision=precision, beta=None, block_q=128, block_kv=128, scale=D ** -0.5, mask=None)
    kv_info = torch.tensor([[1, s2, -1, s2, 0]] * b, dtype=torch.int32, device="cuda")  # lengths, band (unused)
    paged = lambda: backend.attention(q, kc, vc, block_table=table, page=PAGE, kv_info=kv_info,  # noqa: E731
                                      **common)[0]
    call = lambda: pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=PAGE, **kw)[0]  # noqa: E731
    dense = lambda: backend.attention(q, k, v, **common)[0]  # noqa: E731
    out_p, out_d = call(), dense()
    # Equal lengths: both calls split the same KV blocks over B·Nkv programs, so they agree (recorded as
    # a check: anything beyond an FP16 ulp of the output would be a bug in the paged addressing).
    diff = (out_p.float() - out_d.float()).abs().max().item()
    def sdpa():
        kk, vv = gather()
        return F.scaled_dot_product_attention(q, kk, vv, scale=D ** -0.5, enable_gqa=True)
    return _times(do_bench, precision, paged=paged, paged_call=call, dense=dense, sdpa_gather=sdpa), diff


def _times(do_bench, precision, **methods):
    """Median µs of each method; SDPA on the gathered cache (the last method) only with the first
    precision, since it does not depend on ours."""
    if precision != PRECISIONS[0]:
        methods.pop("sdpa_gather")
    return {name: do_bench(fn, return_mode="median") * 1e3 for name, fn in methods.items()}


def _prefill_case(b, s, precision, do_bench, backend, pasa_npu):
    """Prefill: L = s queries, causal over their own s keys in the paged cache; times (µs) of the methods
    and the largest difference between the paged call and the dense kernel."""
    g = torch.Generator(device="cuda").manual_seed(b * 11 + s)
    q = torch.randn(b, HEADS, s, D, device="cuda", dtype=torch.float16, generator=g)
    kc, vc, table, gather = _caches(b, s, g)
    k, v = gather()
    compressed = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="cuda"), diagonal=1)
    kw = dict(num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD", scale=D ** -0.5,
              actual_seq_lengths_kv=[s] * b, sparse_mode=3, atten_mask=compressed, precision=precision,
              backend="triton")
    common = dict(precision=precision, beta=None, block_q=128, block_kv=128, scale=D ** -0.5, mask=None)
    kv_info = torch.tensor([[s, s, -s, 0, 0]] * b, dtype=torch.int32, device="cuda")  # lengths, causal band
    paged = lambda: backend.attention(q, kc, vc, band=(0, 0), block_table=table, page=PAGE,  # noqa: E731
                                      kv_info=kv_info, **common)[0]
    call = lambda: pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=PAGE, **kw)[0]  # noqa: E731
    dense = lambda: backend.attention(q, k, v, band=(None, 0), **common)[0]  # noqa: E731
    # Same tiles, blocks and pre-pass on both sides: the paged result must equal the dense one exactly.
    diff = (call().float() - dense().float()).abs().max().item()
    def sdpa():
        kk, vv = gather()
        return F.scaled_dot_product_attention(q, kk, vv, scale=D ** -0.5, is_causal=True, enable_gqa=True)
    return _times(do_bench, precision, paged=paged, paged_call=call, dense=dense, sdpa_gather=sdpa), diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for results.json and table.md")
    ap.add_argument("--parts", nargs="+", default=["decode", "prefill"], choices=["decode", "prefill"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 256], help="decode batches")
    ap.add_argument("--kv", type=int, nargs="+", default=[1024, 8192, 32768],
                    help="decode key lengths (multiples of 128)")
    ap.add_argument("--prefill-batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prefill-lens", type=int, nargs="+", default=[1024, 4096, 8192],
                    help="prefill prompt lengths L = S1 = S2 (multiples of 128)")
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    args = ap.parse_args(argv)
    for name in ("batches", "kv", "prefill_batches", "prefill_lens"):
        _positive_ints("--" + name.replace("_", "-"), getattr(args, name))
    if any(s % PAGE for s in args.kv + args.prefill_lens):
        raise ValueError(f"--kv and --prefill-lens must be multiples of the page length {PAGE}, got "
                         f"{args.kv} and {args.prefill_lens}")
    if not torch.cuda.is_available():
        sys.exit("bench_paged.py needs a CUDA GPU (torch.cuda.is_available() is False): it times the Triton "
                 "kernel and SDPA on the device; the CPU interpreter path is tested by tests/serving/test_paged.py")
    import triton
    from triton.testing import do_bench

    import pasa_npu
    from pasa_npu.accuracy import source_commit
    from pasa_npu.backends import triton as backend

    start = time.time()
    bw = _copy_bandwidth(do_bench)
    rows, skipped = [], []
    shapes = []
    if "decode" in args.parts:
        shapes += [("decode", b, 1, s2) for s2 in args.kv for b in args.batches]
    if "prefill" in args.parts:
        shapes += [("prefill", b, s, s) for s in args.prefill_lens for b in args.prefill_batches]
    for part, b, s1, s2 in shapes:
        kv_bytes = 2 * b * s2 * KV_HEADS * D * 2
        # Caches, their dense copies and the gathered ones: about 3× the K/V bytes; the query and output,
        # 2× the query bytes; plus headroom.
        need = 3 * kv_bytes + 4 * b * HEADS * s1 * D + 2**31
        if need > torch.cuda.mem_get_info()[0]:
            skipped.append({"part": part, "batch": b, "s1": s1, "kv": s2, "reason": f"needs ~{need / 2**30:.1f} GiB"})
            continue
        for precision in args.precisions:
            case = _case if part == "decode" else _prefill_case
            times, diff = case(b, s2, precision, do_bench, backend, pasa_npu)
            torch.cuda.empty_cache()
            flops = 2 * b * HEADS * s1 * s2 * D  # causal prefill: half of 4·B·N·L²·D
            for method, us in times.items():
                rows.append({"part": part, "batch": b, "s1": s1, "kv": s2,
                             "precision": precision if method != "sdpa_gather" else "fp16", "method": method,
                             "us": round(us, 2),
                             "bw_fraction": round(kv_bytes / (us * 1e-6) / bw, 4) if part == "decode" else None,
                             "tflops": round(flops / (us * 1e-6) / 1e12, 1) if part == "prefill" else None,
                             "max_abs_diff_paged_vs_dense": diff if method == "paged_call" else None})
            print(f"{part} B={b:4d} S1={s1:5d} KV={s2:6d} {precision:10s} "
                  + "  ".join(f"{m} {t:9.1f} µs" for m, t in times.items()), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join([sys.executable, *sys.argv]), "commit": source_commit(),
            "copy_bandwidth_GBps": round(bw / 1e9, 1),
            "shape": {"heads": HEADS, "kv_heads": KV_HEADS, "head_dim": D, "page": PAGE},
            "seconds": round(time.time() - start, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, "skipped": skipped}, indent=1))
    lines = [f"# Paged attention on {meta['device']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, Python {meta['python']}; "
             f"`{meta['command']}`", "",
             f"{HEADS} query / {KV_HEADS} KV heads, D = {D}, pages of {PAGE} in a shuffled cache; median µs of "
             "do_bench. paged: the kernel on the caches; paged_call: the same through fused_attention; dense: "
             "the kernel on contiguous K/V; sdpa_gather: the pages gathered, then PyTorch SDPA (FP16)."]
    if any(r["part"] == "decode" for r in rows):
        lines += ["", "## Decode (S1 = 1)", "",
                  f"Fraction of the K/V bytes' copy-bandwidth ceiling ({meta['copy_bandwidth_GBps']} GB/s measured).",
                  "", "| batch | KV | precision | method | µs | of ceiling | paged − dense max abs |",
                  "|---:|---:|---|---|---:|---:|---:|"]
        for r in rows:
            if r["part"] == "decode":
                lines.append(f"| {r['batch']} | {r['kv']} | {r['precision']} | {r['method']} | {r['us']:.1f} | "
                             f"{r['bw_fraction']:.3f} | {_diff(r)} |")
    if any(r["part"] == "prefill" for r in rows):
        lines += ["", "## Prefill (S1 = S2 = L, causal)", "",
                  "TFLOP/s of the causal attention (2·B·N·L²·D multiply-adds).", "",
                  "| batch | L | precision | method | µs | TFLOP/s | paged − dense max abs |",
                  "|---:|---:|---|---|---:|---:|---:|"]
        for r in rows:
            if r["part"] == "prefill":
                lines.append(f"| {r['batch']} | {r['s1']} | {r['precision']} | {r['method']} | {r['us']:.1f} | "
                             f"{r['tflops']:.1f} | {_diff(r)} |")
    for s in skipped:
        lines.append(f"\nSkipped {s['part']} B={s['batch']} S1={s['s1']} KV={s['kv']}: {s['reason']}")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}/results.json and table.md ({meta['seconds']} s)")


def _diff(row) -> str:
    d = row["max_abs_diff_paged_vs_dense"]
    return "" if d is None else f"{d:.2g}"


if __name__ == "__main__":
    main()
