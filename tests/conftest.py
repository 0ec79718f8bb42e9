"""Session-wide test setup."""

import os

import torch

# Triton decides when a kernel is decorated whether it runs through its interpreter, so the switch
# must be set before any test imports pasa_npu.backends.triton: without a GPU (CI), every Triton
# kernel of the session is interpreted (tests/backends/test_triton_interpret.py runs them on tiny shapes).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# torch.compile's caches (Inductor's FX graph and kernel caches, /tmp/torchinductor_<user> by default) are keyed
# without the schema of our custom ops, so two checkouts of the package on one machine whose op schemas differ
# would replay each other's compiled graphs ("expected at most N arguments"). Each checkout keeps its own, in its
# ignored build folder.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "inductor"))
