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

import torch

import pasa_npu
from support import COMPRESSED_ON_DEVICE as COMPRESSED, D, N, NKV, PAGE, run_steps


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
