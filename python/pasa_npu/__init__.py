"""pasa-npu: PASA (online pseudo-average shifting attention), overflow-safe FP16 attention with the
interface of ``torch_npu.npu_fused_infer_attention_score``.

* :func:`fused_attention`: the entry point (CPU, CUDA and NPU tensors), also the PyTorch operator
  ``torch.ops.pasa_npu.fused_attention``; :func:`fused_attention_v2`, the same call with FIA v2's names
  and its ``learnable_sink``; their ``.out`` forms :func:`fused_attention_out` and
  :func:`fused_attention_v2_out` (operator ``torch.ops.pasa_npu.fused_attention_out``), which write into
  the caller's tensors, and :func:`fused_attention_workspace` / :func:`fused_attention_v2_workspace`,
  which size their scratch.
* :func:`merge_partials`: merges partial results over disjoint key sets through their lse.
* :func:`patch_torch_npu`: runs existing callers of ``torch_npu.npu_fused_infer_attention_score`` (v1, v2,
  their ``.out`` forms) on pasa-npu for the calls it takes (:mod:`pasa_npu.integrations.torch_npu`);
  :func:`torch_npu_routes` counts where calls went.
* :mod:`pasa_npu.golden`: the NumPy golden model of every precision allocation (NumPy only).
* :mod:`pasa_npu.beta`: the optimal-accuracy condition for β.
* :mod:`pasa_npu.metrics`: the paper's relative RMSE and overflow statistics.
"""

from .precision import ALLOCATIONS, DEFAULT_PRECISION, PRECISIONS

__version__ = "0.1.0"
#: The entry points, all in pasa_npu.interface (imported on first use: they need torch).
_ENTRY_POINTS = ("fused_attention", "fused_attention_v2", "fused_attention_out", "fused_attention_v2_out",
                 "fused_attention_workspace", "fused_attention_v2_workspace")
__all__ = [*_ENTRY_POINTS, "merge_partials", "patch_torch_npu", "unpatch_torch_npu", "torch_npu_routes",
           "PRECISIONS", "ALLOCATIONS", "DEFAULT_PRECISION", "__version__"]


def __getattr__(name):
    # fused_attention needs torch; import it on first use so that the golden model, the β solver
    # and the accuracy study stay importable (and fast to import) with NumPy alone. The module then
    # holds it, so later look-ups (one per call of pasa_npu.fused_attention) do not come here.
    if name in _ENTRY_POINTS:
        from . import interface

        value = getattr(interface, name)
    elif name == "merge_partials":
        from .merge import merge_partials as value
    elif name in ("patch_torch_npu", "unpatch_torch_npu"):
        from .integrations import torch_npu
        value = getattr(torch_npu, name)
    elif name == "torch_npu_routes":
        from .integrations.torch_npu import routes as value
    else:
        raise AttributeError(f"module 'pasa_npu' has no attribute {name!r}")
    globals()[name] = value
    return value
