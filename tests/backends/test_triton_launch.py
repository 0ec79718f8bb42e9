"""The Triton backend's launch path (``backends.triton_launch``): a repeated specialisation goes straight
to the compiled kernel's launcher; anything Triton specialises on that changes goes back through Triton,
and so does every launch where the fast path does not apply (another Triton release, a compiled kernel
without the internals it reads).

A stand-in kernel records each launch (CPU tensors: only their addresses and dtypes matter here); the
GPU tests (test_triton_gpu.py) check the real launches' results, misaligned views included.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from pasa_npu.backends import triton_launch as launcher  # noqa: E402
from support import _Kernel, _Launcher, fast_launch  # noqa: E402


@pytest.fixture
def kernel(monkeypatch):
    fast_launch(monkeypatch)
    return _Kernel()


def _call(kernel, a, b, n=32, x=0.5, m=3, block=64):
    # The constexprs in another order than the signature's: the launcher passes them in its order.
    launcher.launch(kernel, (2, 3, 1), (a, b), (n, x, m), num_warps=4, BLOCK=block, D=16)


def _kinds(kernel):
    return [entry[0] for entry in kernel.launches]


def test_a_repeated_specialisation_launches_the_compiled_kernel_directly(kernel):
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    _call(kernel, a, b)
    assert kernel.launches[0] == ("triton", (2, 3, 1), (a, b, 32, 0.5, 3), dict(BLOCK=64, D=16, num_warps=4))
    _call(kernel, a, b, n=48, x=0.25, m=19)  # same residues mod 16, none is 1; another float
    assert kernel.launches[1] == ("direct", (2, 3, 1, 77, 1234, ("meta",), None, None, None, a.data_ptr(),
                                             b.data_ptr(), 48, 0.25, 19, 16, 64))


@pytest.mark.parametrize("scratch", [0, 128])
def test_a_launcher_whose_kernel_needs_no_scratch_is_called_through_its_c_function(kernel, scratch):
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    _call(kernel, a, b)
    compiled = launcher._COMPILED[next(iter(launcher._COMPILED))][0]
    compiled.run = _Launcher(kernel.launches, scratch)
    launcher._COMPILED[next(iter(launcher._COMPILED))] = (compiled, (16, 64))
    _call(kernel, a, b, n=48)
    tail = (a.data_ptr(), b.data_ptr(), 48, 0.5, 3, 16, 64)
    if scratch:  # the launcher object allocates the scratch
        assert kernel.launches[1] == ("direct", (2, 3, 1, 77, 1234, ("meta",), None, None, None, *tail))
    else:
        assert kernel.launches[1] == ("c", (2, 3, 1, 77, 1234, False, True, None, None, ("meta",), None, None, None,
                                            *tail))


def test_a_plans_launch_checks_alignment_but_not_dtypes_it_is_promised(kernel):
    """``same_dtypes``: a plan's tensors have the dtypes it was made for, so the launch skips comparing them;
    an address with another residue still goes back through Triton."""
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    launch = launcher.Launch(kernel, (2, 3, 1), (32, 0.5, 3), num_warps=4, BLOCK=64, D=16)
    launch((a, b))
    launch((a, b), same_dtypes=True)
    launch((a[1:], b), same_dtypes=True)
    assert _kinds(kernel) == ["triton", "direct", "triton"]


@pytest.mark.parametrize("change", ["int_multiple_of_16", "int_is_one", "int_outside_int32", "float_to_int",
                                    "misaligned_pointer", "dtype", "constexpr", "warps"])
def test_what_triton_specialises_on_goes_back_through_triton(kernel, change):
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    _call(kernel, a, b)
    _call(kernel, a, b)
    if change == "int_multiple_of_16":
        _call(kernel, a, b, n=33)
    elif change == "int_is_one":
        _call(kernel, a, b, m=1)
    elif change == "int_outside_int32":
        _call(kernel, a, b, n=1 << 40)
    elif change == "float_to_int":
        _call(kernel, a, b, x=2)
    elif change == "misaligned_pointer":
        _call(kernel, a[1:], b)
    elif change == "dtype":
        _call(kernel, a, b.view(torch.int32))
    elif change == "constexpr":
        _call(kernel, a, b, block=128)
    else:
        launcher.launch(kernel, (2, 3, 1), (a, b), (32, 0.5, 3), num_warps=8, BLOCK=64, D=16)
    assert _kinds(kernel) == ["triton", "direct", "triton"]
    _call(kernel, a, b)  # the first specialisation is still cached
    assert _kinds(kernel) == ["triton", "direct", "triton", "direct"]


def test_launch_hooks_and_the_interpreter_take_tritons_path(kernel, monkeypatch):
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    monkeypatch.setattr(launcher, "_hooked", lambda: True)
    _call(kernel, a, b)
    _call(kernel, a, b)
    monkeypatch.setattr(launcher, "_hooked", lambda: False)
    monkeypatch.setattr(launcher, "_INTERPRET", True)
    _call(kernel, a, b)
    assert _kinds(kernel) == ["triton"] * 3


def test_scalars_must_follow_the_pointers(kernel):
    a = torch.zeros(64, dtype=torch.float16)
    with pytest.raises(TypeError, match="pointers come first"):
        launcher.launch(kernel, (1, 1, 1), (a,), (a, 1, 0.5, 3), num_warps=4, BLOCK=64, D=16)


def test_a_triton_release_the_fast_path_was_not_checked_against_launches_through_triton(kernel, monkeypatch):
    """Another Triton release, whose launcher may take other arguments: every launch is Triton's own."""
    monkeypatch.setattr(launcher, "_FAST", False)
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    for _ in range(3):
        _call(kernel, a, b)
    assert _kinds(kernel) == ["triton"] * 3


def test_a_compiled_kernel_without_the_internals_read_launches_through_triton_from_then_on(kernel):
    """A compiled kernel whose launcher lacks what the fast path reads (here an object of another form): the
    launch goes through Triton's own path with the same arguments, and so do the launch's later calls."""
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    launch = launcher.Launch(kernel, (2, 3, 1), (32, 0.5, 3), num_warps=4, BLOCK=64, D=16)
    launch((a, b))
    compiled = launcher._COMPILED[next(iter(launcher._COMPILED))][0]
    compiled.run = lambda *args: kernel.launches.append(("direct", args))
    launch((a, b))
    launch((a, b))
    assert _kinds(kernel) == ["triton"] * 3
    assert kernel.launches[1] == kernel.launches[2] == kernel.launches[0]
