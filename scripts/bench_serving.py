"""A serving step on a CUDA GPU: mixed batches of prefill, 1-token decode and 4-token speculative requests
over a paged KV cache, as one TND call with a block table, against the same requests one by one and
against SDPA on a gathered cache.

    PYTHONPATH=python python3 scripts/bench_serving.py --out DIR [--mixes A B C] [--precisions fp32_frame pasa_rs fp32]

FP16, 32 query heads over 8 KV heads, D = 128, pages of 128 keys in a shuffled cache, causal from the
bottom-right corner (FIA's sparse_mode 3: each request's query rows are its last tokens). Each mix is a
list of (requests, query rows, key length) groups (:data:`MIXES`). Methods, each the median of
``triton.testing.do_bench`` over the whole step:

* ``tnd_call``: ``pasa_npu.fused_attention_v2`` once, ``input_layout="TND"`` with the table, host lengths
  (the public call, validation included: a repeated call is planned, see docs/fia.md);
* ``tnd_graph``: ``pasa_npu.fused_attention_v2_out`` with its workspace and the lengths as CUDA tensors,
  captured in a CUDA graph and replayed (device time: what a server's graph replay costs);
* ``one_by_one``: the same requests through ``pasa_npu.fused_attention_v2``, one TND call with the table per
  request, in sequence;
* ``sdpa_gathered``: ``F.scaled_dot_product_attention(enable_gqa=True)`` per request on its keys gathered
  beforehand into dense tensors (the gather not timed; a bottom-right causal mask where a request has
  fewer query rows than keys), in sequence; ``sdpa_graph`` the same captured in a CUDA graph; ``gather``
  times that gather of every request's pages.

The TND call's and the graph's outputs are compared with a float32 SDPA on the gathered keys (the largest
relative RMS error over the requests and the two). Writes results.json and README.md to --out with the
device, versions, date and command.

Replay mode: the calls of a recorded trace (``pasa_npu.patch_torch_npu(record=PATH)`` in the serving process,
see docs/integrations/serving.md), each timed as it ran there, on this machine's GPU (``--device cpu`` for a
smoke check: host timings, not a benchmark)::

    PYTHONPATH=python python3 scripts/bench_serving.py --replay PATH --out DIR [--precisions fp32_frame]

Each call is rebuilt from the trace (:mod:`pasa_npu.integrations.trace`): its lengths and block tables as
recorded, queries and caches random (normal, FP16 or as recorded), masks the causal mask each entry point's
rule reads (sparse modes 2-4's compressed mask, ATB's causal mask rows; a content mask of sparse mode 0/1
replays as an upper-triangular one of its shape). Methods, median µs per call:

* ``entry``: the call through the patched entry point (a stand-in torch_npu module, so the patch's own
  translation and validation run, as in the serving process);
* ``fia``: ``pasa_npu.fused_attention`` on the FIA call the entry point translates to (the entry points other
  than FIA's own);
* ``sdpa``: ``F.scaled_dot_product_attention(enable_gqa=True)`` on the same attention, one call per dense
  piece of it (a batch's valid rows and keys, paged keys gathered beforehand and not timed), in sequence.

A call pasa-npu declines (its route in the trace) is listed with its reason and not timed; workspace queries
are not replayed.
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
#: name -> [(requests, query rows each, key length each)]: a prefill (query rows = keys), a chunked
#: prefill (fewer rows than keys), 1-token decode and 4-token speculative requests.
MIXES = {
    "A": [(1, 1024, 1024), (16, 1, 4096), (8, 4, 4096)],
    "B": [(2, 512, 4096), (64, 1, 8192), (16, 4, 8192)],
    "C": [(128, 1, 4096), (32, 4, 4096)],
}
#: The allocations compared, the default first (the replay's default, the patch's, is that first one alone).
PRECISIONS = ("fp32_frame", "pasa_rs", "fp32")


def _step(mix, g):
    """The step's TND query, its caches (num_blocks, PAGE, Nkv·D) with every request's pages shuffled, the
    table, the cumulative query lengths and key lengths, and each request's (rows, keys)."""
    requests = [(r, c) for count, r, c in mix for _ in range(count)]
    pages = [-(-c // PAGE) for _, c in requests]
    width, total = max(pages), sum(pages)
    kc = torch.randn(total, PAGE, KV_HEADS * D, device="cuda", dtype=torch.float16, generator=g)
    vc = torch.randn(total, PAGE, KV_HEADS * D, device="cuda", dtype=torch.float16, generator=g)
    order = torch.randperm(total, device="cuda", generator=g).to(torch.int32)
    table = torch.zeros(len(requests), width, dtype=torch.int32, device="cuda")
    start = 0
    for i, p in enumerate(pages):
        table[i, :p] = order[start:start + p]
        start += p
    cum, acc = [], 0
    for r, _ in requests:
        acc += r
        cum.append(acc)
    q = torch.randn(acc, HEADS, D, device="cuda", dtype=torch.float16, generator=g)
    return q, kc, vc, table, cum, [c for _, c in requests], requests


def _gather(kc, vc, table, requests):
    """Each request's keys and values as dense (1, Nkv, keys, D) tensors."""
    out = []
    for i, (_, c) in enumerate(requests):
        rows = table[i, :-(-c // PAGE)].long()
        out.append(tuple(t.index_select(0, rows).view(-1, KV_HEADS, D)[:c].transpose(0, 1)[None] for t in (kc, vc)))
    return out


def _sdpa_masks(requests):
    """Per request: None (decode, or query rows = keys: is_causal) or the bottom-right causal bool mask."""
    masks = []
    for r, c in requests:
        if r == 1 or r == c:
            masks.append(None)
        else:
            i = torch.arange(r, device="cuda")[:, None]
            masks.append(torch.arange(c, device="cuda")[None, :] <= i + (c - r))
    return masks


def _sdpa(q, cum, requests, kv, masks, dtype=torch.float16):
    outs, q0 = [], 0
    for (r, c), (k, v), mask, q1 in zip(requests, kv, masks, cum):
        qq = q[q0:q1].transpose(0, 1)[None].to(dtype)
        outs.append(F.scaled_dot_product_attention(qq, k.to(dtype), v.to(dtype), attn_mask=mask,
                                                   is_causal=mask is None and r > 1, scale=D ** -0.5,
                                                   enable_gqa=True)[0].transpose(0, 1))
        q0 = q1
    return outs


def _graph_time(do_bench, fn) -> float:
    """Median ms of replaying ``fn`` captured in a CUDA graph (after two warm-up calls)."""
    fn()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, return_mode="median")


def _case(mix, precision, do_bench, pasa_npu):
    g = torch.Generator(device="cuda").manual_seed(len(mix) * 31 + sum(r for _, r, _ in mix))
    q, kc, vc, table, cum, kv_lens, requests = _step(mix, g)
    compressed = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="cuda"), diagonal=1)
    kw = dict(num_query_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="TND", softmax_scale=D ** -0.5,
              block_size=PAGE, sparse_mode=3, atten_mask=compressed, precision=precision)

    def tnd_call():
        return pasa_npu.fused_attention_v2(q, kc, vc, block_table=table, actual_seq_qlen=cum, actual_seq_kvlen=kv_lens,
                                           **kw)[0]

    cum_t = torch.tensor(cum, dtype=torch.int32, device="cuda")
    kv_t = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    out, lse = torch.empty_like(q), torch.empty(1, device="cuda")
    workspace = pasa_npu.fused_attention_v2_workspace(q, kc, vc, block_table=table, actual_seq_qlen=cum_t,
                                                      actual_seq_kvlen=kv_t, **kw)

    def tnd_out():
        pasa_npu.fused_attention_v2_out(q, kc, vc, block_table=table, actual_seq_qlen=cum_t, actual_seq_kvlen=kv_t,
                                        out=(out, lse), workspace=workspace, **kw)

    singles, q0 = [], 0
    for i, q1 in enumerate(cum):
        singles.append((q[q0:q1], table[i:i + 1], [q1 - q0], [kv_lens[i]]))
        q0 = q1

    def one_by_one():
        for qq, tt, qc, kc_len in singles:
            pasa_npu.fused_attention_v2(qq, kc, vc, block_table=tt, actual_seq_qlen=qc, actual_seq_kvlen=kc_len, **kw)

    kv = _gather(kc, vc, table, requests)
    masks = _sdpa_masks(requests)
    want = _sdpa(q.float(), cum, requests, kv, masks, torch.float32)
    times = {"tnd_call": do_bench(tnd_call, return_mode="median"),
             "tnd_graph": _graph_time(do_bench, tnd_out),
             "one_by_one": do_bench(one_by_one, return_mode="median")}
    if precision == PRECISIONS[0]:  # SDPA and the gather do not depend on the precision
        times["sdpa_gathered"] = do_bench(lambda: _sdpa(q, cum, requests, kv, masks), return_mode="median")
        times["sdpa_graph"] = _graph_time(do_bench, lambda: _sdpa(q, cum, requests, kv, masks))
        times["gather"] = do_bench(lambda: _gather(kc, vc, table, requests), return_mode="median")
    # The call's and the graph's outputs (the graph sizes its tiles for T query rows per request, so its
    # decode may split the keys otherwise) against float32 SDPA.
    err = max(_error(o, want, cum) for o in (tnd_call(), out))
    return {m: round(ms * 1e3, 1) for m, ms in times.items()}, err, len(requests), len(q)


def _error(out, want, cum) -> float:
    """The largest relative RMS error of a TND output's requests."""
    q0, err = 0, 0.0
    for w, q1 in zip(want, cum):
        o = out[q0:q1].float()
        err = max(err, float(((o - w) ** 2).mean().sqrt() / (w ** 2).mean().sqrt()))
        q0 = q1
    return err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for results.json and README.md")
    ap.add_argument("--mixes", nargs="+", default=list(MIXES), choices=list(MIXES))
    ap.add_argument("--precisions", nargs="+", default=None, choices=PRECISIONS,
                    help=f"default {' '.join(PRECISIONS)}; replay: {PRECISIONS[0]}")
    ap.add_argument("--replay", type=Path, help="a call trace recorded by patch_torch_npu(record=PATH)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="replay only: cpu for a smoke check")
    ap.add_argument("--repeats", type=int, default=20, help="replay on the CPU: timed runs per call")
    args = ap.parse_args(argv)
    if args.replay is not None:
        return replay(args)
    args.precisions = args.precisions or list(PRECISIONS)
    if not torch.cuda.is_available():
        sys.exit("bench_serving.py needs a CUDA GPU (torch.cuda.is_available() is False); the CPU interpreter path "
                 "is tested by tests/serving/test_serving.py")
    import triton
    from triton.testing import do_bench

    import pasa_npu

    start = time.time()
    rows = []
    for name in args.mixes:
        for precision in args.precisions:
            times, err, b, t = _case(MIXES[name], precision, do_bench, pasa_npu)
            rows.append({"mix": name, "requests": b, "tokens": t, "precision": precision, "us": times,
                         "rel_rmse_vs_sdpa_fp32": round(err, 6)})
            print(f"{name} B={b} T={t} {precision:8s} " + "  ".join(f"{m} {us:9.1f} µs" for m, us in times.items())
                  + f"  err {err:.2e}", flush=True)
            torch.cuda.empty_cache()
            _write(args, rows, triton.__version__, start)  # after every row: a run cut short keeps what it measured
    print(f"wrote {args.out}/results.json and README.md ({time.time() - start:.0f} s)")


def _write(args, rows, triton_version, start):
    from pasa_npu.accuracy import source_commit

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton_version,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["python3", *sys.argv]), "commit": source_commit(),
            "shape": {"heads": HEADS, "kv_heads": KV_HEADS, "head_dim": D, "page": PAGE},
            "mixes": {m: MIXES[m] for m in args.mixes}, "seconds": round(time.time() - start, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# A mixed serving step on {meta['device']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, Python {meta['python']}; "
             f"`{meta['command']}` (scripts/bench_serving.py's docstring defines every column).", "",
             f"{HEADS} query / {KV_HEADS} KV heads, D = {D}, FP16, pages of {PAGE} keys shuffled in one cache, "
             "bottom-right causal (sparse_mode 3). Mixes, as (requests, query rows, keys):", ""]
    lines += [f"* {m}: " + ", ".join(f"{n} × ({r}, {c})" for n, r, c in MIXES[m]) for m in args.mixes]
    lines += ["", "Median µs of `triton.testing.do_bench` per step (eager calls: host time included where it "
              "exceeds the GPU's; graphs: device time); error: the largest relative RMS error of the TND call's and "
              "the graph's requests against float32 SDPA.", "",
              "| mix | requests | tokens | precision | tnd_call | tnd_graph | one_by_one | sdpa_gathered | sdpa_graph | "
              "gather | one_by_one / tnd_call | sdpa_gathered / tnd_call | sdpa_graph / tnd_graph | error |",
              "|---" * 14 + "|"]
    sdpa = {r["mix"]: r["us"] for r in rows if "sdpa_gathered" in r["us"]}
    for r in rows:
        u, s = r["us"], sdpa.get(r["mix"], {})
        cells = [r["mix"], r["requests"], r["tokens"], r["precision"], u["tnd_call"], u["tnd_graph"], u["one_by_one"],
                 s.get("sdpa_gathered", "–"), s.get("sdpa_graph", "–"), s.get("gather", "–"),
                 f"{u['one_by_one'] / u['tnd_call']:.1f}", f"{s['sdpa_gathered'] / u['tnd_call']:.2f}" if s else "–",
                 f"{s['sdpa_graph'] / u['tnd_graph']:.2f}" if s else "–", f"{r['rel_rmse_vs_sdpa_fp32']:.1e}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    (args.out / "README.md").write_text("\n".join(lines) + "\n")


# ============================================================================================
# replay of a recorded trace
# ============================================================================================

def _make(name, spec, device):
    """A tensor the trace recorded without values: a mask (bool/int8/uint8, or ATB's float ``mask``) upper-
    triangular over its last two axes, anything else normal random."""
    dtype = getattr(torch, spec["dtype"])
    shape = spec["shape"]
    if len(shape) >= 2 and (dtype in (torch.bool, torch.int8, torch.uint8) or name == "mask"):
        hidden = torch.ones(shape[-2:], dtype=torch.bool, device=device).triu_(1).expand(shape)
        if dtype.is_floating_point:
            return torch.zeros(shape, dtype=dtype, device=device).masked_fill_(hidden, float("-inf"))
        return hidden.to(dtype).contiguous()
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    return torch.zeros(shape, dtype=dtype, device=device)


def _atb_rows_mask(call, patch):
    """ATB's splitfuse mask for a replayed call: the causal mask's rows at each query token's position."""
    entry = next(e for e in patch.ENTRIES if e.op == call.op)
    given = dict(zip(entry.params, call.args), **call.kwargs)
    mask = given["mask"]
    q_lens, kv_lens = given["seq_len"].tolist(), given["context_lens"].tolist()
    position = torch.tensor([p for r, c in zip(q_lens, kv_lens) for p in range(c - r, c)], device=mask.device)
    j = torch.arange(mask.shape[-1], device=mask.device)[None, :]
    hidden = j > position[:, None]
    rows = torch.zeros(mask.shape, dtype=mask.dtype, device=mask.device)
    rows[:len(position)] = rows[:len(position)].masked_fill(hidden, float("-inf") if mask.is_floating_point() else 1)
    return {**given, "mask": rows}


def _sdpa_pieces(query, key, value, options, precision):
    """The dense pieces (q, k, v, keep mask, scale) of a call, from pasa-npu's own description of it."""
    from pasa_npu.problem import band_mask, make_problem

    problem = make_problem(query, key, value, precision=precision, **options)
    pieces = []
    for job in problem.jobs():
        s1, s2 = job.q.shape[2], job.k.shape[2]
        hidden = None if job.band is None else band_mask(job.band, s1, s2, job.q.device)
        if job.mask is not None:
            hidden = job.mask if hidden is None else job.mask | hidden
        pieces.append((job.q, job.k, job.v, None if hidden is None else ~hidden, problem.scale))
    return pieces


def _stand_in_torch_npu(patch):
    """A torch_npu module holding the routed entry points, each refusing the calls pasa-npu declines (there is
    no torch_npu here to run them)."""
    import types

    def declined(name):
        def op(*args, **kwargs):
            raise RuntimeError(f"torch_npu.{name} is not available in a replay")
        return op

    names = [e.op for e in patch.ENTRIES] + [n for f in patch.FORMS for n in (f.op, f.workspace_op)]
    module = types.ModuleType("torch_npu")
    for name in names:
        setattr(module, name, declined(name))
    sys.modules["torch_npu"] = module
    return module


def _timer(device, repeats):
    if device.type == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, return_mode="median") * 1e3
    import statistics

    def host(fn):
        fn()
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs) * 1e6
    return host


def replay(args):
    """Time every call of a recorded trace (this module's docstring)."""
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_serving.py --replay needs a CUDA GPU (torch.cuda.is_available() is False); "
                 "--device cpu runs a smoke check")
    if args.repeats < 1:
        sys.exit(f"--repeats must be at least 1, got {args.repeats}")
    if not args.replay.is_file():
        sys.exit(f"--replay {args.replay}: no such file")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        sys.exit(f"--out {args.out}: {e.strerror}")
    import pasa_npu
    from pasa_npu.integrations import torch_npu as patch
    from pasa_npu.integrations import trace

    device = torch.device(args.device)
    precision = (args.precisions or PRECISIONS[:1])[0]
    module = _stand_in_torch_npu(patch)
    pasa_npu.patch_torch_npu(precision=precision)
    timed = _timer(device, args.repeats)
    start, rows = time.time(), []
    try:
        calls = list(trace.read(args.replay, _make, device))
    except ValueError as e:
        sys.exit(str(e))
    for i, call in enumerate(calls):
        row = {"call": i, "entry": call.entry, "recorded": call.ran, "reason": call.reason}
        if call.op.endswith("_get_max_workspace") or call.ran != "pasa-npu":
            rows.append(row)
            continue
        kwargs = _atb_rows_mask(call, patch) if call.op == "_npu_paged_attention_splitfuse" else call.kwargs
        cargs = () if kwargs is not call.kwargs else call.args
        fn = getattr(module, call.op)
        fn = fn.out if call.form == "out" else fn
        q, k, v, options = patch.fia_equivalent(call.op, cargs, kwargs)
        pieces = _sdpa_pieces(q, k, v, options, precision)
        row["us"] = {"entry": timed(lambda: fn(*cargs, **kwargs))}
        if any(e.op == call.op for e in patch.ENTRIES):
            row["us"]["fia"] = timed(lambda: pasa_npu.fused_attention(q, k, v, precision=precision, **options))
        row["us"]["sdpa"] = timed(lambda: [F.scaled_dot_product_attention(pq, pk, pv, attn_mask=keep, scale=sc,
                                                                           enable_gqa=True)
                                           for pq, pk, pv, keep, sc in pieces])
        row["us"] = {m: round(us, 1) for m, us in row["us"].items()}
        row["shape"] = {"query": list(q.shape), "key": list(k.shape), "layout": options.get("input_layout", "BSH")}
        rows.append(row)
        print(f"{i:4d} {call.entry:55s} " + "  ".join(f"{m} {us:9.1f} µs" for m, us in row["us"].items()), flush=True)
    pasa_npu.unpatch_torch_npu()
    _write_replay(args, rows, precision, device, start)
    print(f"wrote {args.out}/results.json and README.md ({time.time() - start:.0f} s)")


def _write_replay(args, rows, precision, device, start):
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({platform.processor() or 'host'})"
    from pasa_npu.accuracy import source_commit

    meta = {"device": name, "torch": torch.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(["python3", *sys.argv]),
            "commit": source_commit(), "trace": str(args.replay), "precision": precision,
            "seconds": round(time.time() - start, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Replay of {args.replay.name} on {name}", "",
             f"{meta['date']}, torch {meta['torch']}, Python {meta['python']}, precision {precision}; "
             f"`{meta['command']}` (scripts/bench_serving.py's docstring defines every column).", "",
             "Median µs per call." + (" Host timings of a smoke check, not a benchmark." if device.type == "cpu"
                                      else ""), "",
             "| call | entry point | query | key | layout | entry | fia | sdpa | sdpa / entry | not replayed |",
             "|---" * 10 + "|"]
    for r in rows:
        u, sh = r.get("us", {}), r.get("shape", {})
        cells = [r["call"], r["entry"], sh.get("query", "–"), sh.get("key", "–"), sh.get("layout", "–"),
                 u.get("entry", "–"), u.get("fia", "–"), u.get("sdpa", "–"),
                 f"{u['sdpa'] / u['entry']:.2f}" if u else "–",
                 "" if u else (r["reason"] or "a workspace query") + (f" ({r['recorded']})" if r["reason"] else "")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    (args.out / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
