"""Backends of :func:`pasa_npu.fused_attention`.

* ``reference``: the blockwise loop of :mod:`pasa_npu.blockwise` in PyTorch ops; runs wherever
  PyTorch runs (CPU, CUDA, NPU eager through torch_npu).
* ``npu``: the AscendC kernel, once built and installed with CANN (not part of this package yet).
"""
