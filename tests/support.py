"""Helpers that more than one test module uses: input draws, reference computations, checks and launchers.

Test modules import these from here, never from each other (tests/tools/test_repo.py checks that). Each section
names the test module the helpers came with, where the reasoning behind their bounds is written down.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch._dynamo.testing import CompileCounterWithBackend

from pasa_npu import accuracy, golden
from pasa_npu.backends import reference
from pasa_npu.problem import band_mask


# ============================================================================================================
# The Triton kernel against the golden model and float64 (tests/backends/test_triton_interpret.py)
# ============================================================================================================

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="needs TRITON_INTERPRET=1, which tests/conftest.py "
                                 "sets without a GPU; on a GPU tests/backends/test_triton_gpu.py runs these checks")


#: allocation -> (factor, margin): kernel RMSE <= factor * golden RMSE + margin (vs float64);
#: and (floor, factor): RMSE(kernel, golden) <= max(floor, factor * golden RMSE). pasa_rs, measured
#: on test_triton_interpret.py's CASES in the interpreter: kernel/golden RMSE 1.00-1.09, RMSE(kernel,
#: golden) 0.37-0.85× the golden's own error, lse error 0.95-1.8× the golden's (at most 9e-4, on the biased
#: case). fp32_frame: kernel/golden RMSE 0.80-1.00, RMSE(kernel, golden) at most 0.002× the golden's error but
#: on the split decode (1.08×: each split sets its own frames), 99.9-100% of the outputs bit-identical but there.
ACCURACY = {"fp32": (1.1, 1e-4), "pasa_fp32": (1.25, 5e-4), "pasa": (1.25, 3e-3), "pasa_rs": (1.1, 1e-4),
            "fp32_frame": (1.1, 1e-4)}
CLOSENESS = {"fp32": (1e-3, 0.0), "pasa_fp32": (3e-3, 2.0), "pasa": (1.5e-2, 2.0), "pasa_rs": (1e-3, 2.0),
             "fp32_frame": (1e-3, 2.0)}


def rel_rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float(((a - b) ** 2).mean().sqrt() / (b ** 2).mean().sqrt().clamp_min(1e-30))


def ref64(q, k, v, scale, mask):
    """Exact attention in float64 (on q's device); rows with no key: out 0, lse −∞."""
    g = q.shape[1] // k.shape[1]
    k64, v64 = (t.double().repeat_interleave(g, 1) for t in (k, v))
    s = (q.double() @ k64.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])
    return torch.where(torch.isneginf(lse)[..., None], 0.0, p @ v64), lse


def dense(mask, band, s1, s2, device):
    """The dense mask a band stands for (the interface's own construction), or'ed with ``mask``."""
    if band is None:
        return mask
    bm = band_mask(band, s1, s2, device)[None, None]
    return bm if mask is None else mask | bm


def draw(b, n, nkv, s1, s2, d, *, bias=0.0, seed=0, device="cpu"):
    """Q, K ~ N(bias, 1), V ~ N(0, 1) (centred, so the output measures the attention weights)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, n, s1, d, generator=gen) + bias
    k = torch.randn(b, nkv, s2, d, generator=gen) + bias
    v = torch.randn(b, nkv, s2, d, generator=gen)
    return tuple(t.half().to(device) for t in (q, k, v))


def check_against_golden(q, k, v, *, precision, block_kv=128, mask=None, band=None, shift=None, scale=None):
    """Run the Triton kernel, the golden loop (reference backend, same device) and float64; assert
    the four properties of tests/backends/test_triton_interpret.py's docstring (``scale`` default 1/√D).
    Returns (kernel RMSE, golden RMSE) vs float64."""
    from pasa_npu.backends import triton as tb

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out, lse = tb.attention(q, k, v, precision=precision, beta=None, block_q=128, block_kv=block_kv,
                            scale=scale, mask=mask, band=band, shift=shift)
    full = dense(mask, band, q.shape[2], k.shape[2], q.device)
    # The golden loop's query tile is the kernel's BLOCK_M rows, so that under a band both visit the same
    # KV blocks wherever a kernel tile holds positions of one head (see triton_kernels' docstring).
    # fp32_frame's tile closes its running sums together: where one kernel tile holds a KV head's whole group
    # (decode), the golden tile does too.
    rows = q.shape[1] // k.shape[1] * q.shape[2]
    block_m = tb._config(max(16, tb._pow2(q.shape[-1])), precision != "fp32", block_kv, rows, mask is not None,
                         precision == "pasa_rs")[0]
    g_out, g_lse = reference.attention(q, k, v, precision=precision, beta=None, block_q=block_m,
                                       block_kv=block_kv, scale=scale, mask=mask, band=band,
                                       group_tile=rows <= block_m)
    r_out, r_lse = ref64(q, k, v, scale, full)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32 and out.shape == q.shape
    empty = torch.isneginf(r_lse)
    assert torch.equal(torch.isneginf(lse), empty) and torch.equal(torch.isneginf(g_lse), empty)
    assert torch.isfinite(out).all() and torch.isfinite(lse[~empty]).all()
    assert (out[empty] == 0).all()
    err_k, err_g = rel_rmse(out, r_out), rel_rmse(g_out, r_out)
    factor, margin = ACCURACY[precision]
    assert err_k <= factor * err_g + margin, (err_k, err_g)
    floor, cfactor = CLOSENESS[precision]
    assert rel_rmse(out, g_out) <= max(floor, cfactor * err_g), (rel_rmse(out, g_out), err_g)
    fin = ~empty
    lse_k = float((lse[fin].double() - r_lse[fin]).abs().max()) if fin.any() else 0.0
    lse_g = float((g_lse[fin].double() - r_lse[fin]).abs().max()) if fin.any() else 0.0
    # The golden model accumulates Q·Kᵀ exactly; the tensor cores' FP32 accumulation adds a few FP32
    # ulps of the largest partial sum, ~1e-6 of |lse| on biased inputs (where |lse| ~ 1e4).
    lse_tol = 1.5 * lse_g + 2e-3 + 2e-6 * float(r_lse[fin].abs().max() if fin.any() else 0.0)
    assert lse_k <= lse_tol, (lse_k, lse_g)
    return err_k, err_g


def shift_overflow(s1=16, s2=64, d=64, level=-39000.0, peak=40000.0, block_kv=16, seed=0):
    """Q ≈ 2 in every dimension, keys at a level whose scaled scores are ≈ ``level``, and from the
    second KV block on one key per 16 at ≈ ``peak``: every score fits FP16, but S' of a peak key
    shifted near its block's mean score (block 1 has no peak, so the running excess is small until
    the lag of two blocks has passed) is ≈ 79 000, and an FP16 S' overflows."""
    gen = torch.Generator().manual_seed(seed)
    q = 2 + 0.01 * torch.randn(1, 1, s1, d, generator=gen)
    unit = 2 * d * d ** -0.5  # scaled score per unit of key level
    k = torch.randn(1, 1, s2, d, generator=gen) + level / unit
    k[..., block_kv + 8::16, :] += (peak - level) / unit
    v = torch.randn(1, 1, s2, d, generator=gen)
    return tuple(t.half() for t in (q, k, v))


# ============================================================================================================
# A stand-in Triton kernel and the fast launch path (tests/backends/test_triton_launch.py)
# ============================================================================================================

class _Launcher:
    """Triton's launcher object (``compiled.run`` from Triton 3.5): its C function ``launch`` takes the grid,
    stream and function, the launch flags, the global and profile scratch, the packed metadata, the launch
    metadata and hooks, then the kernel's arguments (the order of Triton 3.6's generated launcher)."""

    launch_cooperative_grid, launch_pdl, profile_scratch_size = False, True, 0

    def __init__(self, launches, global_scratch_size):
        self.launches, self.global_scratch_size = launches, global_scratch_size

    def __call__(self, *args):
        self.launches.append(("direct", args))

    def launch(self, *args):
        self.launches.append(("c", args))


class _Compiled:
    """What Triton's launch returns: a kernel whose ``run`` launches it (a kernel that needs global scratch, so
    that ``run`` itself is called)."""

    packed_metadata = ("meta",)
    function = 1234

    def __init__(self, launches):
        self.run = _Launcher(launches, 128)


class _Kernel:
    """A stand-in for a @triton.jit kernel K(A, B, n, x, m, D: constexpr, BLOCK: constexpr)."""

    arg_names = ["A", "B", "n", "x", "m", "D", "BLOCK"]

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(("triton", grid, args, kwargs))
            return _Compiled(self.launches)
        return launch


def fast_launch(monkeypatch):
    """The fast path as on a GPU with a Triton release it was checked against, with no launch hook."""
    from pasa_npu.backends import triton_launch as launcher

    monkeypatch.setattr(launcher, "_FAST", True)
    monkeypatch.setattr(launcher, "_INTERPRET", False)
    monkeypatch.setattr(launcher, "_hooked", lambda: False)
    monkeypatch.setattr(launcher, "_COMPILED", {})
    monkeypatch.setattr(launcher, "_current_device", lambda: 0)
    monkeypatch.setattr(launcher, "_raw_stream", lambda device: 77)


# ============================================================================================================
# Paged key/value caches (tests/serving/test_paged.py)
# ============================================================================================================

COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


def _paged(k, v, lens, page, rng, four_d, spare=3, share=False):
    """Scatter dense (B, Nkv, S2, D) keys/values into shuffled pages of a shared cache; returns the caches
    and the (B, max_blocks) int32 table. ``share``: batch 1 reuses batch 0's first page (a shared prefix)."""
    b, nkv, s2, d = k.shape
    need = [-(-n // page) for n in lens]
    max_blocks = max(need) + 1
    total = sum(need) + spare
    order = rng.permutation(total)
    table = torch.full((b, max_blocks), int(total - 1), dtype=torch.int32)  # unused entries: any valid id
    kc = torch.randn(total, nkv, page, d).half()  # pages no table entry reads hold garbage
    vc = torch.randn(total, nkv, page, d).half()
    nxt = 0
    for i in range(b):
        for p in range(need[i]):
            if share and i == 1 and p == 0:
                table[i, p] = table[0, 0]
                continue
            blk = int(order[nxt])
            nxt += 1
            table[i, p] = blk
            c0, c1 = p * page, min((p + 1) * page, lens[i])
            kc[blk, :, :c1 - c0] = k[i, :, c0:c1]
            vc[blk, :, :c1 - c0] = v[i, :, c0:c1]
    if not four_d:  # (num_blocks, page, Nkv·D)
        kc, vc = (c.transpose(1, 2).reshape(total, page, nkv * d) for c in (kc, vc))
    return kc, vc, table


def _inputs(b, n, nkv, s1, s2, d, seed, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, n, s1, d, generator=g) + mean).half()
    k = (torch.randn(b, nkv, s2, d, generator=g) + mean).half()
    v = torch.randn(b, nkv, s2, d, generator=g).half()
    return q, k, v


#: Output error (RMS relative to float64) and lse error each allocation is held to against float64 on these
#: inputs (keys with mean 2: the case PASA is for). PASA's Algorithm 1 recovers lse through I·F (off by ~1e-2
#: here), so its lse is held to equality with the dense kernel only.
TRITON_BOUNDS = {"fp32": (1e-3, 2e-3), "pasa_fp32": (1.5e-2, None), "pasa": (1.5e-2, None), "pasa_rs": (1e-3, 2e-3),
                 "fp32_frame": (1e-3, 2e-3)}


# ============================================================================================================
# Compiled serving steps (tests/serving/test_compiled_steps.py)
# ============================================================================================================

N, NKV, D, PAGE, PAGES = 4, 2, 16, 16, 24
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
COMPRESSED_ON_DEVICE = COMPRESSED.to(DEVICE)
STEPS = 20


def _step(i: int, batch: int | None, lengths: str):
    """Step ``i`` of a server: ``batch`` requests (None: 2 to 4, changing from step to step), each a decode, a
    speculative or a short prefill (1 to 5 query rows) with 0 to a table row's keys; the TND query padded by up
    to 2 rows; a table 2 to 5 pages wide. Steps 0 and 1 differ in all of these (:func:`run_steps` checks the shapes)."""
    rng = np.random.default_rng(i)
    b = batch or 2 + (i + 1) % 3
    width = 2 + i % 4
    q_lens = rng.integers(1, 6, b)
    kv_lens = rng.integers(0, width * PAGE + 1, b)
    kv_lens[i % b] = width * PAGE  # one request fills its pages
    t = int(q_lens.sum()) + i % 3
    g = torch.Generator().manual_seed(i)
    q = torch.randn(t, N, D, generator=g).half()
    kc, vc = (torch.randn(PAGES, PAGE, NKV * D, generator=g).half() for _ in range(2))
    table = torch.from_numpy(rng.permutation(PAGES)[:b * width].reshape(b, width).astype(np.int32))
    tensors = [x.to(DEVICE) for x in (q, kc, vc, table)]
    cum = np.cumsum(q_lens)
    if lengths == "list":
        return *tensors, [int(x) for x in cum], [int(x) for x in kv_lens]
    return *tensors, *(torch.from_numpy(x).to(DEVICE, getattr(torch, lengths)) for x in (cum, kv_lens))


def run_steps(calls, batch, steps=STEPS) -> list[int]:
    """Compiles each of ``calls``, (function, lengths) pairs computing one attention, and runs them for ``steps``
    steps, each against the first function's eager call; returns the number of compilations of each."""
    counters = [CompileCounterWithBackend("aot_eager") for _ in calls]
    torch._dynamo.reset()
    compiled = [torch.compile(call, fullgraph=True, backend=counter) for (call, _), counter in zip(calls, counters)]
    first, second = _step(0, batch, "list"), _step(1, batch, "list")
    assert first[0].shape != second[0].shape and first[3].shape != second[3].shape  # T, the table's (B, width)
    for i in range(steps):
        inputs = {lengths: _step(i, batch, lengths) for _, lengths in calls}
        want = calls[0][0](*inputs[calls[0][1]])
        assert want[0].abs().sum() > 0  # the rows of the requests with keys were computed
        for (call, lengths), function in zip(calls, compiled):
            got = function(*inputs[lengths])
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (call.__name__, i)
    return [counter.frame_count for counter in counters]


# ============================================================================================================
# Processes joined by a gloo group (tests/serving/test_distributed.py)
# ============================================================================================================

LAUNCH_TIMEOUT_S = 240


def _entry(rank, worker, world, tmp, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        torch.save(worker(rank, world, *args), os.path.join(tmp, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def launch(worker, world, tmp_path, *args):
    """worker(rank, world, *args) on ``world`` forked processes joined by a gloo group; returns each
    rank's return value. Forked, not spawned: the children inherit torch, pasa_npu and diffusers
    already imported (seconds per process on a loaded 2-core runner)."""
    ctx = mp.start_processes(_entry, args=(worker, world, str(tmp_path), args), nprocs=world, join=False,
                             start_method="fork")
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{worker.__name__} did not finish within {LAUNCH_TIMEOUT_S} s: a hang")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


# ============================================================================================================
# An allocation's accuracy against fp32's on the hard cases (tests/golden/test_pasa_rs.py, test_fp32_frame.py)
# ============================================================================================================

def assert_within_fp32(draws, precision: str, worst: float, median: float) -> None:
    """``draws``: label -> {precision: accuracy.run_case row}, each holding "fp32" and ``precision``. On every
    draw: fp32 finite with no zero row (the premise), and so the allocation; its RMSE at most ``worst`` × fp32's
    (accuracy._ratio: 1 where both are 0); |lse − lse64| within max(10 × fp32's, 1e-3). The median ratio at most
    ``median``."""
    ratios = []
    for label, rows in draws.items():
        fp32, alloc = rows["fp32"], rows[precision]
        assert not fp32["overflow"] and fp32["zero_rows"] == 0, label  # the premise
        assert not alloc["overflow"] and alloc["zero_rows"] == 0, label
        ratio = accuracy._ratio(alloc["rmse"], fp32["rmse"])
        assert ratio <= worst, (label, ratio)
        assert alloc["lse_err"] <= max(10 * fp32["lse_err"], 1e-3), (label, alloc["lse_err"], fp32["lse_err"])
        ratios.append(ratio)
    assert np.median(ratios) <= median, ratios


def run_draws(cases, seeds: int, precision: str, **shape) -> dict:
    """accuracy.run_case of fp32 and ``precision`` on ``seeds`` draws of each case: (case, draw) -> {precision: row}
    (``shape``: run_case's s1, s2)."""
    return {(c, r): {row["precision"]: row for row in accuracy.run_case(c, r, 0, None, ("fp32", precision), **shape)}
            for c in cases for r in range(seeds)}


# ============================================================================================================
# Inputs that move fp32_frame's frame (tests/golden/test_fp32_frame.py)
# ============================================================================================================

def sink_and_sea(gap, keys, seed=0):
    """Four rows: key 0 scores ``gap`` (scaled) above a sea of near-equal keys (spread 4e-4, D 128)."""
    rng = np.random.default_rng(seed)
    d = 128
    scale = d ** -0.5
    q = np.full((1, 1, 4, d), 4 / np.sqrt(d)) + rng.normal(0, 0.01, (1, 1, 4, d))
    k = rng.normal(0, 0.001, (1, 1, keys, d))
    k[..., 0, :] += gap / (scale * 4 * np.sqrt(d))
    v = rng.normal(3, 1, (1, 1, keys, d))
    return (*(x.astype(np.float16) for x in (q, k, v)), scale)


def far_peak(rows: int = 1, heads: int = 1, blocks: int = 48, block_kv: int = 16):
    """Each head's first key 200 (scaled) above a sea of the others, ``blocks`` blocks of ``block_kv`` keys, D = 64:
    (q, k, v, scale, block_kv)."""
    rng = np.random.default_rng(0)
    d, keys = 64, blocks * block_kv
    scale = d ** -0.5
    q = np.zeros((1, heads, rows, d))
    q[..., 0] = 1.0
    k = rng.normal(0, 0.01, (1, heads, keys, d))
    k[..., 0] = -200 / scale
    k[..., 0, 0] = 0.0
    v = rng.normal(0, 1, (1, heads, keys, d))
    q, k, v = (x.astype(np.float16) for x in (q, k, v))
    return q, k, v, scale, block_kv


# ============================================================================================================
# The host model against the golden model (tests/npu/test_npu_host_model.py)
# ============================================================================================================

def _ordered(x: np.ndarray) -> np.ndarray:
    """FP16 bit patterns mapped to integers that are consecutive along the real line (±0 -> 0)."""
    bits = np.asarray(x, np.float16).view(np.int16).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFF), bits)


def ulp_distance(got, want, scale) -> np.ndarray:
    """Element-wise distance between FP16 arrays in FP16 ulps, counted at the magnitude
    ``max(|want|, scale)``: the number of FP16 values between ``got`` and ``want`` where |want| >=
    scale, and |got - want| / ulp16(scale) below it.

    ``scale`` is a floor of the magnitude (here 1/16 of the head's max |V|, see ULP_BOUND in
    tests/npu/test_npu_host_model.py): an attention output is a convex combination of V rows, so an error
    in the weights moves it by an amount proportional to |V|, not to |out|; an output that cancels to near 0 would
    otherwise count a tiny absolute error as thousands of ulps.
    """
    got = np.asarray(got, np.float16)
    want = np.asarray(want, np.float16)
    exact = np.abs(_ordered(got) - _ordered(want)).astype(np.float64)
    floor = np.spacing(np.asarray(scale, np.float16)).astype(np.float64)
    absolute = np.abs(got.astype(np.float64) - want.astype(np.float64)) / floor
    return np.where(np.abs(want.astype(np.float64)) >= scale, exact, absolute)


@contextlib.contextmanager
def _model_exp_and_log():
    """The golden model with the host model's FP32 exp and log (the float64 function rounded once to
    FP32) in place of NumPy's float32 ones, which differ from them in the last bit now and then. With
    that and S = Q·Kᵀ in one Mmad call (D <= baseK = 128), every rounding of "fp16_fp32" is the
    same in the two, so the kernel's output and lse must equal the golden model's bit for bit."""
    saved = golden.NumpyOps.exp, golden.NumpyOps.log
    golden.NumpyOps.exp = staticmethod(lambda x: np.exp(np.asarray(x, np.float64)).astype(np.float32))
    golden.NumpyOps.log = staticmethod(lambda x: np.log(np.asarray(x, np.float64)).astype(np.float32))
    try:
        yield
    finally:
        golden.NumpyOps.exp, golden.NumpyOps.log = saved
