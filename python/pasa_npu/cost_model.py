"""A pipe-level cost model of the AscendC PASA kernel on an Atlas A2 (910B): a *model*, not a measurement.

The host model counts, per core and per pipe, what the unmodified kernel issues (cube fractals,
vector repeats by API and type, MTE1/MTE2/MTE3/Fixpipe bytes, scalar accesses, cross-core flags) and
runs three modelled clocks per core along the AIC <-> AIV flag handshake (host_model/include/host_model/cost.h);
each PipeBarrier costs ``barrier_cycles`` on its pipe (an assumed drain):

* per core, work between two synchronisation points (a segment) costs the largest of its pipes'
  cycles (``overlap``: the pipes run concurrently), their sum (``serial``: no overlap), or the largest plus
  ``dependent_fraction`` of the others (``model``, the calibrated clock);
* a launch costs ``launch_cycles``, each task a core takes ``dispatch_cycles``, and it takes at least its GM
  traffic at the aggregate ``l2_bytes_per_cycle`` and its unique HBM traffic at 1.6 TB/s;
* a CrossCoreWaitFlag moves the waiter's clock to the setter's (+ a flag latency), a mode-0 barrier
  releases at its latest arrival; the kernel's time is the latest clock of any core. The handshake is the
  kernel's: one S' / P / PV flag per stack of ``kvStack`` KV blocks, S' computed ``preLaunch`` stacks ahead
  (tiling fields; pasa_rs one block at a time), so the clocks follow that schedule.

Per-unit costs (:data:`A2_COSTS`) come from asc-devkit's published theoretical figures where they exist
and are estimates otherwise (:data:`COST_SOURCES` says which); the estimates are fitted to measurements of a
910B2 published by others (``--calibrate``, docs/cost_model.md "Calibration"). Shapes too large to run on the host model
are counted on reduced problems on one AI core and scaled analytically (:func:`model` says which it did).

``python -m pasa_npu.cost_model --help`` prints the modelled time for any FIA call arguments;
``python -m pasa_npu.cost_model --paper`` the table of docs/cost_model.md, ``--calibrate`` the fit, its residuals
and the targets with their sensitivity band.

pasa_rs's work depends on the data: its AIVs ask the AIC for a second S' pass where a row is reshifted
and for an FP32 one where a row leaves FP16's range. The model prices what the kernel issues on its
inputs (Q, K, V ~ N(0, 1)), reshifts included; inputs that need more passes cost more.
"""

from __future__ import annotations

import argparse
import collections
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

#: Per-unit costs in cycles. The first group are the keys of host_model's CostTable in snake_case (they price
#: what each core issues); ``launch_cycles``, ``dispatch_cycles`` and ``l2_bytes_per_cycle`` are applied here, to
#: the launch as a whole. The estimates hold the values ``python -m pasa_npu.cost_model --calibrate`` fitted
#: (docs/cost_model.md, "Calibration"); the documented costs are never fitted.
A2_COSTS: dict[str, float] = {
    "cube_cycles_per_fractal": 1.0,
    "mmad_head_cycles": 0.0,
    "l0a_bytes_per_cycle": 256.0,
    "l0b_bytes_per_cycle": 128.0,
    "gm_bytes_per_cycle": 128.0,
    "fix_bytes_per_cycle": 56.0,
    "dma_head_cycles": 10.0,
    "vec_repeat_scale": 1.0,
    "vec_head_cycles": 0.0,
    "ub_copy_bytes_per_cycle": 256.0,
    "scalar_cycles_per_access": 10.0,
    "flag_latency_cycles": 1000.0,
    "barrier_cycles": 20.0,
    "dependent_fraction": 0.15,
    "launch_cycles": 15000.0,
    "dispatch_cycles": 5000.0,
    "l2_bytes_per_cycle": 8000.0,
}

#: The keys priced outside the host model (the launch as a whole).
LAUNCH_KEYS = ("launch_cycles", "dispatch_cycles", "l2_bytes_per_cycle")

#: Where each cost comes from: ("documented" | "estimate", source or reasoning).
COST_SOURCES: dict[str, tuple[str, str]] = {
    "cube_cycles_per_fractal": ("documented", "asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md: Mmad half x half "
                                "runs 16x16x16 per cycle"),
    "mmad_head_cycles": ("estimate", "the same document's Δt (head cycles per Mmad) has no published value; fitted"),
    "l0a_bytes_per_cycle": ("documented", "asc-devkit docs/zh/guide/.../架构规格/NPU架构版本2201.md: L1 -> L0A 256 B/cycle"),
    "l0b_bytes_per_cycle": ("documented", "same table: L1 -> L0B 128 B/cycle"),
    "gm_bytes_per_cycle": ("estimate", "one DMA engine's GM (L2-resident) rate; not published; fitted. The engines "
                           "together are capped by l2_bytes_per_cycle"),
    "fix_bytes_per_cycle": ("estimate", "Fixpipe L0C -> GM with its FP32/FP16 conversion; not published; fitted"),
    "dma_head_cycles": ("estimate", "per-instruction DMA start-up (MTE2, MTE3, Fixpipe); not published; fitted"),
    "vec_repeat_scale": ("documented", "vector cycles per 256-byte repeat as asc-devkit docs/zh/api/附录/"
                         "Vector指令理论性能汇总.md gives them (tables 6-13; host_model/src/cost.cpp); 1 = as documented"),
    "vec_head_cycles": ("estimate", "per-instruction vector issue overhead; not published; fitted"),
    "ub_copy_bytes_per_cycle": ("documented", "asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md: DataCopy(UB->UB) "
                                "256 B/cycle"),
    "scalar_cycles_per_access": ("estimate", "GetValue/SetValue on UB or GM; not published; 10"),
    "flag_latency_cycles": ("estimate", "cross-core sync: CrossCoreSetFlag to the released CrossCoreWaitFlag, paid per "
                            "handshake (one per logical KV tile and direction); not published; fitted"),
    "barrier_cycles": ("estimate", "PipeBarrier<PIPE_V>: the vector pipe drains its in-flight instructions before the "
                       "next issues; the drain's length (the pipe's depth) is not published; assumed 20"),
    "dependent_fraction": ("estimate", "the share of a segment's pipes other than the busiest that does not overlap it "
                           "(0: the overlap clock, 1: the serial clock); fitted"),
    "launch_cycles": ("estimate", "kernel launch, once per call; fitted"),
    "dispatch_cycles": ("estimate", "per task (query block) a core takes; fitted"),
    "l2_bytes_per_cycle": ("estimate", "aggregate GM/L2 rate shared by all DMA engines of the chip (bytes a cycle): "
                           "a launch takes at least all its GM bytes at this rate; fitted"),
}
# Vector instructions: cycles per 256-byte repeat from asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md
# (documented), applied inside the host model: ascendc_model::VectorCyclesPerRepeat in host_model/src/cost.cpp.

#: Host-model block steps (query block x KV block) above which a shape is scaled from reduced runs.
FULL_RUN_LIMIT = 1500

PIPES = ("S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX")


@dataclasses.dataclass
class Result:
    """Modelled kernel time of one FIA call, its rate, the busiest pipes, how it was obtained.

    ``seconds`` is the calibrated model: the launch, the busiest core's model clock with its tasks' dispatch, or
    the aggregate GM/L2 traffic at ``l2_bytes_per_cycle`` or the unique HBM traffic where either takes longer.
    ``seconds_overlap`` and ``seconds_serial`` are the same launch with the core clocks at their two extremes.
    ``seconds_bound`` is the same launch with each core's clock at its pipe bound: its whole run priced as one
    segment (its busiest pipe plus ``dependent_fraction`` x the others) with no waits, which no schedule of the
    kernel's instructions beats under the model's rule for a segment (:func:`_segment_cycles`)."""
    seconds_overlap: float
    seconds_serial: float
    flops: float
    aic_pipe_cycles: dict   # the busiest AIC's cycles per pipe
    aiv_pipe_cycles: dict   # the busiest AIV's cycles per pipe
    method: str
    hbm_bound_seconds: float
    seconds: float = 0.0
    l2_bound_seconds: float = 0.0
    gm_bytes: float = 0.0   # GM traffic of all DMA engines (MTE2, MTE3, Fixpipe), bytes
    tiling: dict = dataclasses.field(default_factory=dict)
    seconds_bound: float = 0.0

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12

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
           ai_cores=0, page_size=0, handshake=(0, 0)):
    q, k, v = _inputs(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, layout)
    paged = {}
    if page_size:
        k, v, paged = _paged_inputs(batch, num_kv_heads, seq_kv, head_dim, layout, page_size)
    mask = None
    if sparse_mode in (2, 3):  # FIA's compressed causal mask
        mask = np.triu(np.ones((2048, 2048), dtype=np.bool_), k=1)
    kw = dict(atten_mask=mask, num_heads=num_heads, num_key_value_heads=num_kv_heads, input_layout=layout,
              scale=1.0 / math.sqrt(head_dim), sparse_mode=sparse_mode, precision=precision, **paged)
    _, _, counters = npu_host_model.count(q, k, v, cost=_core_costs(costs), ai_cores=ai_cores, handshake=handshake,
                                          **kw)
    tiling = npu_host_model.tiling(q, k, v, **kw)
    # the handshake the launch ran (the pinned one where it fitted)
    return counters, {**tiling, "kvStack": counters[0]["kv_stack"], "preLaunch": counters[0]["pre_launch"]}


def _schedule(tiling) -> str:
    """The AIC <-> AIV handshake the run used (op_kernel/pasa_cube_stage.h)."""
    def count(n, noun):
        return f"{n} {noun}{'s' if n > 1 else ''}"
    return (f"handshake: stacks of {count(tiling['kvStack'], 'KV block')} (ramped at a task's ends), "
            f"S' {count(tiling['preLaunch'], 'stack')} ahead")


def _core_costs(costs: dict) -> dict:
    """The costs the host model prices (its CostTable), without the launch-wide ones."""
    return {key: value for key, value in costs.items() if key not in LAUNCH_KEYS}


CLOCKS = ("clock_overlap", "clock_serial", "clock_model")


def _clocks(counters, costs: dict) -> np.ndarray:
    """Per core (AICs, then AIVs), its three clocks (overlap, serial, model) and its pipe bound: its whole run as one
    segment, with no waits. Splitting a run into segments only adds to the model clock (a segment's busiest pipe
    plus a share of the others: the sum over segments of each one's busiest pipe is at least the busiest pipe's
    total), so no schedule of the same instructions takes less."""
    return np.array([[c[k] for k in CLOCKS] + [_segment_cycles(c["pipe_cycles"], costs)] for c in counters])


def _gm_bytes(counters) -> float:
    return float(sum(c["mte2_bytes"] + c["mte3_bytes"] + c["fix_bytes"] for c in counters))


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


def _launch(core_clocks, tasks_per_core, gm_bytes, hbm_seconds, costs) -> np.ndarray:
    """Seconds of the launch on each clock of :func:`_clocks`: launch + the busiest core (its clock and a dispatch
    per task), or the launch's GM/L2 traffic at the aggregate rate, or its unique HBM traffic, whichever is longer."""
    busiest = np.max(core_clocks + costs["dispatch_cycles"] * np.asarray(tasks_per_core)[:, None], axis=0)
    l2 = gm_bytes / costs["l2_bytes_per_cycle"]
    return (costs["launch_cycles"] + np.maximum(busiest, max(l2, hbm_seconds * CLOCK_HZ))) / CLOCK_HZ


def model(batch: int, num_heads: int, num_kv_heads: int, seq_q: int, seq_kv: int, head_dim: int, *,
          layout: str = "BNSD", precision: str = "fp32_frame", sparse_mode: int = 0, costs: dict | None = None,
          full_run_limit: int = FULL_RUN_LIMIT, page_size: int = 0, handshake: tuple[int, int] = (0, 0)) -> Result:
    """Modelled time of ``fused_attention`` on the A2 for these FIA arguments (see the module docstring), at the
    tiling the kernel's own search picks (op_host/pasa_tiling.cpp: the largest legal query block, the first
    handshake of its list that fits beside it). ``costs``: :data:`A2_COSTS` with any entries replaced (missing keys
    keep theirs). ``page_size`` > 0: key and value in PageAttention caches of that page length, each sequence's
    pages shuffled (full runs only). ``handshake`` = (kvStack, preLaunch), kvStack > 0: that stacked handshake in
    place of the tiling's choice where it fits (:func:`handshake_search`)."""
    costs = {**A2_COSTS, **(costs or {})}
    if sparse_mode not in (0, 2, 3):
        raise ValueError("the cost model takes sparse_mode 0 (no mask), 2 or 3 (causal)")
    bq, shifted = _plan(seq_q, head_dim, precision, layout)
    nq, nkb = -(-seq_q // bq), -(-seq_kv // 128)
    flops = attention_flops(batch, num_heads, seq_q, seq_kv, head_dim, sparse_mode)
    hbm = _hbm_seconds(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, shifted)
    kw = dict(layout=layout, precision=precision, sparse_mode=sparse_mode, costs=costs, handshake=handshake)
    if batch * num_heads * nq * nkb <= full_run_limit:
        counters, tiling = _count(batch, num_heads, num_kv_heads, seq_q, seq_kv, head_dim, **kw,
                                  page_size=page_size)
        per_core = [len(ids) for ids in npu_host_model.core_task_ids(tiling["blockDim"], tiling["totalTasks"],
                                                                     tiling["tasksPerCore"])]
        tasks = per_core + [n for n in per_core for _ in (0, 1)]  # AICs, then each AIC's two AIVs
        gm = _gm_bytes(counters)
        secs = _launch(_clocks(counters, costs), tasks, gm, hbm, costs)
        return Result(secs[0], secs[1], flops, _busiest(counters, True), _busiest(counters, False),
                      f"full run on the host model; {_schedule(tiling)}", hbm, secs[2],
                      gm / costs["l2_bytes_per_cycle"] / CLOCK_HZ, gm, tiling, secs[3])
    if seq_q == 1:
        raise ValueError("decode shapes too large for a full run are not scaled (split-KV changes the schedule)")
    if page_size:
        raise ValueError("paged shapes too large for a full run are not scaled")
    # Reduced runs on one AI core (ai_cores=1): one head, one or two query blocks, the full KV length.
    # T(1 task) = P + t(nb), T(2 tasks) = P + 2 t(nb): t(nb) per task, P the pre-pass of nkb K' blocks
    # (FlashAttention: no pre-pass, P is the launch's fixed cost, once per core). The same for the GM bytes.
    def one_core(q_blocks, kv_len):
        c, tiling = _count(1, 1, 1, q_blocks * bq, kv_len, head_dim, **{**kw, "sparse_mode": 0}, ai_cores=1)
        return np.append(_clocks(c, costs).max(axis=0), _gm_bytes(c)), c, tiling
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
    diag = seq_kv - seq_q if sparse_mode == 3 else 0
    core_totals = []
    for core in range(block_dim):
        total = core_fixed
        for task in core_tasks[core]:
            qb = task % nq
            last_row = min(seq_q, (qb + 1) * bq)
            nb = max(0, min(nkb, -(-(last_row + diag) // 128))) if skips_masked_blocks else nkb
            total = total + (per_task(nb) if nb else 0)
        core_totals.append(total)
    core_totals = np.array(core_totals)
    gm = float(core_totals[:, -1].sum())
    secs = _launch(core_totals[:, :-1], [len(ids) for ids in core_tasks], gm, hbm, costs)
    # The pipes of one task (2 tasks less 1 task): the AIC, and the busier AIV.
    aic = {p: c2[0]["pipe_cycles"][p] - c1[0]["pipe_cycles"][p] for p in PIPES}
    aiv = {p: max(c2[i]["pipe_cycles"][p] - c1[i]["pipe_cycles"][p] for i in (1, 2)) for p in PIPES}
    fixed_kind, prepass = ("per-K'-block", f" + {prepass_items} K' blocks each") if shifted else ("fixed", "")
    method = (f"scaled: reduced runs on 1 AI core (1 head, 1 and 2 query blocks of {bq} rows, S2 = {seq_kv}"
              f"{', and S2 = ' + str(max(1, nkb // 2) * 128) if skips_masked_blocks else ''}) -> per-task and "
              f"{fixed_kind} times; full launch = {block_dim} cores x at most {per_core} tasks{prepass}; "
              f"pipe cycles are one task's ({nkb} KV blocks); {_schedule(tiling)}")
    return Result(secs[0], secs[1], flops, aic, aiv, method, hbm, secs[2], gm / costs["l2_bytes_per_cycle"] / CLOCK_HZ,
                  gm, tiling, secs[3])


# ---------------------------------------------------------------------------------------------------------------
# Calibration against published A2 figures (docs/cost_model.md, "Calibration")

#: Measured on an Atlas 910B2 by others (hw-native-sys/pto-isa, kernels/manual/common/flash_atten/README.md, "910B2
#: Multi-Core Comparison"): one head, S1 = S2 = S, D = 128, FP16; microseconds.
PTO_MEASURED_US = {1024: 20.960, 2048: 32.461, 4096: 88.902, 8192: 292.626, 16384: 909.058, 32768: 3262.645}
TORCH_NPU_MEASURED_US = {1024: 58.461, 2048: 70.801, 4096: 118.302, 8192: 353.147, 16384: 1118.462, 32768: 3646.173}
#: The same repository's scripts/fa_cost_model.py, fitted to CANN's simulator: cycles of each stage of one logical
#: tile of 128 query rows x 256 keys at D = 128.
PTO_STAGE_CYCLES = {"QK": 2487.479, "softmax": 2488.855, "PV": 1617.252, "O update": 833.652}
#: Tolerances of the fit (relative): the measured points and the stage cycles.
POINT_TOLERANCE, STAGE_TOLERANCE = 0.15, 0.20
#: The estimates the calibration fits, each with the values it tries (the documented costs are never fitted).
FITTED = {
    "gm_bytes_per_cycle": (32, 40, 48, 56, 64, 72, 80, 88, 96, 112, 128, 160, 192, 256),
    "fix_bytes_per_cycle": (32, 40, 44, 48, 52, 56, 60, 64, 72, 80, 96, 128),
    "dma_head_cycles": (0, 10, 25, 50, 75, 100, 150, 200, 300),
    "mmad_head_cycles": (0, 10, 20, 30, 50, 100, 200),
    "vec_head_cycles": (0, 2, 5, 10, 20),
    "dependent_fraction": (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5),
    "flag_latency_cycles": (0, 50, 100, 200, 300, 500, 700, 1000, 1500),
    "launch_cycles": (0, 2500, 5000, 7500, 10000, 12500, 15000, 20000, 30000),
    "dispatch_cycles": (0, 500, 1000, 2000, 3000, 4000, 5000, 7500, 10000),
    "l2_bytes_per_cycle": (1000, 1500, 2000, 2500, 3000, 3500, 4000, 5000, 6000, 8000),
}


def _segment_cycles(seg: dict, costs: dict) -> float:
    """A segment's cycles on the model clock (host_model/src/cost.cpp CloseSegment)."""
    widest, total = max(seg.values()), sum(seg.values())
    return widest + costs["dependent_fraction"] * (total - widest)


def kernel_stages(costs: dict, precision: str = "fp32_frame") -> dict:
    """Cycles of the kernel's four stages on one AI core at PTO's tile: a task of 128 query rows over 256 keys at
    D = 128 (one handshake stack of two KV blocks), from the segments the host model records between the cross-core
    flags: the AIC's S = Q K^T (QK) and its P V (PV), an AIV's softmax of its 64 rows and its epilogue (O update:
    for fp32_frame the merge of the one segment and the output, where [O | l] is summed on the cube)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, 128)).astype(np.float16) for n in (128, 256, 256))
    kw = dict(num_heads=1, input_layout="BNSD", scale=1.0 / math.sqrt(128), precision=precision)
    _, _, counters = npu_host_model.count(q, k, v, cost={**_core_costs(costs), "record_segments": 1}, ai_cores=1,
                                          **kw)
    aic = [seg for seg in counters[0]["segments"] if "M" in seg]
    aiv = [seg for seg in counters[1]["segments"] if "MTE2" in seg]
    if len(aic) != 2 or len(aiv) != 2:
        raise RuntimeError(f"kernel_stages: expected 2 cube and 2 vector stages, got {len(aic)} and {len(aiv)}")
    return {name: _segment_cycles(seg, costs) for name, seg in zip(PTO_STAGE_CYCLES, (aic[0], aiv[0], aic[1], aiv[1]))}


@dataclasses.dataclass(frozen=True, order=True)
class FlashTiling:
    """PTO's FlashAttention structure (kernels/manual/common/flash_atten of hw-native-sys/pto-isa): blocks of
    ``rows`` query rows, logical KV tiles of ``tile`` keys in cube sub-tiles of 128, ``preload`` tiles of QK ahead;
    the softmax's row max and row sum by ``WholeReduceMax``/``WholeReduceSum`` (7 cycles a row, as PTO's published
    stage cycles imply) or, ``block_reductions``, by ``BlockReduceMax``/``BlockReduceSum`` as fp32_frame takes them
    (a row's 64 lanes in 1 cycle, then its 8 partial results: 9/8 of a cycle a row)."""
    rows: int = 128
    tile: int = 256
    preload: int = 4
    block_reductions: bool = False


#: The tilings the fair baseline searches (PTO's own search ranges; rows beyond 128 do not fit L0C's S tile), with
#: either row reduction.
FLASH_TILINGS = tuple(FlashTiling(r, t, p, b) for r in (64, 128) for t in (256, 512, 1024) for p in (2, 4, 6)
                      for b in (False, True))


def _fits(t: FlashTiling, d: int) -> bool:
    """The structure's buffers on the chip: L1 (Q, double-buffered K, P, V sub-tiles) within 512 KB, an AIV's UB
    (a double-buffered FP32 S chunk of its rows / the sub-tiles, its FP16 P, FP32 PV in and O, row vectors) within
    184 KB, and an S sub-tile of rows x 128 FP32 in each L0C half."""
    l1 = t.rows * d * 2 + 2 * (128 * d * 2) * 2 + 2 * t.rows * 128 * 2
    chunk = max(1, t.rows // (2 * (t.tile // 128)))
    ub = 2 * chunk * t.tile * 4 + 2 * chunk * t.tile * 2 + 2 * (t.rows // 2) * d * 4 + 16 * (t.rows // 2) * 4
    return l1 <= 512 * 1024 and ub <= 184 * 1024 and t.rows * 128 * 4 * 2 <= 128 * 1024


def _stage_pipes(pipes: dict, instructions: dict, costs: dict) -> dict:
    """One stage's cycles per pipe from its per-pipe work and instruction counts, priced as the host model prices
    them."""
    head = {"M": costs["mmad_head_cycles"], "MTE2": costs["dma_head_cycles"], "MTE3": costs["dma_head_cycles"],
            "FIX": costs["dma_head_cycles"], "V": costs["vec_head_cycles"], "MTE1": 0.0}
    return {p: c + head[p] * instructions.get(p, 0) for p, c in pipes.items() if c}


def flash_stages(t: FlashTiling, d: int, costs: dict, keys: int | None = None) -> dict:
    """Cycles of the four stages of one logical tile (``keys`` keys, default ``t.tile``) of the PTO-structured
    FlashAttention (:func:`flash_stage_pipes`), each a segment on the model clock."""
    return {k: _segment_cycles(seg, costs) for k, seg in flash_stage_pipes(t, d, costs, keys).items()}


def flash_stage_pipes(t: FlashTiling, d: int, costs: dict, keys: int | None = None) -> dict:
    """Cycles per pipe of the four stages of one logical tile (``keys`` keys, default ``t.tile``) of the
    PTO-structured FlashAttention, counted from its structure: QK and PV in 128-key cube sub-tiles with FP32 S and
    FP32 P V through GM, the softmax of FP32 S into FP16 P and the O update in FP32 on each AIV's half of the rows."""
    n = keys or t.tile
    r, h, sub = t.rows, t.rows // 2, -(-n // 128)
    gm, fix = costs["gm_bytes_per_cycle"], costs["fix_bytes_per_cycle"]
    l0a, l0b = costs["l0a_bytes_per_cycle"], costs["l0b_bytes_per_cycle"]
    frac = costs["cube_cycles_per_fractal"]
    mm = (r // 16) * (-(-n // 16)) * (d // 16) * frac
    qk = _stage_pipes({"MTE2": n * d * 2 / gm, "MTE1": sub * r * d * 2 / l0a + n * d * 2 / l0b, "M": mm,
                       "FIX": r * n * 4 / fix}, {"MTE2": sub, "M": sub, "FIX": sub}, costs)
    pv = _stage_pipes({"MTE2": (r * n * 2 + n * d * 2) / gm, "MTE1": r * n * 2 / l0a + n * d * 2 / l0b, "M": mm,
                       "FIX": r * d * 4 / fix}, {"MTE2": 2 * sub, "M": sub, "FIX": 1}, costs)
    # Softmax of h rows x n FP32 scores (64 lanes a repeat): scale, the row max folded in halves to 64 lanes and one
    # reduction of them (WholeReduceMax: 7 cycles a repeat; or two BlockReduceMax: 1 cycle a repeat, then 8 lanes a
    # row), subtract, exp (2 cycles a repeat), the row sum alike, cast to FP16; the row state (m, l, the rescale
    # factor: 6 single-repeat ops a row vector).
    reps = h * n / 64
    folds = reps - h
    reduce = h + h / 8 if t.block_reductions else 7 * h
    vec = (reps + folds + reduce + reps + 2 * reps + folds + reduce + reps) * costs["vec_repeat_scale"] + 6 * h / 64 * 8
    softmax = _stage_pipes({"MTE2": h * n * 4 / gm, "V": vec, "MTE3": h * n * 2 / gm},
                           {"MTE2": sub, "V": (10 if t.block_reductions else 8) * sub + 6, "MTE3": sub}, costs)
    # O update: O = O * alpha + P V over h x d FP32 (a broadcast, a multiply, an add).
    gu_reps = h * d / 64
    gu = _stage_pipes({"MTE2": h * d * 4 / gm, "V": (2 * gu_reps + h / 8) * costs["vec_repeat_scale"]},
                      {"MTE2": 1, "V": 3}, costs)
    return {"QK": qk, "softmax": softmax, "PV": pv, "O update": gu}


def _flash_block(t: FlashTiling, d: int, kv: int, costs: dict) -> tuple[float, float]:
    """Cycles of one query block over ``kv`` keys on one AI core, and its GM bytes: the cube computes QK
    ``preload`` tiles ahead of PV, the AIVs the softmax of a tile once its S is in GM and the O update once its PV
    is; each hand-off between the AIC and its AIVs costs a flag latency (the sync per logical tile)."""
    lat = costs["flag_latency_cycles"]
    tiles = -(-kv // t.tile)
    sizes = [min(t.tile, kv - i * t.tile) for i in range(tiles)]
    st = {n: flash_stages(t, d, costs, n) for n in set(sizes)}
    qk_done, p_done = [0.0] * tiles, [0.0] * tiles
    cube = vec = 0.0

    def qk_and_softmax(i):
        nonlocal cube, vec
        cube += st[sizes[i]]["QK"]
        qk_done[i] = cube
        vec = max(vec, qk_done[i] + lat) + st[sizes[i]]["softmax"]
        p_done[i] = vec
    ahead = min(t.preload, tiles)
    for i in range(ahead):
        qk_and_softmax(i)
    for i in range(tiles):
        if i + ahead < tiles:
            qk_and_softmax(i + ahead)
        cube = max(cube, p_done[i] + lat) + st[sizes[i]]["PV"]
        vec = max(vec, cube + lat) + st[sizes[i]]["O update"]
    return max(cube, vec + _flash_output(t, d, costs)), _flash_gm_bytes(t, d, sizes)


def _flash_output(t: FlashTiling, d: int, costs: dict) -> float:
    """Cycles of a block's output: O in FP16 to GM, each AIV its half of the rows."""
    return t.rows // 2 * d * 2 / costs["gm_bytes_per_cycle"] + costs["dma_head_cycles"]


def _flash_gm_bytes(t: FlashTiling, d: int, sizes: list) -> float:
    """GM bytes of a block over logical tiles of ``sizes`` keys: Q in and O out, and per tile S, P, K, V and P V."""
    return t.rows * d * 2 * 2 + sum(t.rows * n * (4 + 4 + 2 + 2) + 2 * n * d * 2 + 2 * t.rows * d * 4
                                    for n in sizes)


def _flash_block_bound(t: FlashTiling, d: int, kv: int, costs: dict) -> tuple[float, float]:
    """The pipe bound of :func:`_flash_block`, as :func:`_clocks` takes the kernel's: each core's work over the block
    as one segment with no waits (the AIC's QK and PV, an AIV's softmax, O updates and output), and its GM bytes."""
    tiles = -(-kv // t.tile)
    sizes = [min(t.tile, kv - i * t.tile) for i in range(tiles)]
    aic, aiv = collections.Counter(), collections.Counter({"MTE3": _flash_output(t, d, costs)})
    for n in sizes:
        st = flash_stage_pipes(t, d, costs, n)
        for counter, stages in ((aic, ("QK", "PV")), (aiv, ("softmax", "O update"))):
            for stage in stages:
                counter.update(st[stage])
    return max(_segment_cycles(aic, costs), _segment_cycles(aiv, costs)), _flash_gm_bytes(t, d, sizes)


def flash_attention_seconds(batch, num_heads, seq_q, seq_kv, head_dim, costs: dict | None = None,
                            tiling: FlashTiling = FlashTiling(), cores: int = AI_CORES, bound: bool = False) -> float:
    """Modelled seconds of the PTO-structured FlashAttention (FP32 S through GM, FP16 P, the O update on the AIVs)
    for a call without a mask: its blocks of ``tiling.rows`` query rows dealt evenly over the cores, each core's
    blocks back to back with a dispatch each, the launch, and the aggregate GM/L2 bound, as :func:`model` prices
    the kernel. ``bound``: each block at its pipe bound (:func:`_flash_block_bound`), as
    :attr:`Result.seconds_bound` prices the kernel."""
    costs = {**A2_COSTS, **(costs or {})}
    blocks = batch * num_heads * -(-seq_q // tiling.rows)
    per_core = -(-blocks // cores)
    block, gm = (_flash_block_bound if bound else _flash_block)(tiling, head_dim, seq_kv, costs)
    busiest = per_core * (block + costs["dispatch_cycles"])
    l2 = blocks * gm / costs["l2_bytes_per_cycle"]
    hbm = _hbm_seconds(batch, num_heads, num_heads, seq_q, seq_kv, head_dim, shifted=False) * CLOCK_HZ
    return (costs["launch_cycles"] + max(busiest, l2, hbm)) / CLOCK_HZ


def best_flash_attention(batch, num_heads, seq_q, seq_kv, head_dim, costs: dict | None = None, bound: bool = False):
    """The fair baseline: the PTO-structured FlashAttention at the fastest of its legal tilings
    (:data:`FLASH_TILINGS`), as (seconds, tiling); ``bound``: the lowest pipe bound of any of them."""
    legal = [t for t in FLASH_TILINGS if _fits(t, head_dim)]
    if not legal:
        raise ValueError(f"head_dim {head_dim}: no tiling of the FlashAttention structure fits the A2's buffers")
    return min((flash_attention_seconds(batch, num_heads, seq_q, seq_kv, head_dim, costs, t, bound=bound), t)
               for t in legal)


def calibration_residuals(costs: dict) -> dict:
    """Relative residuals (model / published - 1) of the kernel's stages at PTO's tile and of the PTO-structured
    FlashAttention (128-row blocks, 256-key tiles, 4 preloaded) at PTO's six measured points."""
    res = {f"stage {k}": v / PTO_STAGE_CYCLES[k] - 1 for k, v in kernel_stages(costs).items()}
    res.update({f"PTO S = {s // 1024}k": flash_attention_seconds(1, 1, s, s, 128, costs) * 1e6 / us - 1
                for s, us in PTO_MEASURED_US.items()})
    return res


def _misfit(res: dict) -> float:
    """Squared excess of each residual over its tolerance, plus a small pull of the measured points' residuals
    towards 0. The stage cycles are those of PTO's kernel, whose softmax is not ours: they bound our kernel's stages
    within their tolerance but do not pull them, or a kernel doing less work would move the estimates until it cost
    PTO's cycles again. Among the estimates that meet every tolerance, the on-board points choose."""
    excess = [max(0.0, abs(v) / (STAGE_TOLERANCE if k.startswith("stage") else POINT_TOLERANCE) - 1) for k, v in
              res.items()]
    return sum(e * e for e in excess) + 0.01 * sum(v * v for k, v in res.items() if not k.startswith("stage"))


def calibrate(samples: int = 300, sweeps: int = 4, seed: int = 0) -> tuple[dict, dict]:
    """Fits the estimates of :data:`FITTED` over their candidate values: ``samples`` random points of that grid, then
    coordinate search from the best of them, minimising :func:`_misfit`. Deterministic for a seed. Returns
    (costs, residuals)."""
    stages: dict = {}

    def residuals(costs):
        key = tuple(costs[k] for k in A2_COSTS if k not in LAUNCH_KEYS)
        if key not in stages:
            stages[key] = kernel_stages(costs)
        res = {f"stage {k}": v / PTO_STAGE_CYCLES[k] - 1 for k, v in stages[key].items()}
        res.update({f"PTO S = {s // 1024}k": flash_attention_seconds(1, 1, s, s, 128, costs) * 1e6 / us - 1
                    for s, us in PTO_MEASURED_US.items()})
        return res

    rng = np.random.default_rng(seed)
    trials = [dict(A2_COSTS)] + [{**A2_COSTS, **{k: float(rng.choice(v)) for k, v in FITTED.items()}}
                                  for _ in range(samples)]
    score, _, costs = min((_misfit(residuals(c)), i, c) for i, c in enumerate(trials))
    for _ in range(sweeps):
        moved = False
        for key, values in FITTED.items():
            for value in values:
                trial = {**costs, key: float(value)}
                trial_score = _misfit(residuals(trial))
                if trial_score < score:
                    score, costs, moved = trial_score, trial, True
        if not moved:
            break
    return costs, residuals(costs)


#: Where an estimate is fitted at 0 its band takes this value instead of x2 (x0.5 of 0 is 0).
BAND_FROM_ZERO = {"dma_head_cycles": 100.0, "vec_head_cycles": 10.0, "mmad_head_cycles": 30.0,
                  "dependent_fraction": 0.2}

#: The shapes the speed goals are stated on: (name, B, N, Nkv, S1, S2, D).
TARGET_SHAPES = (
    ("Qwen2-7B prefill", 1, 28, 4, 5676, 5676, 128),
    ("video DiT (SVD), D = 64", 50, 5, 5, 9216, 9216, 64),
    ("D = 128, 4k", 1, 32, 8, 4096, 4096, 128),
    ("D = 256, 4k", 1, 16, 16, 4096, 4096, 256),
)
DECODE_SHAPE = ("decode, 4096 keys", 1, 32, 8, 1, 4096, 128)
#: The single-head lengths of the measured comparison (S1 = S2 = S, D = 128).
SINGLE_HEAD = (8192, 16384, 32768)


def band_variants(costs: dict) -> list[tuple[str, dict]]:
    """Each fitted estimate at x0.5 and x2 of its fitted value, the others as fitted (a zero takes
    :data:`BAND_FROM_ZERO`'s value); the dependent fraction is capped at 1."""
    out = []
    for key in FITTED:
        v = costs[key]
        alts = (0.5 * v, 2 * v) if v else (BAND_FROM_ZERO[key],)
        for alt in alts:
            alt = min(alt, 1.0) if key == "dependent_fraction" else alt
            out.append((f"{key} = {alt:g}", {**costs, key: alt}))
    return out


#: The speed goals: metric of :func:`targets` -> (">=" or "<=", threshold).
GOALS = {**{f"TFLOP/s S = {s // 1024}k": (">=", t) for s, t in zip(SINGLE_HEAD, (123, 159, 188))},
         **{f"{name} / baseline": ("<=", 0.90) for name, *_ in TARGET_SHAPES},
         f"{DECODE_SHAPE[0]} / fp16_fp32": ("<=", 1.0)}
#: Suffixes of a goal's metric: FRAME_AT_BOUND with fp32_frame at its pipe bound (:attr:`Result.seconds_bound`, what
#: no schedule of its instructions beats) and the baseline as modelled; AT_BOUNDS with the baseline at its pipe bound
#: too (``best_flash_attention(bound=True)``, fp16_fp32's ``seconds_bound``): what the two kernels' work alone gives.
FRAME_AT_BOUND = ", fp32_frame at its pipe bound"
AT_BOUNDS = ", both at their pipe bounds"


def _meets(metric: str, value: float) -> bool:
    op, threshold = GOALS[metric]
    return value >= threshold if op == ">=" else value <= threshold


def targets(costs: dict) -> dict:
    """The speed goals' metrics under ``costs``: fp32_frame's TFLOP/s on one head at S = 8k/16k/32k, its time
    over the fair baseline's (the PTO-structured FP32-softmax FlashAttention at its best tiling) and over the
    in-kernel FP32-softmax FlashAttention's (fp16_fp32, at the tiling its search picks) on the target shapes, and
    on decode over fp16_fp32's; for each goal (:data:`GOALS`) also its metric with fp32_frame at its pipe bound
    (key + :data:`FRAME_AT_BOUND`) and, for a ratio, with both kernels at theirs (key + :data:`AT_BOUNDS`)."""
    out = {}
    for s in SINGLE_HEAD:
        r = model(1, 1, 1, s, s, 128, precision="fp32_frame", costs=costs)
        out[f"TFLOP/s S = {s // 1024}k"] = r.tflops
        out[f"TFLOP/s S = {s // 1024}k" + FRAME_AT_BOUND] = r.flops / r.seconds_bound / 1e12
        out[f"baseline TFLOP/s S = {s // 1024}k"] = r.flops / best_flash_attention(1, 1, s, s, 128, costs)[0] / 1e12
    for name, b, n, nkv, s1, s2, d in TARGET_SHAPES:
        frame = model(b, n, nkv, s1, s2, d, precision="fp32_frame", costs=costs)
        flash = model(b, n, nkv, s1, s2, d, precision="fp16_fp32", costs=costs).seconds
        baseline = best_flash_attention(b, n, s1, s2, d, costs)[0]
        out[f"{name} / baseline"] = frame.seconds / baseline
        out[f"{name} / baseline" + FRAME_AT_BOUND] = frame.seconds_bound / baseline
        out[f"{name} / baseline" + AT_BOUNDS] = (frame.seconds_bound /
                                                 best_flash_attention(b, n, s1, s2, d, costs, bound=True)[0])
        out[f"{name} / fp16_fp32"] = frame.seconds / flash
    name, b, n, nkv, s1, s2, d = DECODE_SHAPE
    frame, flash = (model(b, n, nkv, s1, s2, d, precision=p, costs=costs) for p in ("fp32_frame", "fp16_fp32"))
    out[f"{name} / fp16_fp32"] = frame.seconds / flash.seconds
    out[f"{name} / fp16_fp32" + FRAME_AT_BOUND] = frame.seconds_bound / flash.seconds
    out[f"{name} / fp16_fp32" + AT_BOUNDS] = frame.seconds_bound / flash.seconds_bound
    return out


#: The stacked handshakes the search compares: kvStack KV blocks a stack (logical KV tiles of 128, 256 and 512 keys,
#: ramped at a task's ends) and S preLaunch stacks ahead. 1024-key tiles do not fit: with S 2 stacks ahead their
#: slot rings would hold 24 blocks, beyond MAX_SLOT_RING (16, op_kernel/pasa_buffer_plan.h).
HANDSHAKES = tuple((stack, ahead) for stack in (1, 2, 4) for ahead in (2, 3))
#: The calls the handshake search compares on: the target shapes and one head at S = 8k, D = 128.
SEARCH_SHAPES = TARGET_SHAPES + (("one head, S = 8k", 1, 1, 1, 8192, 8192, 128),)


def handshake_search(costs: dict, precision: str = "fp32_frame") -> dict:
    """Per call of :data:`SEARCH_SHAPES`, the calibrated seconds at each handshake of :data:`HANDSHAKES` (pinned, where
    it fits) and at the tiling's own choice (key ``"tiling"``): the check of the order of the kernel's list
    (op_host/pasa_tiling.cpp kStackedRings)."""
    out = {}
    for name, b, n, nkv, s1, s2, d in SEARCH_SHAPES:
        row = {"tiling": model(b, n, nkv, s1, s2, d, precision=precision, costs=costs).seconds}
        for hs in HANDSHAKES:
            row[hs] = model(b, n, nkv, s1, s2, d, precision=precision, costs=costs, handshake=hs).seconds
        out[name] = row
    return out


def _search_markdown(costs: dict) -> str:
    lines = []
    for precision in ("fp32_frame", KERNEL_FLASH):
        rows = handshake_search(costs, precision)
        lines += ["", f"| `{precision}`: time / the tiling's choice | " +
                  " | ".join(f"{k * 128} keys, {a} ahead" for k, a in HANDSHAKES) + " |",
                  "|---|" + "---|" * len(HANDSHAKES)]
        for name, row in rows.items():
            lines.append(f"| {name} | " + " | ".join(f"{row[hs] / row['tiling']:.3f}" for hs in HANDSHAKES) + " |")
    return "\n".join(lines[1:])


def _calibration_markdown(costs: dict, res: dict) -> str:
    lines = ["| estimate | fitted value | candidates |", "|---|---|---|"]
    lines += [f"| `{k}` | {costs[k]:g} | {', '.join(f'{v:g}' for v in vals)} |" for k, vals in FITTED.items()]
    lines += ["", "| target | published (910B2) | calibrated model | residual | tolerance |", "|---|---|---|---|---|"]
    stages = kernel_stages(costs)
    for k, v in stages.items():
        lines.append(f"| stage {k}, cycles (fp32_frame at 128 x 256, D = 128) | {PTO_STAGE_CYCLES[k]:.0f} (PTO's "
                     f"simulator fit) | {v:.0f} | {res['stage ' + k]:+.1%} | ±{STAGE_TOLERANCE:.0%} |")
    flash = flash_stages(FlashTiling(), 128, costs)
    for k, v in flash.items():
        lines.append(f"| stage {k}, cycles (PTO's structure, same costs; not fitted) | {PTO_STAGE_CYCLES[k]:.0f} | "
                     f"{v:.0f} | {v / PTO_STAGE_CYCLES[k] - 1:+.1%} | — |")
    for s, us in PTO_MEASURED_US.items():
        m = flash_attention_seconds(1, 1, s, s, 128, costs) * 1e6
        lines.append(f"| PTO FlashAttention, S = {s // 1024}k, µs | {us:.1f} (measured by others) | {m:.1f} | "
                     f"{m / us - 1:+.1%} | ±{POINT_TOLERANCE:.0%} |")
    return "\n".join(lines)


def _targets_markdown(costs: dict) -> str:
    base = targets(costs)
    bands = [(name, targets(c)) for name, c in band_variants(costs)]
    lines = ["| metric | calibrated model | band (each estimate x0.5, x2) | target | measured by others |",
             "|---|---|---|---|---|"]
    for k, v in base.items():
        values = [v] + [b[k] for _, b in bands]
        goal = GOALS.get(k.removesuffix(AT_BOUNDS).removesuffix(FRAME_AT_BOUND))
        target = f"{goal[0]} {goal[1]:g}" if goal else "—"
        other = "—"
        if k.startswith("TFLOP/s") and k in GOALS:
            s = int(k.split("= ")[1][:-1]) * 1024
            f = 4.0 * s * s * 128
            other = f"PTO {f / PTO_MEASURED_US[s] / 1e6:.1f}, torch_npu {f / TORCH_NPU_MEASURED_US[s] / 1e6:.1f}"
        lines.append(f"| {k} | {v:.3g} | {min(values):.3g} – {max(values):.3g} | {target} | {other} |")
    # Each goal at its band's worst end (the fit where the whole band meets it): the model, fp32_frame at its pipe
    # bound, and both kernels at theirs; a value that misses the goal in bold.
    lines += ["", "| goal | target | band's worst end | calibrated model | fp32_frame at its pipe bound | "
              "both at their pipe bounds |", "|---|---|---|---|---|---|"]
    for k, (op, threshold) in GOALS.items():
        name, worst = max(bands, key=lambda nb: nb[1][k] if op == "<=" else -nb[1][k])
        if _meets(k, worst[k]):
            name, worst = "none: the fit", base
        cells = ["—" if v is None else f"{v:.3g}" if _meets(k, v) else f"**{v:.3g}**"
                 for v in (worst[k], worst[k + FRAME_AT_BOUND], worst.get(k + AT_BOUNDS))]
        lines.append(f"| {k} | {op} {threshold:g} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_calibration(path: str, body: str) -> None:
    """Replaces the part of ``path`` between the calibration markers with ``body`` (the fit's tables)."""
    begin, end = "<!-- calibration:begin -->", "<!-- calibration:end -->"
    text = open(path, encoding="utf-8").read()
    if begin not in text or end not in text:
        raise ValueError(f"{path}: no {begin} ... {end} section to replace")
    head, rest = text.split(begin, 1)
    open(path, "w", encoding="utf-8").write(head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1])


#: The paper's shapes (docs/cost_model.md): (name, B, N, Nkv, S1, S2, D).
PAPER_SHAPES = (
    ("Qwen2-7B prefill", 1, 28, 4, 5676, 5676, 128),
    ("SVD (video diffusion)", 50, 5, 5, 9216, 9216, 64),
    ("decode, 4096 keys", 1, 32, 8, 1, 4096, 128),
)


def _row(name, shape, precision, r: Result) -> str:
    b, n, nkv, s1, s2, d = shape
    return (f"| {name} | {b}x{n}x{s1}x{d}, Nkv {nkv}, S2 {s2} | {precision} | {r.seconds * 1e3:.3f} | "
            f"{r.tflops:.1f} | {r.seconds_overlap * 1e3:.3f} – {r.seconds_serial * 1e3:.3f} | {r.bottleneck} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pasa_npu.cost_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--paper", action="store_true",
                    help="the paper's shapes, every allocation the kernel has, and their time over fp16_fp32's "
                         "(markdown)")
    ap.add_argument("--pipes", action="store_true", help="also print the cycles per pipe behind each row")
    ap.add_argument("--calibrate", action="store_true",
                    help="fit the estimates to the published 910B2 figures and print the residuals and the targets "
                         "with their sensitivity band and pipe bounds (markdown; minutes)")
    ap.add_argument("--write", metavar="PATH", help="with --calibrate: replace the calibration section of PATH "
                                                    "(docs/cost_model.md)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--num-heads", type=int, default=8)
    ap.add_argument("--num-kv-heads", type=int, default=0, help="0: num_heads")
    ap.add_argument("--seq-q", type=int, default=1024)
    ap.add_argument("--seq-kv", type=int, default=0, help="0: seq_q")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--layout", default="BNSD", choices=npu_host_model.LAYOUTS)
    ap.add_argument("--precision", default="fp32_frame", choices=npu_host_model.PRECISIONS)
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
    if args.calibrate:
        fitted, res = calibrate()
        changed = {k: fitted[k] for k in FITTED if fitted[k] != A2_COSTS[k]}
        body = (_calibration_markdown(fitted, res) + "\n\n" + _targets_markdown(fitted) + "\n\n" +
                _search_markdown(fitted))
        print(body)
        if changed:
            print(f"\nthe fit differs from A2_COSTS: {changed}")
        if args.write:
            write_calibration(args.write, body)
        return 0
    print(f"A MODEL of an Atlas A2 ({AI_CORES} AI cores at {CLOCK_HZ / 1e9:.1f} GHz, peak {PEAK_TFLOPS:.0f} FP16 "
          f"TFLOP/s), calibrated to published 910B2 figures (docs/cost_model.md, where the band is); nothing here "
          f"ran on an NPU.")
    print("| case | shape | precision | calibrated model, ms | TFLOP/s | ms on the overlap – serial clocks | "
          "bottleneck pipe |")
    print("|---|---|---|---|---|---|---|")
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
        print(f"|  | method: {r.method}; unique HBM traffic alone: {r.hbm_bound_seconds * 1e3:.3f} ms; all GM "
              f"traffic at the aggregate rate: {r.l2_bound_seconds * 1e3:.3f} ms; at the pipe bound: "
              f"{r.seconds_bound * 1e3:.3f} ms | | | | | |")
        if args.pipes:
            for side, pipes in (("AIC", r.aic_pipe_cycles), ("AIV", r.aiv_pipe_cycles)):
                cells = ", ".join(f"{p} {pipes[p]:.0f}" for p in PIPES if pipes.get(p))
                print(f"|  | {side} cycles per pipe: {cells} | | | | | |")
        sys.stdout.flush()
    if args.paper:
        _print_ratios(results)
    return 0


#: The kernel's own FlashAttention: FP16 S, FP32 softmax and O (tiling key 2), at the tiling its search picks.
KERNEL_FLASH = "fp16_fp32"


def _print_ratios(results: dict) -> None:
    """Calibrated time of each allocation over the fair baseline's (the PTO-structured FP32-softmax FlashAttention
    at its best tiling; prefill only) and over the kernel's own FlashAttention's, per shape (< 1: faster)."""
    print()
    print("| case | " + " | ".join(f"{p} / baseline | {p} / {KERNEL_FLASH}" for p in npu_host_model.PRECISIONS) + " |")
    print("|---|" + "---|---|" * len(npu_host_model.PRECISIONS))
    for name, b, n, nkv, s1, s2, d in PAPER_SHAPES:
        base = best_flash_attention(b, n, s1, s2, d)[0] if s1 > 1 else float("nan")
        flash = results[name, KERNEL_FLASH].seconds
        cells = [f"{results[name, p].seconds / base:.2f} | {results[name, p].seconds / flash:.2f}"
                 for p in npu_host_model.PRECISIONS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
