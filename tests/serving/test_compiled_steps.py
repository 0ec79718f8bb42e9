"""Compiled serving steps: a function calling fused_attention, fused_attention_v2 or the ``.out`` form with TND and a
block table, compiled once with ``torch.compile(fullgraph=True)`` (``dynamic=None``, the default) and run for 20
steps whose lengths, batch sizes, query rows and table widths change, as a server's steps do. Each step must equal
the eager call on its own inputs, and the steps must compile at most twice: the first step, then once more with
what changed from it symbolic (torch.compile's automatic dynamic shapes), never again. Lengths come as vllm passes
them (int32 ``cumsum`` tensors), as int64 tensors, or as lists of ints (SymInts once they vary).

The backend is aot_eager: Dynamo and AOTAutograd trace the calls with fake tensors (the operators' fake
implementations) exactly as for Inductor, and run the graph eagerly, so a step costs what an eager call costs. On a
GPU machine the steps run on CUDA tensors (the Triton kernels, the lengths read on the device)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import pasa_npu

N, NKV, D, PAGE, PAGES = 4, 2, 16, 16, 24
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1).to(DEVICE)
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


_KW = dict(num_key_value_heads=NKV, input_layout="TND", block_size=PAGE, sparse_mode=3, atten_mask=COMPRESSED,
           precision="fp32")


def v1(q, kc, vc, table, cum, kv_lens):
    return pasa_npu.fused_attention(q, kc, vc, block_table=table, actual_seq_lengths=cum,
                                    actual_seq_lengths_kv=kv_lens, num_heads=N, scale=D ** -0.5,
                                    softmax_lse_flag=True, **_KW)


def v2(q, kc, vc, table, cum, kv_lens):
    return pasa_npu.fused_attention_v2(q, kc, vc, block_table=table, actual_seq_qlen=cum, actual_seq_kvlen=kv_lens,
                                       num_query_heads=N, softmax_scale=D ** -0.5, return_softmax_lse=True, **_KW)


def out(q, kc, vc, table, cum, kv_lens):
    """The .out form into buffers the step allocates (a server's graph holds them)."""
    buffers = (torch.empty_like(q), torch.empty(q.shape[0], N, 1, device=q.device))
    return pasa_npu.fused_attention_out(q, kc, vc, out=buffers, block_table=table, actual_seq_lengths=cum,
                                        actual_seq_lengths_kv=kv_lens, num_heads=N, scale=D ** -0.5,
                                        softmax_lse_flag=True, **_KW)


def bsnd_decode(q, kc, vc, table, cum, kv_lens):
    """SGLang's FIA decode on the same steps: one query row per request (BSND), its keys behind the table."""
    return pasa_npu.fused_attention(q[:table.shape[0], None], kc, vc, block_table=table, actual_seq_lengths_kv=kv_lens,
                                    num_heads=N, num_key_value_heads=NKV, input_layout="BSND", block_size=PAGE,
                                    scale=D ** -0.5, softmax_lse_flag=True, precision="fp32")


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


def test_compiled_tnd_steps_with_tensor_lengths_compile_twice():
    """Length tensors stay tensors in the graph (their values are the call's, read when it runs): the batch size,
    their entries, is symbolic like every other size. Every form, int32 and int64 lengths."""
    assert run_steps([(v2, "int32"), (v1, "int64"), (out, "int32")], None) == [2, 2, 2]


def test_compiled_bsnd_decode_steps_with_tensor_lengths_compile_twice():
    """BSND's B is the query's, and its key lengths' entries."""
    assert run_steps([(bsnd_decode, "int32")], None) == [2]


def test_compiled_steps_with_list_lengths_compile_twice():
    """Lists of ints become lists of SymInts once their values vary; a list's length (the batch size) is fixed by
    Dynamo's guards, so the batch stays 3 here."""
    assert run_steps([(v2, "list")], 3) == [2]
