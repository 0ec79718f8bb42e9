"""Backends of :func:`pasa_npu.fused_attention`.

* ``reference``: the blockwise loop of :mod:`pasa_npu.blockwise` in PyTorch ops; runs wherever
  PyTorch runs (CPU, CUDA, NPU eager through torch_npu).
* ``triton``: the Triton kernel (``pasa``, ``pasa_fp32``, ``fp32``) for CUDA tensors; the default on
  CUDA when triton is installed (docs/benchmarks/gpu.md).
* ``npu``: the AscendC kernel through the torch_npu extension, once built and deployed with CANN by
  scripts/build_and_deploy.sh (docs/npu.md). In CI the same kernel sources run on our host model
  (:mod:`pasa_npu.npu_host_model`); they have not run on an NPU.
"""
