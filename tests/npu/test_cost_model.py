"""The cost model's counts against a hand count of the kernel on a small case, its clocks, its CLI.

Case: B = N = 1, S1 = S2 = 128, D = 64, "pasa" (blockQ 128, one task on one AI core, one KV block).
The AIC issues three matrix products, each one Mmad (baseK = D = 64):
  K' = M K     M (128 x 128) times K (128 x 64):   8 x 4 x 8 = 256 fractals
  S' = Q K'^T  Q (128 x 64) times K'^T (64 x 128): 8 x 8 x 4 = 256 fractals
  PV = P V     P (128 x 128) times V (128 x 64):   8 x 4 x 8 = 256 fractals
and moves: GM -> L1 (MTE2) K, M, Q, K', P, V; L1 -> L0A M, Q, P; L1 -> L0B K, K', V; L0C -> GM (Fixpipe)
K', S' and PV (FP16 in "pasa").
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pasa_npu._npu_host_model", reason="the host-model extension is not built")

from pasa_npu import cost_model, npu_host_model  # noqa: E402

FP16 = 2
Q_BYTES = K_BYTES = V_BYTES = KP_BYTES = 128 * 64 * FP16
M_BYTES = P_BYTES = S_BYTES = 128 * 128 * FP16
PV_BYTES = 128 * 64 * FP16


def _count(cost, precision="pasa"):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 128, 64)).astype(np.float16) for _ in range(3))
    _, _, counters = npu_host_model.count(q, k, v, cost=cost, num_heads=1, input_layout="BNSD",
                                          scale=1 / math.sqrt(64), precision=precision)
    return counters


def test_counts_match_the_hand_count():
    counters = _count({})
    assert len(counters) == 3  # one AIC, two AIVs
    aic, aiv0, aiv1 = counters
    assert aic["mmad_calls"] == 3
    assert aic["cube_fractals"] == 3 * 256
    assert aic["cube_macs"] == 3 * 128 * 128 * 64
    assert aic["mte2_bytes"] == K_BYTES + M_BYTES + Q_BYTES + KP_BYTES + P_BYTES + V_BYTES
    assert aic["l0a_bytes"] == M_BYTES + Q_BYTES + P_BYTES
    assert aic["l0b_bytes"] == K_BYTES + KP_BYTES + V_BYTES
    assert aic["fix_bytes"] == KP_BYTES + S_BYTES + PV_BYTES
    assert aic["vector"] == {} and aic["mte3_bytes"] == 0
    for aiv in (aiv0, aiv1):
        # Each AIV owns 64 rows: it reads its half of S' and of PV, and P' = exp(S' - m') is one Exp over
        # 64 x 128 halves = 64 repeats of 128 lanes (plus the row-vector exps).
        assert aiv["mmad_calls"] == 0 and aiv["cube_fractals"] == 0
        assert aiv["mte2_bytes"] >= S_BYTES // 2 + PV_BYTES // 2
        assert aiv["mte3_bytes"] >= P_BYTES // 2 + 64 * 64 * FP16  # P' and the output rows
        calls, repeats, cycles = aiv["vector"]["Exp.b16"]
        assert repeats >= 64 and cycles == 4 * repeats  # Exp: 32 elements a cycle, 128 a repeat
        # Cross-core handshake: M ready, S' ready, P ready, PV ready.
        assert aiv["cross_core_waits"] >= 2 and aiv["cross_core_sets"] >= 2


def test_flash_baseline_counts_have_no_shift():
    """FlashAttention ("fp16_fp32"): no M, no K' = M K; S = Q K^T from K itself, PV out in FP32. blockQ is
    64 on this D, so two tasks of 64 rows on two AI cores, each reading K and V once."""
    counters = _count({}, precision="fp16_fp32")
    assert len(counters) == 2 * 3
    for aic in counters[:2]:
        assert aic["mmad_calls"] == 2
        assert aic["cube_fractals"] == 4 * 8 * 4 + 4 * 4 * 8  # S (64 x 64 x 128), PV (64 x 128 x 64)
        assert aic["mte2_bytes"] == Q_BYTES // 2 + K_BYTES + P_BYTES // 2 + V_BYTES
        assert aic["fix_bytes"] == S_BYTES // 2 + 2 * PV_BYTES // 2


def test_vector_barriers_match_the_hand_count():
    """PipeBarrier<PIPE_V> of one FlashAttention task ("fp16_fp32": T = float; one KV block of 128 kept keys, no
    mask, every row valid, no KV split), per AIV, read off op_kernel/pasa_vector_stage.h (Run, Update, Finalize),
    pasa_softmax_flash.h (Block) and the row operations of pasa_vector_rows.h they call:
      Run: after zeroing m, l and O                                                                      1
      Block: S in FP32; S x scale; RowMax (the fold, the two block reductions); m_j; m_j clamped; its Brcb;
               S - m_j; exp; P in FP16; the row sum (the fold, the reduce); m_{j-1} - m_j; GuardedExp (two);
               alpha l                                                                                  17
      Update: alpha's Brcb; alpha O                                                                      2
      Finalize: l != 0; l or 1; its Brcb; m and l in FP32; ln l; m + ln l; the -inf rows; CheckOverflow
                (its flags, their select); O in FP16                                                    10
    Each costs barrier_cycles on the vector pipe, the only unit cost set here; the AICs issue none."""
    counters = _count({"barrier_cycles": 3.0}, precision="fp16_fp32")
    for aic in counters[:2]:
        assert "V" not in aic["pipe_barriers"]
    for aiv in counters[2:]:
        assert aiv["pipe_barriers"] == {"V": 30}
        assert aiv["pipe_cycles"]["V"] == 30 * 3.0


def test_pipe_cycles_follow_the_unit_costs():
    cost = dict(cube_cycles_per_fractal=1.0, l0a_bytes_per_cycle=256.0, l0b_bytes_per_cycle=128.0,
                gm_bytes_per_cycle=64.0)
    aic = _count(cost)[0]
    pipes = aic["pipe_cycles"]
    assert pipes["M"] == 768
    assert pipes["MTE1"] == aic["l0a_bytes"] / 256 + aic["l0b_bytes"] / 128
    assert pipes["MTE2"] == aic["mte2_bytes"] / 64
    assert pipes["FIX"] == aic["fix_bytes"] / 64


def test_clock_is_the_cube_time_when_only_the_cube_costs():
    # Every other unit free: the AIC's clock is its 768 fractal-cycles, the AIVs' clock is where the last
    # PV arrived (the AIC's clock after PV), and both rules (max and sum of pipes) agree.
    counters = _count({"cube_cycles_per_fractal": 1.0})
    aic = counters[0]
    assert aic["clock_overlap"] == aic["clock_serial"] == 768 and aic["wait_overlap"] == 0
    assert max(c["clock_overlap"] for c in counters) == 768


def test_vector_work_on_the_handshake_path_delays_the_cube():
    # With vector costs too, the AIC waits for the AIVs' softmax: its clock is its own 768 cube cycles
    # plus the time it waited, and the AIVs finish after the last PV reached them.
    counters = _count({"cube_cycles_per_fractal": 1.0, "vec_repeat_scale": 1.0})
    aic, aiv0, aiv1 = counters
    assert aic["wait_overlap"] > 0
    assert aic["clock_overlap"] == 768 + aic["wait_overlap"]
    assert aic["clock_serial"] == 768 + aic["wait_serial"]
    assert min(aiv0["clock_overlap"], aiv1["clock_overlap"]) >= aic["clock_overlap"] - 256  # PV is the last 256


def test_flag_latency_lies_on_the_handshake_path():
    # With only a flag latency, the AIC waits for M (1 hop), then P (2 more hops: S' to the AIVs, P back):
    # its clock counts whole hops of the AIC <-> AIV handshake.
    counters = _count({"flag_latency_cycles": 100.0})
    clocks = sorted({c["clock_overlap"] for c in counters})
    assert all(t % 100 == 0 for t in clocks) and clocks[-1] >= 300


def test_attention_flops():
    assert cost_model.attention_flops(1, 2, 4, 4, 8) == 4 * 2 * 16 * 8
    assert cost_model.attention_flops(1, 1, 4, 4, 8, sparse_mode=2) == 4 * (1 + 2 + 3 + 4) * 8
    assert cost_model.attention_flops(1, 1, 2, 4, 8, sparse_mode=3) == 4 * (3 + 4) * 8


def test_causal_tasks_are_dealt_evenly_over_the_cores():
    """Causal FlashAttention (fp16_fp32 skips the KV blocks a query tile's mask hides): query block i of
    64 rows walks ceil(64 (i + 1) / 128) KV blocks, 1, 1, 2, 2, ..., 8, 8 for the 16 blocks of a head at
    S = 1024. Two heads, 32 tasks on 4 AI cores: consecutive ranges of 8 tasks would give the cores
    20, 52, 20 and 52 blocks; dealt in alternating rounds every core walks 36, so every AIC issues the
    same cube work: 36 blocks of S (64 x 64 x 128 keys) and P V (64 x 128 x 64), 128 fractals each."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 1024, 64)).astype(np.float16) for _ in range(3))
    mask = np.triu(np.ones((2048, 2048), dtype=np.bool_), k=1)
    _, _, counters = npu_host_model.count(q, k, v, cost={}, ai_cores=4, atten_mask=mask, sparse_mode=3,
                                          num_heads=2, input_layout="BNSD", precision="fp16_fp32")
    aics = counters[:4]
    assert [c["cube_fractals"] for c in aics] == [36 * 2 * 128] * 4


def test_decode_reads_k_and_v_once_per_kv_head():
    """Decode with GQA packs a KV head's query heads into the rows of its tasks. B = 1, N = 8, Nkv = 2
    (g = 4), S1 = 1, S2 = 512 (4 KV blocks), D = 64, "fp16_fp32" on the A2's 24 cores: 2 tasks (b, kv head),
    each split over kvSplits = 4 cores (one KV block each: the busiest core's 1 + 1 is the least), 8 tasks of
    4 rows in a 16-row tile (one fractal high; the padding rows repeat the last row, read again from GM).
    Each task moves GM -> L1 its query tile (16 x 64 x 2 = 2048 B), its KV block of K and of V
    (128 x 64 x 2 = 16384 B each) and the tile's P (16 x 128 x 2 = 4096 B). In all:
      Q: kvSplits x B Nkv 16 D 2 = 4 x 2 x 16 x 64 x 2 = 16384 B
      K: B Nkv S2 D 2 = 2 x 512 x 64 x 2 = 131072 B, and V the same
      P: B Nkv 16 S2 2 = 2 x 16 x 512 x 2 = 32768 B
    One task per query head (a 16-row tile of one valid row each) read K and V g = 4 times: 524288 B each."""
    rng = np.random.default_rng(2)
    B, N, NKV, S2, D = 1, 8, 2, 512, 64
    q = rng.standard_normal((B, N, 1, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, NKV, S2, D)).astype(np.float16) for _ in range(2))
    kw = dict(num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", precision="fp16_fp32")
    tiling = npu_host_model.tiling(q, k, v, **kw)
    assert tiling["packedHeads"] == N // NKV and tiling["kvSplits"] == 4
    assert tiling["totalTasks"] == B * NKV * tiling["kvSplits"]
    _, _, counters = npu_host_model.count(q, k, v, cost={}, **kw)
    aic_mte2 = sum(c["mte2_bytes"] for c in counters[:len(counters) // 3])
    tile_rows = 16
    q_bytes = tiling["kvSplits"] * B * NKV * tile_rows * D * FP16
    kv_bytes = B * NKV * S2 * D * FP16
    p_bytes = B * NKV * tile_rows * S2 * FP16
    assert aic_mte2 == q_bytes + 2 * kv_bytes + p_bytes


#: The stacked handshake's case: "fp16_fp32" (blockQ 64 at D = 64, no pre-pass flags), B = 2, S1 = 64, S2 = 1742,
#: actual_seq_lengths_kv [1742, 200]: one task per batch, each on its own AI core. The tiling stacks 2 KV blocks
#: per handshake and computes S' 3 stacks ahead (kvStack = min(2, 14 blocks), preLaunch = min(3, 8 stacks - 1)),
#: so the slots rotate over 4 stacks of 2. Task 0 has 14 blocks: stacks of 1, 2, 2, 2, 2, 2, 2, 1 (ramped at its
#: ends); task 1 has 2 blocks: one stack, fewer than the 3 the AIC computes ahead.
STACK_CASE_KEYS = [1742, 200]


def _stack_case_counts(cost):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 64, 64)).astype(np.float16)
    k, v = (rng.standard_normal((2, 1, 1742, 64)).astype(np.float16) for _ in range(2))
    kw = dict(num_heads=1, input_layout="BNSD", precision="fp16_fp32", actual_seq_lengths_kv=STACK_CASE_KEYS)
    tiling = npu_host_model.tiling(q, k, v, **kw)
    _, _, counters = npu_host_model.count(q, k, v, cost=cost, **kw)
    return tiling, counters


def test_one_handshake_per_stack_of_kv_blocks():
    """Per stack, the AIC sets S_READY once, waits for P once and sets PV_READY once; each AIV waits for S' and
    for PV once and sets P once: 8 of each for 14 blocks (1 + 6 x 2 + 1), 1 for 2 (one per block would be 14 and
    2)."""
    tiling, counters = _stack_case_counts({})
    assert (tiling["kvStack"], tiling["preLaunch"], tiling["blockQ"]) == (2, 3, 64)
    assert len(counters) == 2 * 3
    aics, aivs = counters[:2], counters[2:]
    for core, stacks in enumerate((8, 1)):
        assert aics[core]["cross_core_waits"] == stacks
        assert aics[core]["cross_core_sets"] == 2 * stacks
        for aiv in aivs[2 * core:2 * core + 2]:
            assert aiv["cross_core_waits"] == 2 * stacks
            assert aiv["cross_core_sets"] == stacks


def test_flag_latency_counts_the_hops_of_the_stacked_handshake():
    """Only the flag latency costs (100 cycles a hop). Task 0 (8 stacks, S' 3 stacks ahead): the AIC sets S'
    of stacks 0-3 at 0; the AIVs get them at 100 and send P of each at 100; the AIC gets P_0 at 200, sets PV_0
    and S'_4 at 200, and P_1 - P_3 (sent at 100) let it set PV_1 - PV_3 and S'_5 - S'_7 at 200; the AIVs get them
    at 300 and send P_4 - P_7 at 300; the AIC sets PV_4 - PV_7 at 400 and the AIVs finish at 500: 5 hops, where
    one handshake per block (14 blocks, S' one block ahead) took 15. Task 1 (one stack): S' at 0, P at 100, PV at
    200, done at 300."""
    _, counters = _stack_case_counts({"flag_latency_cycles": 100.0})
    aics, aivs = counters[:2], counters[2:]
    assert [c["clock_overlap"] for c in aics] == [400, 200]
    assert [c["clock_overlap"] for c in aivs] == [500, 500, 300, 300]
    assert all(c["clock_serial"] == c["clock_overlap"] for c in counters)


def test_model_small_case_runs_in_full_and_reports_a_rate():
    r = cost_model.model(1, 2, 1, 256, 256, 64, precision="pasa")
    # 2 KV blocks: one stack of both, no second stack to compute ahead
    assert r.method == ("full run on the host model; handshake: stacks of 2 KV blocks (ramped at a task's ends), "
                        "S' 1 stack ahead")
    assert 0 < r.seconds_overlap <= r.seconds_serial
    assert 0 < r.tflops_serial <= r.tflops_overlap < cost_model.PEAK_TFLOPS


@pytest.mark.parametrize("precision, sparse_mode", [("pasa", 0), ("fp16_fp32", 0), ("pasa_rs", 0), ("pasa", 3)])
def test_scaled_model_agrees_with_a_full_run(precision, sparse_mode):
    # The reduced-run scaling on a shape small enough to run in full: within 15% (FlashAttention has no
    # K' pre-pass: its fixed part is once per core; pasa_rs has its centring pre-pass). Causal (every
    # allocation skips the blocks a tile does not see): a task's time taken as linear in its KV blocks
    # (measured: scaled / full 0.88 for pasa; 0.85 for pasa_rs, whose tasks of one or two blocks cost more
    # than the line, docs/cost_model.md). Walking every block would be about 1.8x.
    full = cost_model.model(1, 4, 2, 512, 512, 64, precision=precision, sparse_mode=sparse_mode)
    scaled = cost_model.model(1, 4, 2, 512, 512, 64, precision=precision, sparse_mode=sparse_mode,
                              full_run_limit=0)
    assert scaled.method.startswith("scaled")
    assert scaled.seconds_overlap == pytest.approx(full.seconds_overlap, rel=0.15)
    assert scaled.seconds_serial == pytest.approx(full.seconds_serial, rel=0.15)


def test_cli_prints_a_model_row(capsys):
    assert cost_model.main(["--num-heads", "2", "--seq-q", "128", "--head-dim", "64"]) == 0
    out = capsys.readouterr().out
    assert "A MODEL of an Atlas A2" in out and "| call | 1x2x128x64" in out


def test_paged_decode_is_modelled_from_a_full_run(capsys):
    """PageAttention (--page-size): the same decode read through shuffled pages of 48 keys (480 keys: the
    same 4 KV blocks as dense). It moves the same bytes (tests/serving/test_paged.py counts them) in more DMA
    issues and reads the table on the scalar unit, so it is modelled no faster than the dense decode."""
    dense = cost_model.model(1, 2, 1, 1, 480, 64, precision="fp16_fp32")
    paged = cost_model.model(1, 2, 1, 1, 480, 64, precision="fp16_fp32", page_size=48)
    assert paged.method.startswith("full run on the host model")
    assert paged.seconds_serial >= dense.seconds_serial and paged.seconds_overlap >= dense.seconds_overlap
    with pytest.raises(ValueError, match="paged shapes too large for a full run are not scaled"):
        cost_model.model(1, 2, 1, 256, 480, 64, page_size=48, full_run_limit=0)
    assert cost_model.main(["--num-heads", "2", "--seq-q", "1", "--seq-kv", "480", "--head-dim", "64",
                            "--page-size", "48"]) == 0
    assert "| call, pages of 48 (shuffled) | 1x2x1x64" in capsys.readouterr().out


def test_model_clock_lies_between_overlap_and_serial_and_segments_partition_the_run():
    base = {"cube_cycles_per_fractal": 1, "l0a_bytes_per_cycle": 256, "l0b_bytes_per_cycle": 128,
            "gm_bytes_per_cycle": 64, "vec_repeat_scale": 1, "record_segments": 1}
    for fraction in (0.0, 0.3, 1.0):
        counters = _count({**base, "dependent_fraction": fraction})
        for c in counters:
            lo, hi = c["clock_overlap"], c["clock_serial"]
            assert lo <= c["clock_model"] <= hi
            if fraction == 0.0:
                assert c["clock_model"] == lo
            if fraction == 1.0:
                assert c["clock_model"] == hi
            # the recorded segments hold every cycle the core's pipes were charged, once
            for pipe, total in c["pipe_cycles"].items():
                assert sum(seg.get(pipe, 0.0) for seg in c["segments"]) == pytest.approx(total)
    assert _count({**base, "dependent_fraction": 0.3})[0]["clock_model"] < _count(
        {**base, "dependent_fraction": 0.6})[0]["clock_model"]


def test_framed_aic_sums_beside_the_scores_in_large_s_chunks():
    """fp32_frame at D = 128 on 384 query rows x 2048 keys (one head, one AI core, N(0, 1) inputs, whose frames move
    only at a row's first key). The tiling takes three blocks of 128 rows, not two of 192: [O | l] of 192 rows
    (192 x 144 FP32) leaves L0C room for S only in chunks of 16 rows. Hand count per task of 16 KV blocks: S in
    three ping-pong chunks of at most 48 rows (3 Mmads, 3 Fixpipes a block), P [V | 1] as one Mmad for the ones strip
    and one for V (2 a block), and the final [O | l] out once (one Fixpipe: 128 rows are one half). And S of stack i
    shares a segment with the sums of stack i - preLaunch: with 9 stacks (1, 7 x 2, 1 blocks) and S 3 stacks ahead,
    the AIC's segments with cube work are per task 3 of S alone, 2 for the first stack with both (S before the P
    wait), 1 for each of the 5 other stacks with both and 3 of sums alone: 13, where S and the sums in separate
    segments would make 18."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 384, 128)).astype(np.float16)
    k, v = (rng.standard_normal((1, 1, 2048, 128)).astype(np.float16) for _ in range(2))
    kw = dict(num_heads=1, input_layout="BNSD", scale=1 / math.sqrt(128), precision="fp32_frame")
    tiling = npu_host_model.tiling(q, k, v, **kw)
    assert (tiling["blockQ"], tiling["kvStack"], tiling["preLaunch"]) == (128, 2, 3)
    _, _, counters = npu_host_model.count(q, k, v, cost={**cost_model._core_costs(cost_model.A2_COSTS),
                                                         "record_segments": 1}, ai_cores=1, **kw)
    aic, tasks, blocks = counters[0], 3, 16
    assert aic["mmad_calls"] == tasks * blocks * (3 + 2)
    assert aic["fix_calls"] == tasks * (blocks * 3 + 1)
    assert sum(1 for seg in aic["segments"] if seg.get("M", 0) > 0) == tasks * 13


def test_framed_decode_hands_off_no_more_often_than_flash_attention():
    """Decode (B = 1, N = 4, Nkv = 1: a 16-row tile of the GQA group's 4 heads, S2 = 4096: 32 KV blocks in 17 stacks,
    S 3 stacks ahead) on one AI core, with only a flag latency of 1 cycle priced: each core's clock is then the number
    of cross-core hand-offs on its longest chain. fp32_frame's AIC sends a decode tile's S of stack i before it waits
    for P of stack i - 3, as fp16_fp32's does, so its AIVs' chain is no longer (11 hand-offs each); with S behind that
    wait (the order of larger tiles, whose S the Fixpipe drains while the cube sums) it would grow by two every 3
    stacks instead of every 4 (13)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 1, 128)).astype(np.float16)
    k, v = (rng.standard_normal((1, 1, 4096, 128)).astype(np.float16) for _ in range(2))
    hand_offs = {}
    for precision in ("fp32_frame", "fp16_fp32"):
        _, _, counters = npu_host_model.count(q, k, v, cost={"flag_latency_cycles": 1.0}, ai_cores=1, num_heads=4,
                                              num_key_value_heads=1, input_layout="BNSD", precision=precision)
        assert (counters[0]["kv_stack"], counters[0]["pre_launch"]) == (2, 3)
        hand_offs[precision] = [c["clock_model"] for c in counters]
    frame, flash = hand_offs["fp32_frame"], hand_offs["fp16_fp32"]
    assert min(flash) > 0
    assert all(f <= b for f, b in zip(frame, flash)), (frame, flash)


def test_fixpipe_has_its_own_rate():
    counters = _count({"gm_bytes_per_cycle": 64, "fix_bytes_per_cycle": 16})
    aic = counters[0]
    assert aic["pipe_cycles"]["FIX"] == aic["fix_bytes"] / 16
    assert aic["pipe_cycles"]["MTE2"] == aic["mte2_bytes"] / 64


def test_calibrated_costs_reproduce_the_published_910b2_figures():
    # hw-native-sys/pto-isa kernels/manual/common/flash_atten: PTO's six measured points (within 15%) through the
    # PTO-structured FlashAttention, and our kernel's four stages at PTO's tile (within 20%) against its simulator fit.
    res = cost_model.calibration_residuals(cost_model.A2_COSTS)
    assert len(res) == 10
    for key, r in res.items():
        tolerance = cost_model.STAGE_TOLERANCE if key.startswith("stage") else cost_model.POINT_TOLERANCE
        assert abs(r) <= tolerance, (key, r)
    # the estimates never touch the documented costs
    for key, (kind, _) in cost_model.COST_SOURCES.items():
        if kind == "documented":
            assert key not in cost_model.FITTED


def test_the_fit_bounds_our_stages_but_only_the_measured_points_pull():
    """PTO's stage cycles are another kernel's: within tolerance our stages add nothing to the misfit (a faster kernel
    does not move the estimates), beyond it they do; the measured points pull towards 0 inside their tolerance."""
    base = {"stage QK": 0.05, "stage softmax": -0.1, "PTO S = 8k": 0.05, "PTO S = 32k": -0.02}
    assert cost_model._misfit({**base, "stage softmax": 0.19}) == cost_model._misfit(base)
    assert cost_model._misfit({**base, "stage softmax": 0.3}) > cost_model._misfit(base)
    assert cost_model._misfit({**base, "PTO S = 8k": 0.1}) > cost_model._misfit(base)


def test_flash_stages_count_the_structure_and_the_baseline_takes_its_best_tiling():
    costs = {**cost_model.A2_COSTS, "mmad_head_cycles": 0.0, "dma_head_cycles": 0.0, "vec_head_cycles": 0.0,
             "dependent_fraction": 0.0, "gm_bytes_per_cycle": 1e9, "fix_bytes_per_cycle": 64.0}
    st = cost_model.flash_stages(cost_model.FlashTiling(128, 256, 4), 128, costs)
    # QK: FP32 S (128 x 256) through the Fixpipe, 2048 cycles, outlasts 8 x 16 x 8 = 1024 fractals and MTE1's 768
    assert st["QK"] == 128 * 256 * 4 / 64
    # PV: 1024 fractals, MTE1 P (256 B/cycle) and V (128 B/cycle), the FP32 P V through the Fixpipe: the widest
    assert st["PV"] == max(8 * 8 * 16, 128 * 256 * 2 / 256 + 256 * 128 * 2 / 128, 128 * 128 * 4 / 64)
    seconds, tiling = cost_model.best_flash_attention(1, 4, 4096, 4096, 128)
    legal = [t for t in cost_model.FLASH_TILINGS if cost_model._fits(t, 128)]
    assert cost_model.FlashTiling(128, 256, 4) in legal and tiling in legal
    assert seconds == min(cost_model.flash_attention_seconds(1, 4, 4096, 4096, 128, tiling=t) for t in legal)


def test_the_pipe_bound_is_each_cores_busiest_pipe_and_no_clock_beats_it():
    # Only the cube and a flag latency cost: every core's bound is its cube cycles (the AIVs' is 0), so the launch's
    # bound is the AIC's 768 fractal-cycles, where its clocks also wait 300+ cycles for the handshake's hops.
    costs = {**{k: 0.0 for k in cost_model.A2_COSTS if k != "l2_bytes_per_cycle"}, "l2_bytes_per_cycle": 1e9,
             "cube_cycles_per_fractal": 1.0, "flag_latency_cycles": 100.0}
    r = cost_model.model(1, 1, 1, 128, 128, 64, precision="pasa", costs=costs)
    assert r.seconds_bound == pytest.approx(max(768 / cost_model.CLOCK_HZ, r.hbm_bound_seconds))
    assert r.seconds_bound < r.seconds_overlap
    # With a dependent fraction, the bound is the whole run as one segment: the cube plus that share of the rest.
    costs = {**costs, "dependent_fraction": 0.5, "gm_bytes_per_cycle": 1024.0}
    aic = cost_model._count(1, 1, 1, 128, 128, 64, layout="BNSD", precision="pasa", sparse_mode=0, costs=costs)[0][0]
    r = cost_model.model(1, 1, 1, 128, 128, 64, precision="pasa", costs=costs)
    pipes = aic["pipe_cycles"]
    assert pipes["MTE2"] == aic["mte2_bytes"] / 1024 and max(pipes, key=pipes.get) == "M"  # the cube stays busiest
    assert r.seconds_bound * cost_model.CLOCK_HZ == pytest.approx(768 + 0.5 * (sum(pipes.values()) - 768))
    # At the calibrated costs, full and scaled runs: the bound lies below the model.
    for limit in (cost_model.FULL_RUN_LIMIT, 0):
        r = cost_model.model(1, 4, 2, 512, 512, 128, precision="fp32_frame", full_run_limit=limit)
        assert 0 < r.seconds_bound < r.seconds


def test_the_baselines_pipe_bound_sums_each_cores_pipes_over_the_block():
    # Only the cube costs: a 128-row block over 1024 keys is 4 tiles of QK and PV, 8 x 16 x 8 fractals each per
    # 256 keys; the AIVs are free, so the bound is the cube's 2 x 4 x 1024 cycles, below the block's own clock.
    costs = {**{k: 0.0 for k in cost_model.A2_COSTS}, "cube_cycles_per_fractal": 1.0, "gm_bytes_per_cycle": 1e9,
             "fix_bytes_per_cycle": 1e9, "l0a_bytes_per_cycle": 1e9, "l0b_bytes_per_cycle": 1e9,
             "flag_latency_cycles": 100.0}
    t = cost_model.FlashTiling(128, 256, 4)
    bound, _ = cost_model._flash_block_bound(t, 128, 1024, costs)
    assert bound == pytest.approx(2 * 4 * 1024, rel=1e-6)
    assert cost_model._flash_block(t, 128, 1024, costs)[0] > bound
    seconds, tiling = cost_model.best_flash_attention(1, 4, 4096, 4096, 128, bound=True)
    legal = [t for t in cost_model.FLASH_TILINGS if cost_model._fits(t, 128)]
    assert seconds == min(cost_model.flash_attention_seconds(1, 4, 4096, 4096, 128, tiling=t, bound=True)
                          for t in legal)
    assert seconds <= cost_model.best_flash_attention(1, 4, 4096, 4096, 128)[0]


def test_goals_compare_each_metric_the_way_its_target_is_stated():
    assert cost_model._meets("TFLOP/s S = 8k", 123) and not cost_model._meets("TFLOP/s S = 8k", 122.9)
    assert cost_model._meets("D = 256, 4k / baseline", 0.9) and not cost_model._meets("D = 256, 4k / baseline", 0.91)
    assert not cost_model._meets("decode, 4096 keys / fp16_fp32", 1.001)
