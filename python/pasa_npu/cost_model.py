"""A pipe-level cost model of the AscendC PASA kernel on an Atlas A2 (910B): a *model*, not a measurement.

The host model counts, per core and per pipe, what the unmodified kernel issues (cube fractals,
vector repeats by API and type, MTE1/MTE2/MTE3/Fixpipe bytes, scalar accesses, cross-core flags) and
runs two modelled clocks per core along the AIC <-> AIV flag handshake (host_model/include/host_model/cost.h);
each PipeBarrier costs ``barrier_cycles`` on its pipe (an assumed drain):

* per core, work between two synchronisation points (a segment) costs the largest of its pipes'
  cycles (``overlap``: the pipes run concurrently) or their sum (``serial``: no overlap); the truth for
  this kernel lies in between, so both are reported;
* a CrossCoreWaitFlag moves the waiter's clock to the setter's (+ a flag latency), a mode-0 barrier
  releases at its latest arrival; the kernel's time is the latest clock of any core. The handshake is the
  kernel's: one S' / P / PV flag per stack of ``kvStack`` KV blocks, S' computed ``preLaunch`` stacks ahead
  (tiling fields; pasa_rs one block at a time), so the clocks follow that schedule.

Per-unit costs (:data:`A2_COSTS`) come from asc-devkit's published theoretical figures where they exist
and are estimates otherwise (:data:`COST_SOURCES` says which). Shapes too large to run on the host model
are counted on reduced problems on one AI core and scaled analytically (:func:`model` says which it did).

``python -m pasa_npu.cost_model --help`` prints the modelled time for any FIA call arguments;
``python -m pasa_npu.cost_model --paper`` the table of docs/cost_model.md.

pasa_rs's work depends on the data: its AIVs ask the AIC for a second S' pass where a row is reshifted
and for an FP32 one where a row leaves FP16's range. The model prices what the kernel issues on its
inputs (Q, K, V ~ N(0, 1)), reshifts included; inputs that need more passes cost more.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

import numpy as np
import torch

from . import npu_host_model

#: Clock of the AI cores. An estimate: public figures for 910B parts (about 313-376 FP16 TFLOP/s with
#: 20-24 AI cores of 4096 FP16 MACs a cycle) imply about 1.8-1.9 GHz; no primary source is at hand.
CLOCK_HZ = 1.8e9
#: AI cores of the A2 the tiling plans for (pasa::PlatformInfo::aicNum).
AI_CORES = 24
#: FP16 MACs of one cube per cycle: a 16x16x16 fractal (asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md,
#: table 1, half: cube_m = cube_n = cube_k = 16).
CUBE_MACS_PER_CYCLE = 16 * 16 * 16
#: Peak dense FP16 rate of the modelled A2: 2 FLOP per MAC.
PEAK_TFLOPS = 2 * CUBE_MACS_PER_CYCLE * AI_CORES * CLOCK_HZ / 1e12
#: Off-chip bandwidth for the unique-traffic bound (public 910B HBM2e figure, 1.6 TB/s; an estimate here).
HBM_BYTES_PER_S = 1.6e12

#: Per-unit costs in cycles (keys of host_model's CostTable in snake_case).
A2_COSTS: dict[str, float] = {
    "cube_cycles_per_fractal": 1.0,
    "mmad_head_cycles": 0.0,
    "l0a_bytes_per_cycle": 256.0,
    "l0b_bytes_per_cycle": 128.0,
    "gm_bytes_per_cycle": 64.0,
    "dma_head_cycles": 0.0,
    "vec_repeat_scale": 1.0,
    "vec_head_cycles": 0.0,
    "ub_copy_bytes_per_cycle": 256.0,
    "scalar_cycles_per_access": 10.0,
    "flag_latency_cycles": 100.0,
    "barrier_cycles": 20.0,
}

#: Where each cost comes from: ("documented" | "estimate", source or reasoning).
COST_SOURCES: dict[str, tuple[str, str]] = {
    "cube_cycles_per_fractal": ("documented", "asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md: Mmad half x half "
                                "runs 16x16x16 per cycle"),
    "mmad_head_cycles": ("estimate", "the same document's Δt (head cycles per Mmad) has no published value; 0"),
    "l0a_bytes_per_cycle": ("documented", "asc-devkit docs/zh/guide/.../架构规格/NPU架构版本2201.md: L1 -> L0A 256 B/cycle"),
    "l0b_bytes_per_cycle": ("documented", "same table: L1 -> L0B 128 B/cycle"),
    "gm_bytes_per_cycle": ("estimate", "one DMA engine's GM (L2-resident) rate; not published. 64 B/cycle x 72 "
                           "engines x 1.8 GHz is above the 1.6 TB/s HBM, so this assumes K, K', V, S', P hit L2"),
    "dma_head_cycles": ("estimate", "per-instruction DMA start-up; not published; 0"),
    "vec_repeat_scale": ("documented", "vector cycles per 256-byte repeat as asc-devkit docs/zh/api/附录/"
                         "Vector指令理论性能汇总.md gives them (tables 6-13; host_model/src/cost.cpp); 1 = as documented"),
    "vec_head_cycles": ("estimate", "per-instruction vector issue overhead; not published; 0"),
    "ub_copy_bytes_per_cycle": ("documented", "asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md: DataCopy(UB->UB) "
                                "256 B/cycle"),
    "scalar_cycles_per_access": ("estimate", "GetValue/SetValue on UB or GM; not published; 10"),
    "flag_latency_cycles": ("estimate", "CrossCoreSetFlag to the released CrossCoreWaitFlag; not published; 100"),
    "barrier_cycles": ("estimate", "PipeBarrier<PIPE_V>: the vector pipe drains its in-flight instructions before the "
                       "next issues; the drain's length (the pipe's depth) is not published; assumed 20"),
}
# Vector instructions: cycles per 256-byte repeat from asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md
# (documented), applied inside the host model: ascendc_model::VectorCyclesPerRepeat in host_model/src/cost.cpp.

#: Host-model block steps (query block x KV block) above which a shape is scaled from reduced runs.
FULL_RUN_LIMIT = 1500

PIPES = ("S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX")


@dataclasses.dataclass
class Result:
    """Modelled kernel time of one FIA call (both clocks), its rate, the busiest pipes, how it was obtained."""
    seconds_overlap: float
    seconds_serial: float
    flops: float
    aic_pipe_cycles: dict   # the busiest AIC's cycles per pipe
    aiv_pipe_cycles: dict   # the busiest AIV's cycles per pipe
    method: str
    hbm_bound_seconds: float

    @property
    def tflops_overlap(self) -> float:
        return self.flops / self.seconds_overlap / 1e12

    @property
    def tflops_serial(self) -> float:
        return self.flops / self.seconds_serial / 1e12

    @property
    def bottleneck(self) -> str:
        """The pipe with the most cycles on an AIC or an AIV (in the cycles the result reports)."""
        side, pipes = max((("AIC", self.aic_pipe_cycles), ("AIV", self.aiv_pipe_cycles)),
                          key=lambda sp: max(sp[1].values()))
        return f"{side} {max(pipes, key=pipes.get)}"


def attention_flops(batch, num_heads, seq_q, seq_kv, head_dim, sparse_mode=0) -> float:
    """FLOPs of standard attention (Q K^T and P V, 2 per MAC) over the kept (query, key) pairs; PASA's
    K' = M K pre-pass is extra work the rate does not credit."""
    i = np.arange(seq_q, dtype=np.int64)
    if sparse_mode == 0:
        pairs = seq_q * seq_kv
    elif sparse_mode == 2:      # key j kept for query i where j <= i
        pairs = int(np.minimum(seq_kv, i + 1).sum())
    elif sparse_mode == 3:      # bottom-right aligned causal
        pairs = int(np.clip(i + 1 + seq_kv - seq_q, 0, seq_kv).sum())
    else:
        raise ValueError("flops: sparse_mode 0, 2 or 3")
    return 4.0 * batch * num_heads * pairs * head_dim


def _inputs(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, layout, seed=0):
    rng = np.random.default_rng(seed)
    def make(n, s):
        shape = {"BNSD": (batch, n, s, head_dim), "BSND": (batch, s, n, head_dim), "BSH": (batch, s, n * head_dim)}
        return rng.standard_normal(shape[layout]).astype(np.float16)
    return make(num_heads, seq_q), make(num_kv_heads, seq_kv), make(num_kv_heads, seq_kv)


def _paged_inputs(batch, num_kv_heads, seq_kv, head_dim, layout, page_size, seed=0):
    """PageAttention's caches for ``batch`` sequences of ``seq_kv`` keys in shuffled pages (the layout
    FIA pairs with the query's: (num_blocks, Nkv, page, D) for BNSD, (num_blocks, page, Nkv·D) otherwise)
    and the block-table arguments."""
    rng = np.random.default_rng(seed)
    pages = -(-seq_kv // page_size)
    blocks = batch * pages
    shape = (blocks, num_kv_heads, page_size, head_dim) if layout == "BNSD" else (blocks, page_size,
                                                                                   num_kv_heads * head_dim)
    k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(2))
    table = torch.from_numpy(rng.permutation(blocks).astype(np.int32).reshape(batch, pages))
    return k, v, dict(block_table=table, block_size=page_size, actual_seq_lengths_kv=[seq_kv] * batch)


def _count(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, *, layout, precision, sparse_mode, costs,
           ai_cores=0, page_size=0):
    q, k, v = _inputs(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, layout)
    paged = {}
    if page_size:
        k, v, paged = _paged_inputs(batch, num_kv_heads, seq_kv, head_dim, layout, page_size)
    mask = None
    if sparse_mode in (2, 3):  # FIA's compressed causal mask
        mask = np.triu(np.ones((2048, 2048), dtype=np.bool_), k=1)
    kw = dict(atten_mask=mask, num_heads=num_heads, num_key_value_heads=num_kv_heads, input_layout=layout,
              scale=1.0 / math.sqrt(head_dim), sparse_mode=sparse_mode, precision=precision, **paged)
    _, _, counters = npu_host_model.count(q, k, v, cost=costs, ai_cores=ai_cores, **kw)
    return counters, npu_host_model.tiling(q, k, v, **kw)


def _schedule(tiling) -> str:
    """The AIC <-> AIV handshake the run used (op_kernel/pasa_cube_stage.h)."""
    def count(n, noun):
        return f"{n} {noun}{'s' if n > 1 else ''}"
    return f"handshake: stacks of {count(tiling['kvStack'], 'KV block')}, S' {count(tiling['preLaunch'], 'stack')} ahead"


def _clocks(counters) -> tuple[float, float]:
    return max(c["clock_overlap"] for c in counters), max(c["clock_serial"] for c in counters)


def _busiest(counters, aic: bool) -> dict:
    n_aic = len(counters) // 3
    side = counters[:n_aic] if aic else counters[n_aic:]
    return max(side, key=lambda c: sum(c["pipe_cycles"].values()))["pipe_cycles"]


def _plan(seq_q, head_dim, precision, layout) -> tuple[int, bool]:
    """The kernel's query block for a head of seq_q query rows, this head dim and allocation, and whether the
    allocation has a key pre-pass (PASA's K' = M K, pasa_rs's centring): what the tiling reads from the allocation's
    kernel policy."""
    q, k, v = _inputs(1, 1, 1, seq_q, 1, head_dim, layout)
    t = npu_host_model.tiling(q, k, v, num_heads=1, input_layout=layout, precision=precision)
    return int(t["blockQ"]), t["prepassItems"] > 0


def _hbm_seconds(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, shifted=True) -> float:
    """Unique off-chip traffic: Q, K, V, the output once, and for PASA and pasa_rs K' written and read once
    (FP16; pasa_rs's extra column, u and K^ are left out: 16/D and 2/128 of K)."""
    kv_passes = 4 if shifted else 2
    elems = batch * head_dim * (2 * num_heads * seq_q + kv_passes * num_kv_heads * seq_kv)
    return 2.0 * elems / HBM_BYTES_PER_S


def model(batch: int, num_heads: int, num_kv_heads: int, seq_q: int, seq_kv: int, head_dim: int, *,
          layout: str = "BNSD", precision: str = "pasa", sparse_mode: int = 0, costs: dict | None = None,
          full_run_limit: int = FULL_RUN_LIMIT, page_size: int = 0) -> Result:
    """Modelled time of ``fused_attention`` on the A2 for these FIA arguments (see the module docstring).
    ``page_size`` > 0: key and value in PageAttention caches of that page length, each sequence's pages
    shuffled (full runs only)."""
    costs = dict(A2_COSTS if costs is None else costs)
    if sparse_mode not in (0, 2, 3):
        raise ValueError("the cost model takes sparse_mode 0 (no mask), 2 or 3 (causal)")
    bq, shifted = _plan(seq_q, head_dim, precision, layout)
    nq, nkb = -(-seq_q // bq), -(-seq_kv // 128)
    flops = attention_flops(batch, num_heads, seq_q, seq_kv, head_dim, sparse_mode)
    hbm = _hbm_seconds(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, shifted)
    kw = dict(layout=layout, precision=precision, sparse_mode=sparse_mode, costs=costs)
    if batch * num_heads * nq * nkb <= full_run_limit:
        counters, tiling = _count(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, **kw,
                                  page_size=page_size)
        ovl, ser = _clocks(counters)
        return Result(ovl / CLOCK_HZ, ser / CLOCK_HZ, flops, _busiest(counters, True), _busiest(counters, False),
                      f"full run on the host model; {_schedule(tiling)}", hbm)
    if seq_q == 1:
        raise ValueError("decode shapes too large for a full run are not scaled (split-KV changes the schedule)")
    if page_size:
        raise ValueError("paged shapes too large for a full run are not scaled")
    # Reduced runs on one AI core (ai_cores=1): one head, one or two query blocks, the full KV length.
    # T(1 task) = P + t(nb), T(2 tasks) = P + 2 t(nb): t(nb) per task, P the pre-pass of nkb K' blocks
    # (FlashAttention: no pre-pass, P is the launch's fixed cost, once per core).
    def one_core(q_blocks, kv_len):
        c, tiling = _count(1, 1, 1, q_blocks * bq, kv_len, head_dim, **{**kw, "sparse_mode": 0}, ai_cores=1)
        return np.array(_clocks(c)), c, tiling
    t1, c1, _ = one_core(1, seq_kv)
    t2, c2, tiling = one_core(2, seq_kv)
    per_task_full = t2 - t1
    fixed = 2 * t1 - t2
    # The kernel skips the KV blocks a causal mask hides from a whole query tile, in every allocation.
    skips_masked_blocks = sparse_mode != 0
    if not skips_masked_blocks:
        def per_task(nb):
            return per_task_full
    else:  # linear in the task's KV blocks, from a second KV length
        half = max(1, nkb // 2)
        h1, _, _ = one_core(1, half * 128)
        h2, _, _ = one_core(2, half * 128)
        slope = (per_task_full - (h2 - h1)) / max(1, nkb - half)
        def per_task(nb):
            return per_task_full - slope * (nkb - nb)
    # The full launch: tasks (b, n, query block), dealt to the cores as the kernel deals them.
    tasks = batch * num_heads * nq
    per_core = -(-tasks // AI_CORES)
    block_dim = -(-tasks // per_core)
    core_tasks = npu_host_model.core_task_ids(block_dim, tasks, per_core)
    prepass_items = -(-(batch * num_kv_heads * nkb) // block_dim) if shifted else 0
    core_fixed = fixed / nkb * prepass_items if shifted else fixed
    core_time = np.zeros(2)
    diag = seq_kv - seq_q if sparse_mode == 3 else 0
    for core in range(block_dim):
        total = core_fixed
        for task in core_tasks[core]:
            qb = task % nq
            last_row = min(seq_q, (qb + 1) * bq)
            nb = max(0, min(nkb, -(-(last_row + diag) // 128))) if skips_masked_blocks else nkb
            total = total + (per_task(nb) if nb else 0)
        core_time = np.maximum(core_time, total)
    # The pipes of one task (2 tasks less 1 task): the AIC, and the busier AIV.
    aic = {p: c2[0]["pipe_cycles"][p] - c1[0]["pipe_cycles"][p] for p in PIPES}
    aiv = {p: max(c2[i]["pipe_cycles"][p] - c1[i]["pipe_cycles"][p] for i in (1, 2)) for p in PIPES}
    fixed_kind, prepass = ("per-K'-block", f" + {prepass_items} K' blocks each") if shifted else ("fixed", "")
    method = (f"scaled: reduced runs on 1 AI core (1 head, 1 and 2 query blocks of {bq} rows, S2 = {seq_kv}"
              f"{', and S2 = ' + str(max(1, nkb // 2) * 128) if skips_masked_blocks else ''}) -> per-task and "
              f"{fixed_kind} times; full launch = {block_dim} cores x at most {per_core} tasks{prepass}; "
              f"pipe cycles are one task's ({nkb} KV blocks); {_schedule(tiling)}")
    return Result(core_time[0] / CLOCK_HZ, core_time[1] / CLOCK_HZ, flops, aic, aiv, method, hbm)


#: The paper's shapes (docs/cost_model.md): (name, B, N, Nkv, S1, S2, D).
PAPER_SHAPES = (
    ("Qwen2-7B prefill", 1, 28, 4, 5676, 5676, 128),
    ("SVD (video diffusion)", 50, 5, 5, 9216, 9216, 64),
    ("decode, 4096 keys", 1, 32, 8, 1, 4096, 128),
)


def _row(name, shape, precision, r: Result) -> str:
    b, n, nkv, s1, s2, d = shape
    return (f"| {name} | {b}x{n}x{s1}x{d}, Nkv {nkv}, S2 {s2} | {precision} | {r.seconds_overlap * 1e3:.3f} – "
            f"{r.seconds_serial * 1e3:.3f} | {r.tflops_serial:.1f} – {r.tflops_overlap:.1f} | {r.bottleneck} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pasa_npu.cost_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--paper", action="store_true",
                    help="the paper's shapes, every allocation the kernel has, and their time over fp16_fp32's (markdown)")
    ap.add_argument("--pipes", action="store_true", help="also print the cycles per pipe behind each row")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--num-heads", type=int, default=8)
    ap.add_argument("--num-kv-heads", type=int, default=0, help="0: num_heads")
    ap.add_argument("--seq-q", type=int, default=1024)
    ap.add_argument("--seq-kv", type=int, default=0, help="0: seq_q")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--layout", default="BNSD", choices=npu_host_model.LAYOUTS)
    ap.add_argument("--precision", default="pasa", choices=npu_host_model.PRECISIONS)
    ap.add_argument("--sparse-mode", type=int, default=0, choices=(0, 2, 3))
    ap.add_argument("--page-size", type=int, default=0,
                    help="PageAttention: key/value in caches of this page length, pages shuffled (0: dense)")
    ap.add_argument("--cost", action="append", default=[], metavar="KEY=VALUE",
                    help="override a unit cost (keys: " + ", ".join(A2_COSTS) + ")")
    args = ap.parse_args(argv)
    costs = dict(A2_COSTS)
    for item in args.cost:
        key, _, value = item.partition("=")
        if key not in costs:
            ap.error(f"--cost: unknown key {key!r}")
        costs[key] = float(value)
    print(f"A MODEL of an Atlas A2 ({AI_CORES} AI cores at an assumed {CLOCK_HZ / 1e9:.1f} GHz, peak "
          f"{PEAK_TFLOPS:.0f} FP16 TFLOP/s), not a measurement; nothing here ran on an NPU.")
    print("| case | shape | precision | modelled ms (overlap – serial) | TFLOP/s (serial – overlap) | bottleneck pipe |")
    print("|---|---|---|---|---|---|")
    cases = []
    if args.paper:
        cases = [(name, shape, prec) for name, *shape in PAPER_SHAPES for prec in npu_host_model.PRECISIONS]
    else:
        shape = (args.batch, args.num_heads, args.num_kv_heads or args.num_heads, args.seq_q,
                 args.seq_kv or args.seq_q, args.head_dim)
        name = f"call, pages of {args.page_size} (shuffled)" if args.page_size else "call"
        cases = [(name, shape, args.precision)]
    results = {}
    for name, shape, prec in cases:
        r = model(*shape, layout=args.layout, precision=prec,
                  sparse_mode=0 if args.paper else args.sparse_mode, costs=costs,
                  page_size=0 if args.paper else args.page_size)
        results[name, prec] = r
        print(_row(name, shape, prec, r))
        print(f"|  | method: {r.method}; unique HBM traffic alone: {r.hbm_bound_seconds * 1e3:.3f} ms | | | | |")
        if args.pipes:
            for side, pipes in (("AIC", r.aic_pipe_cycles), ("AIV", r.aiv_pipe_cycles)):
                cells = ", ".join(f"{p} {pipes[p]:.0f}" for p in PIPES if pipes.get(p))
                print(f"|  | {side} cycles per pipe: {cells} | | | | |")
        sys.stdout.flush()
    if args.paper:
        _print_ratios(results)
    return 0


#: The FlashAttention the PASA allocations are compared with: FP16 S, FP32 softmax and O (tiling key 2).
BASELINE = "fp16_fp32"


def _print_ratios(results: dict) -> None:
    """Modelled time of each allocation over the baseline's, per shape (< 1: faster than the baseline)."""
    others = [p for p in npu_host_model.PRECISIONS if p != BASELINE]
    print()
    print("| case | " + " | ".join(f"{p} / {BASELINE} (overlap – serial)" for p in others) + " |")
    print("|---|" + "---|" * len(others))
    for name, *_ in PAPER_SHAPES:
        base = results[name, BASELINE]
        cells = [f"{results[name, p].seconds_overlap / base.seconds_overlap:.2f} – "
                 f"{results[name, p].seconds_serial / base.seconds_serial:.2f}" for p in others]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
