"""Host functional model of the AscendC API subset (host_model/).

Builds host_model_tests once, in the CMake tree all C++ tests share (tests/cmake_tree.py), then
- runs every misuse case and asserts the exact ascendc_model::Error (core, API, cause);
- runs every semantics case (the C++ side checks index formulas written out from the docs);
- checks the arrays the numeric cases save against numpy: the cube path against numpy matmuls of
  the FP16 inputs with FP32 accumulation, Cast rounding modes, Exp/Ln rounding.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import cmake_tree

# Slow on first use: it compiles the host model (tens of seconds); `-m "not slow"` leaves it out.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(cmake_tree.tools_missing() is not None,
                                 reason=f"C++ tests need CMake and g++: {cmake_tree.tools_missing()}")]

ROOT = cmake_tree.ROOT
AIV0 = "AIV 0 (block 0, sub-block 0)"

# case -> the exact message prefix "<core>: <api>: <cause>"
MISUSE = {
    "misuse_initbuffer_ub_overflow": f"{AIV0}: TPipe::InitBuffer: TQue<VECIN, 2> at VECIN needs 98304 B but only "
    "85760 B of UB's 188160 B are free (192 KB less the vector APIs' scratch at TMP_UB_OFFSET = 184 KB and the "
    "mixed kernel's 256 B)",
    "misuse_initbuffer_ub_scratch": f"{AIV0}: TPipe::InitBuffer: TBuf at VECCALC needs 188416 B but only 188160 B of "
    "UB's 188160 B are free (192 KB less the vector APIs' scratch",
    "misuse_initbuffer_l1_reserved": "AIC 0: TPipe::InitBuffer: TBuf at A1 needs 524288 B but only 524032 B of L1's "
    "524032 B are free (512 KB less the mixed kernel's 256 B)",
    "misuse_initbuffer_l0a_overflow": "AIC 0: TPipe::InitBuffer: TQue<A2, 1> at A2 needs 81920 B but only 65536 B "
    "of L0A's 65536 B are free",
    "misuse_ub_position_on_aic": "AIC 0: TPipe::InitBuffer: VECIN lives in UB, which this core does not have",
    "misuse_tensor_index_beyond_buffer": f"{AIV0}: LocalTensor::SetValue: elements [128, 129) beyond the tensor's "
    "128 elements (VECCALC buffer)",
    "misuse_vector_length_beyond_buffer": f"{AIV0}: Add: elements [0, 1025) beyond the tensor's 1024 elements",
    "misuse_gm_beyond_size": f"{AIV0}: DataCopy(GM->local): GM elements [0, 128) beyond SetGlobalBuffer's size 64",
    "misuse_deque_empty": f"{AIV0}: TQue<VECIN, 2>::DeQue: queue is empty: no tensor was EnQue'd",
    "misuse_use_after_free": f"{AIV0}: Duplicate: tensor used after FreeTensor (VECOUT queue)",
    "misuse_use_enqueued_tensor": f"{AIV0}: Duplicate: tensor is enqueued in its VECIN queue; DeQue it before use",
    "misuse_queue_depth_exceeded": f"{AIV0}: TQue<VECIN, 1>::EnQue: queue depth 1 exceeded",
    "misuse_alloc_all_buffers_in_use": f"{AIV0}: TQue<VECIN, 2>::AllocTensor: all 2 buffers are in use",
    "misuse_datacopy_length_not_32b": f"{AIV0}: DataCopy(GM->local): length 20 B is not a multiple of 32 bytes",
    "misuse_datacopy_local_misaligned": f"{AIV0}: DataCopy(GM->local): local address 16 B is not 32-byte aligned",
    "misuse_vector_operand_misaligned": f"{AIV0}: Add: src0 address 6 B is not 32-byte aligned",
    "misuse_event_set_twice": f"{AIV0}: SetFlag<HardEvent::MTE2_V>(0): event set twice: SetFlag at "
    "test_events.cpp:{second set} sets it while the set by SetFlag at test_events.cpp:{first set} is not yet waited",
    "misuse_event_id_collides_with_a_queue": f"{AIV0}: SetFlag<HardEvent::V_MTE2>(0): event set twice: SetFlag at "
    "test_events.cpp:{colliding set} sets it while the set by TQue<VECIN, 1>::FreeTensor at "
    "test_events.cpp:{queue's set} is not yet waited",
    "misuse_event_id_collides_with_the_matmul_macro": "AIC 0: SetFlag<HardEvent::M_MTE1>(1): event set twice: SetFlag "
    "at test_events.cpp:{hard-coded ID 1} sets it while the set by TPipe (M_MTE1 IDs 0-2 of the matmul macro",
    "misuse_event_wait_without_set": f"{AIV0}: WaitFlag<HardEvent::S_MTE3>(2): wait without a set: WaitFlag at "
    "test_events.cpp:{missing set} waits for an event no SetFlag has set since WaitFlag at "
    "test_events.cpp:{first wait} waited it; the pipe would wait forever (deadlock)",
    "misuse_event_wait_steals_a_queue_event": f"{AIV0}: WaitFlag<HardEvent::MTE3_V>(0): wait without a set: "
    "TQue<VECOUT, 1>::AllocTensor at test_events.cpp:{starved alloc} waits for an event no SetFlag has set since "
    "WaitFlag at test_events.cpp:{stealing wait} waited it",
    "misuse_event_left_set": f"{AIV0}: kernel end: event left set: SetFlag<HardEvent::V_S>(3) by SetFlag at "
    "test_events.cpp:{never waited} has no WaitFlag before the core's program ends",
    "misuse_tensor_left_in_a_queue": f"{AIV0}: kernel end: event left set: SetFlag<HardEvent::MTE2_V>(0) by "
    "TQue<VECIN, 1>::EnQue at test_events.cpp:{never dequeued} has no WaitFlag",
    "misuse_event_pool_exhausted": f"{AIV0}: TPipe::AllocEventID<HardEvent::V_S>: event pool exhausted at "
    "test_events.cpp:{ninth alloc}: all 8 IDs are allocated (0: TPipe::AllocEventID at test_events.cpp:{ninth alloc}",
    "misuse_release_of_an_id_not_allocated": f"{AIV0}: TPipe::ReleaseEventID<HardEvent::S_V>(0): ReleaseEventID of an "
    "ID not allocated, at test_events.cpp:{fetched, not allocated}: the ID must come from AllocEventID",
    "misuse_crosscore_flag_left_set": f"launch end: cross-core flag left set: flag 3 of {AIV0} holds 1 set(s) no "
    "CrossCoreWaitFlag consumed",
    "misuse_datacopy_block_count_zero": f"{AIV0}: DataCopy(GM->local): blockCount 0 outside [1, 4095] (DataCopy docs)",
    "misuse_load2d_repeat_zero": "AIC 0: LoadData: repeatTimes 0 outside [1, 255] (Load2D docs)",
    "misuse_load2d_l0_misaligned": "AIC 0: LoadData: dst address 256 B in L0A is not 512-byte aligned",
    "misuse_mmad_k_beyond_4095": "AIC 0: Mmad: k 4096 outside [0, 4095] (Mmad docs)",
    "misuse_mmad_dst_not_256_elements": "AIC 0: Mmad: dst address 64 B in L0C is not 1024-byte aligned (Mmad docs: "
    "256 elements)",
    "misuse_fixpipe_nsize_zero": "AIC 0: Fixpipe: nSize 0 outside [1, 4095] (Fixpipe docs, NZ2ND)",
    "misuse_fixpipe_src_misaligned": "AIC 0: Fixpipe: src address 32 B in L0C is not 64-byte aligned (Fixpipe docs)",
    "misuse_alloc_without_release": f"{AIV0}: kernel end: TPipe::Destroy: AllocEventID without ReleaseEventID: "
    "HardEvent::MTE2_S ID 0 (TPipe::AllocEventID at test_events.cpp:{never released})",
    "misuse_crosscore_wait_never_set": "(checked below: the reporting core varies)",
    "misuse_crosscore_wait_timeout": f"{AIV0}: CrossCoreWaitFlag: CrossCoreWaitFlag(flag 7, mode 2) timed out",
    "misuse_crosscore_counter_overflow": f"AIC 0: CrossCoreSetFlag: flag 2 of {AIV0} set more than 15 times "
    "without a CrossCoreWaitFlag",
    "misuse_crosscore_flag_id_range": "AIC 0: CrossCoreSetFlag: flagId 16 outside 0..15",
    "misuse_crosscore_flag_id_syncall": "AIC 0: CrossCoreSetFlag: flagId 11 is reserved: SyncAll uses flagIds 11-14 "
    "(CrossCoreSetFlag docs, 约束说明)",
    "misuse_core_build_on_the_wrong_core": "KERNEL_TASK_TYPE_DEFAULT: this kernel build was compiled for the AIC "
    "(ASCENDC_MODEL_CORE_TYPE) and runs on another core type",
    "misuse_syncall_without_batch_mode": "SyncAll<false>: an all-core barrier in a launch whose tiling did not set "
    "batch mode (SetScheduleMode(1))",
    "misuse_mode0_without_batch_mode": "CrossCoreSetFlag(flag 2, mode 0): an all-core barrier in a launch whose "
    "tiling did not set batch mode",
    "misuse_error_releases_waiters": "AIC 0: TPipe::InitBuffer: TBuf at CO1 needs 132096 B but only 131072 B of "
    "L0C's 131072 B are free",
    "misuse_vector_read_after_write": f"{AIV0}: Mul: Mul (test_sync.cpp:",
    "misuse_vector_write_after_read": f"{AIV0}: Duplicate: Duplicate (test_sync.cpp:",
    "misuse_vector_write_after_write_strided": f"{AIV0}: Adds: Adds (test_sync.cpp:",
    "misuse_scalar_read_without_v_s": f"{AIV0}: LocalTensor::GetValue: LocalTensor::GetValue (test_sync.cpp:",
    "misuse_pipe_barrier_s": f"{AIV0}: PipeBarrier<PIPE_S>: test_sync.cpp:",
    "misuse_cast_round_mode_the_pair_lacks": f"{AIV0}: Cast: half -> float has no CAST_RINT on Atlas A2; it takes "
    "CAST_NONE",
    "misuse_block_reduce_result_on_a_later_source": f"{AIV0}: BlockReduceMax: result 0 of repeat 0 lies on the "
    "source of repeat 1 (通用地址重叠约束: no result over a source element of its own or a later repeat)",
    "misuse_compare_int32_other_than_eq": f"{AIV0}: CompareScalar: Atlas A2 compares int32_t with CMPMODE::EQ only; "
    "other modes take half or float",
}



def event_case_lines(message: str) -> str:
    """The message with each {comment} replaced by the line of test_events.cpp that carries that // comment."""
    lines = (ROOT / "host_model" / "tests" / "test_events.cpp").read_text().splitlines()

    def line_of(comment: str) -> str:
        found = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"// {comment}")]
        assert len(found) == 1, comment
        return str(found[0])

    return re.sub(r"\{([^{}]+)\}", lambda m: line_of(m.group(1)), message)


# The rest of a message whose start names a source line: the range, the other instruction, the missing sync.
DETAILS = {
    "misuse_vector_read_after_write": ["reads UB [1024, 1536), which Add (test_sync.cpp:",
                                       "with no PipeBarrier<PIPE_V>() between them (read after write on the vector pipe)"],
    "misuse_vector_write_after_read": ["writes UB [512, 1024), which Add (test_sync.cpp:",
                                       "(write after read on the vector pipe)"],
    "misuse_vector_write_after_write_strided": ["writes UB [256, 288), which Duplicate (test_sync.cpp:",
                                                "(write after write on the vector pipe)"],
    "misuse_scalar_read_without_v_s": ["reads UB [20, 24), which the vector instruction Duplicate (test_sync.cpp:",
                                       "with no SetFlag/WaitFlag<HardEvent::V_S> between them"],
    "misuse_pipe_barrier_s": ["PipeBarrier<PIPE_S> raises a hardware error"],
}

# Reported by whichever core fails first (the barrier, or the wrong-core build, is reached by several).
ANY_CORE = {"misuse_syncall_without_batch_mode", "misuse_mode0_without_batch_mode",
            "misuse_core_build_on_the_wrong_core"}

SEMANTICS = [
    "pipe_capacity_exact", "pipe_release_on_destroy", "queue_fifo_double_buffer", "datacopy_strided_roundtrip",
    "datacopypad_bytes_and_padding", "nd2nz_layout_with_strides", "vec_binary_repeat_strides",
    "vec_bitmask_float_and_scalar_ops", "vec_whole_reduce_layout", "vec_block_reduce_max_layout", "vec_brcb_duplicate_compare_select",
    "launch_identity", "core_build_runs_on_its_core_type", "sync_mode2_ping_pong", "sync_mode0_and_syncall",
    "sync_intra_core_events", "sync_scalar_reads_need_dcci", "cube_gemv_m1", "sync_vector_barriers_counted",
    "sync_queues_order_buffer_reuse", "events_queue_ids_come_from_the_pool",
    "cube_fixpipe_nz2nd_width_not_multiple_of_16",
]
NUMERIC = ["cube_pipeline", "cube_pipeline_wrong_stride", "vec_cast_rounding", "vec_exp_ln_values",
           "vec_reduce_sum_fold"]


@pytest.fixture(scope="session")
def binary() -> Path:
    return cmake_tree.build("host_model_tests") / "host_model" / "host_model_tests"


def run(binary: Path, case: str, dump: Path | None = None) -> subprocess.CompletedProcess:
    args = [str(binary), case] + ([str(dump)] if dump else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_every_case_is_covered(binary):
    listed = set(run(binary, "--list").stdout.split())
    assert listed == set(MISUSE) | set(SEMANTICS) | set(NUMERIC)


@pytest.mark.parametrize("case", sorted(MISUSE))
def test_misuse_fails_loudly(binary, case):
    r = run(binary, case)
    assert r.returncode == 3, r.stdout + r.stderr
    line = r.stdout.strip().splitlines()[-1]
    prefix = "ascendc_model::Error: "
    assert line.startswith(prefix), line
    message = line[len(prefix):]
    expected = event_case_lines(MISUSE[case])
    if case == "misuse_crosscore_wait_never_set":  # reported by whichever core blocks last
        assert "can never be satisfied: every core has finished or is blocked" in message, message
        assert "AIC 0 in CrossCoreWaitFlag(flag 4, mode 0)" in message, message
        assert f"{AIV0} in CrossCoreWaitFlag(flag 3, mode 0)" in message, message
    elif case in ANY_CORE:
        assert expected in message, message
    else:
        assert message.startswith(expected), message
    for part in DETAILS.get(case, ()):
        assert part in message, message


@pytest.mark.parametrize("case", SEMANTICS)
def test_semantics(binary, case):
    r = run(binary, case)
    assert r.returncode == 0 and r.stdout.strip().endswith("PASS"), r.stdout + r.stderr


def load(d: Path, name: str, dtype) -> np.ndarray:
    return np.fromfile(d / f"{name}.bin", dtype=dtype)


def numeric(binary, case, tmp_path) -> Path:
    r = run(binary, case, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp_path


def f16_ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in FP16 units in the last place (monotone integer mapping of the bit patterns)."""
    def key(x):
        i = x.astype(np.float16).view(np.int16).astype(np.int32)
        return np.where(i < 0, -32768 - i, i)
    return np.abs(key(a) - key(b))


def test_cube_pipeline_matches_numpy(binary, tmp_path):
    d = numeric(binary, "cube_pipeline", tmp_path)
    a = load(d, "a", np.float16).reshape(30, 80).astype(np.float32)
    bt = load(d, "bt", np.float16).reshape(40, 80).astype(np.float32)
    p = load(d, "p", np.float16).reshape(30, 48).astype(np.float32)
    v = load(d, "v", np.float16).reshape(48, 80).astype(np.float32)
    s = load(d, "s", np.float16).reshape(30, 40)
    o = load(d, "o", np.float32).reshape(30, 80)
    s_ref = (a @ bt.T).astype(np.float16)  # FP32 accumulation, FP32 -> FP16 at Fixpipe
    # the accumulation order differs from numpy's, which can move a rounding boundary by one ulp
    assert f16_ulps(s, s_ref).max() <= 1
    assert (f16_ulps(s, s_ref) == 0).mean() > 0.95
    np.testing.assert_allclose(o, p @ v, rtol=1e-5, atol=1e-5)


def test_cube_wrong_stride_gives_wrong_result(binary, tmp_path):
    d = numeric(binary, "cube_pipeline_wrong_stride", tmp_path)
    a = load(d, "a", np.float16).reshape(30, 80).astype(np.float32)
    bt = load(d, "bt", np.float16).reshape(40, 80).astype(np.float32)
    s = load(d, "s_wrong", np.float16).reshape(30, 40).astype(np.float32)
    # rows read from the wrong fractals: wrong values, or NaN where never-written L1 was read
    assert not np.allclose(s, a @ bt.T, atol=1.0)


def bracket16(x: np.ndarray):
    """Neighbouring float16 values lo <= x <= hi of float32 values x."""
    near = x.astype(np.float16)
    up = near.astype(np.float64) < x
    down = near.astype(np.float64) > x
    lo = np.where(down, np.nextafter(near, np.float16(-np.inf)), near)
    hi = np.where(up, np.nextafter(near, np.float16(np.inf)), near)
    return lo.astype(np.float16), hi.astype(np.float16)


def test_cast_round_modes_match_numpy(binary, tmp_path):
    d = numeric(binary, "vec_cast_rounding", tmp_path)
    x = load(d, "cast_in", np.float32)
    out = load(d, "cast_out", np.float16).reshape(7, -1)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):  # 70000 and 65520 overflow to inf by design
        lo, hi = bracket16(x)
        rne = x.astype(np.float16)
    exact = lo == hi
    dl, dh = x64 - lo.astype(np.float64), hi.astype(np.float64) - x64
    odd_lo = (lo.view(np.uint16) & 1) == 1
    expected = {
        0: rne,  # CAST_NONE: round to nearest even
        1: rne,  # CAST_RINT
        2: lo,  # CAST_FLOOR
        3: hi,  # CAST_CEIL
        4: np.where(exact, lo, np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(x > 0, hi, lo)))),  # CAST_ROUND
        5: np.where(x > 0, lo, hi),  # CAST_TRUNC
        6: np.where(exact, lo, np.where(odd_lo, lo, hi)),  # CAST_ODD
    }
    for mode, want in expected.items():
        np.testing.assert_array_equal(out[mode].view(np.uint16), want.astype(np.float16).view(np.uint16),
                                      err_msg=f"round mode {mode}")
    # the ties really occur in the inputs, so the tie rules above are exercised
    assert ((dl == dh) & ~exact).sum() >= 8
    # half -> float of the last (CAST_ODD) result is exact
    np.testing.assert_array_equal(load(d, "cast_back", np.float32), out[6].astype(np.float32))


def test_exp_ln_correctly_rounded(binary, tmp_path):
    d = numeric(binary, "vec_exp_ln_values", tmp_path)
    for name, fn in (("exp", np.exp), ("ln", np.log)):
        x = load(d, f"{name}_in", np.float16)
        got = load(d, f"{name}_out", np.float16)
        want = fn(x.astype(np.float64)).astype(np.float16)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=name)


def fold_sum16(x: np.ndarray) -> np.float16:
    """Sum by folding in halves with every partial sum rounded to FP16 (zeros pad to a power of two)."""
    width = 1 << max(0, (len(x) - 1).bit_length())
    v = np.zeros(width, np.float64)
    v[: len(x)] = x
    while width > 1:
        width //= 2
        v = (v[:width] + v[width:]).astype(np.float16).astype(np.float64)
    return np.float16(v[0])


def test_reduce_sum_folds_in_halves(binary, tmp_path):
    d = numeric(binary, "vec_reduce_sum_fold", tmp_path)
    x = load(d, "fold_in", np.float16).astype(np.float64)
    rows = x.reshape(4, 128)
    full, part = load(d, "fold_full", np.float16), load(d, "fold_part", np.float16)
    for r in range(4):
        assert full[r] == fold_sum16(rows[r])
        assert part[r] == fold_sum16(np.where(np.arange(128) < 100, rows[r], 0.0))
    assert load(d, "fold_all", np.float16)[0] == fold_sum16(x[:300])
    # the fold is observable: it differs from a sequential FP16 sum on some row
    seq = [np.float16(0)] * 4
    for r in range(4):
        for v in rows[r]:
            seq[r] = np.float16(seq[r] + np.float16(v))
    assert any(seq[r] != full[r] for r in range(4))


# ---- ASCEND_IS_AIC / ASCEND_IS_AIV are compile-time, one build per core type ----------------------------
KERNEL_SNIPPET = """
#include "kernel_operator.h"
using namespace AscendC;
extern "C" __global__ __aicore__ void k(GM_ADDR x) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    %s
}
"""


def compile_snippet(body: str, *defines: str) -> subprocess.CompletedProcess:
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed")
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-I", str(ROOT / "host_model" / "include"), "-x", "c++", "-"]
    cmd += [f"-D{d}" for d in defines]
    return subprocess.run(cmd, input=KERNEL_SNIPPET % body, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("core", ["1", "2"])
def test_core_type_branches_compile_per_core_type(core):
    r = compile_snippet("if ASCEND_IS_AIC { GetBlockIdx(); } if ASCEND_IS_AIV { GetSubBlockIdx(); }",
                        f"ASCENDC_MODEL_CORE_TYPE={core}")
    assert r.returncode == 0, r.stderr


def test_runtime_core_type_test_does_not_compile():
    # As with CANN (ASCEND_IS_AIC is `constexpr(g_coreType == AscendC::AIC)`), a run-time use fails to build.
    body = "if (ASCEND_IS_AIC && x != nullptr) GetBlockIdx();"
    r = compile_snippet(body, "ASCENDC_MODEL_CORE_TYPE=1")
    assert r.returncode != 0
    control = compile_snippet(body, "ASCENDC_MODEL_RUNTIME_CORE_TYPE")  # the model's own test cases
    assert control.returncode == 0, control.stderr


def test_kernel_without_core_type_does_not_compile():
    r = compile_snippet("if ASCEND_IS_AIC { GetBlockIdx(); }")
    assert r.returncode != 0 and "compiled once per core type" in r.stderr, r.stderr
