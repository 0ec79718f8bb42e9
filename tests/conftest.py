"""Session-wide test setup."""

import os

import torch

# Triton decides when a kernel is decorated whether it runs through its interpreter, so the switch
# must be set before any test imports pasa_npu.backends.triton: without a GPU (CI), every Triton
# kernel of the session is interpreted (tests/test_triton_interpret.py runs them on tiny shapes).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
