"""Launching the Triton backend's kernels at a fraction of the host time of Triton's own launch.

Triton's ``kernel[grid](...)`` binds and specialises every argument in Python on each call and its
launcher asks the driver for each tensor's device pointer: tens of µs per launch, longer than a decode
kernel runs. :class:`Launch` keeps each compiled specialisation and calls its launcher directly. That
launcher is Triton's internal (the compiled kernel's ``run``, its C function ``launch``, the packed
metadata), checked against the Triton releases of FAST_LAUNCH_TRITON only: with any other release, a
launch hook installed (a profiler's), the interpreter, or a compiled kernel whose internals have
another form, every launch goes through Triton's public ``kernel[grid](...)``, so that a Triton
upgrade costs host time, never results.
"""

from __future__ import annotations

import operator
import os
from itertools import repeat

import torch

try:
    import triton
except ImportError:  # triton is optional (the backend reports it)
    triton = None
try:
    from triton import knobs as _knobs
except ImportError:  # no triton, or one before 3.4 (its launch hooks lived elsewhere): Triton's launch only
    _knobs = None

#: Triton releases (major.minor) whose compiled-kernel launcher Launch calls directly.
FAST_LAUNCH_TRITON: tuple[str, ...] = ("3.6",)
_FAST = triton is not None and _knobs is not None and ".".join(triton.__version__.split(".")[:2]) in FAST_LAUNCH_TRITON
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

#: (kernel, device, constexprs, warps, stages, the tensors' and scalars' specialisation, or the scalars'
#: values) -> (compiled kernel, its constexpr arguments in signature order). Bounded: emptied when full
#: (entries are references).
_COMPILED: dict[tuple, tuple] = {}
_COMPILED_LIMIT = 4096
#: Per (kernel, the scalars' types): the getter of the int scalars, or None where there are none.
_INT_GETTERS: dict[tuple, operator.itemgetter | None] = {}
_INT32 = 1 << 31
_DTYPE = operator.attrgetter("dtype")
try:  # what Triton's own launch reads, without torch.cuda's Python wrappers
    from torch._C import _cuda_getCurrentRawStream as _raw_stream
    from torch._C import _cuda_getDevice as _current_device
except ImportError:  # pragma: no cover - older or CPU-only builds
    def _raw_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream

    def _current_device() -> int:
        return torch.cuda.current_device()


class Launch:
    """``kernel[grid](*tensors, *scalars, **constexprs)`` with the grid, scalars, constexprs, warps and
    stages fixed when it is made, called with the tensors (every kernel here takes its pointers first, then
    its scalars, then its constexprs), at a fraction of the host time of Triton's launch when it repeats.

    Triton's ``kernel[grid](...)`` binds and specialises every argument in Python on each call (which
    ints are 1 or multiples of 16, which pointers are 16-byte aligned, every dtype), builds its cache
    key from that, and its launcher asks the driver for each tensor's device pointer: tens of µs per
    launch, longer than a decode kernel runs. Here the first launch of each specialisation goes through
    Triton (which compiles the kernel or finds it in its cache, and launches it), and the compiled kernel
    is kept under a key that determines everything Triton specialises on: the tensors' dtypes and
    addresses modulo 16, each int scalar modulo 16 and whether it is 1 (or, outside int32, its value),
    the scalars' types (floats are never specialised), the constexprs, warps, stages and the current
    device. It is also kept under the scalars' exact values, which a repeated call finds without
    classifying its ints, and bound to this launch with the device, dtypes and address residues it was
    found for: a call that matches them passes the tensors' addresses straight to the compiled kernel's
    launcher, on the current stream as Triton does. Launch hooks (a profiler's), the interpreter, a Triton
    release outside FAST_LAUNCH_TRITON and a compiled kernel without the internals :func:`_launcher`
    reads take Triton's own path (the last from then on)."""

    __slots__ = ("kernel", "grid", "scalars", "constexprs", "num_warps", "num_stages", "_bound", "_public")

    def __init__(self, kernel, grid: tuple[int, int, int], scalars: tuple, *, num_warps: int,
                 num_stages: int | None = None, **constexprs):
        self.kernel, self.grid, self.scalars, self.constexprs = kernel, grid, scalars, constexprs
        self.num_warps, self.num_stages = num_warps, num_stages
        self._bound = None  # (device, dtypes, address residues, launcher, its leading arguments, the trailing ones)
        self._public = not _FAST  # Triton's public launch only

    def __call__(self, tensors: tuple, *, same_dtypes: bool = False) -> None:
        """Launch over ``tensors``. ``same_dtypes``: the caller guarantees that they have the dtypes of the
        tensors this launch was first called with (a plan's own contract), which then go unchecked."""
        if self._public or _INTERPRET or _hooked():
            _jit_launch(self.kernel, self.grid, tensors, self.scalars, self.num_warps, self.num_stages,
                        self.constexprs)
            return
        device = _current_device()
        ptrs = tuple(map(torch.Tensor.data_ptr, tensors))
        residues = tuple(map(operator.mod, ptrs, repeat(16)))
        bound = self._bound
        if bound is None or bound[0] != device or bound[2] != residues \
                or (not same_dtypes and bound[1] != tuple(map(_DTYPE, tensors))):
            dtypes = tuple(map(_DTYPE, tensors))
            hit = self._compiled(device, tensors, dtypes, residues)
            if hit is None:
                return  # launched by Triton
            compiled, tail = hit
            try:
                fast = _launcher(compiled)
            except AttributeError:  # a compiled kernel of another form than the releases checked
                self._public = True
                _jit_launch(self.kernel, self.grid, tensors, self.scalars, self.num_warps, self.num_stages,
                            self.constexprs)
                return
            bound = self._bound = (device, dtypes, residues, *fast, (*self.scalars, *tail))
        bound[3](*self.grid, _raw_stream(device), *bound[4], *ptrs, *bound[5])

    def _compiled(self, device, tensors, dtypes, residues) -> tuple | None:
        """The compiled kernel and its constexpr values for this specialisation, from the cache; or None
        after launching through Triton (which compiles it), then caching it."""
        kernel, scalars, constexprs = self.kernel, self.scalars, self.constexprs
        # With the values: 1 and 1.0 are equal keys, an int and a float are not. A tuple of scalars (a kernel's
        # grouped arguments) counts as its elements, which Triton specialises one by one.
        types = tuple(map(type, _flat(scalars)))
        common = (id(kernel), device, tuple(constexprs.items()), self.num_warps, self.num_stages, types, dtypes,
                  residues)
        exact = (common, scalars)
        hit = _COMPILED.get(exact)
        if hit is None:
            specialised = (common, _int_spec(kernel, types, _flat(scalars)))
            hit = _COMPILED.get(specialised)
            if hit is None:
                compiled = _jit_launch(kernel, self.grid, tensors, scalars, self.num_warps, self.num_stages,
                                       constexprs)
                names = kernel.arg_names[len(tensors) + len(scalars):]
                if set(names) == set(constexprs) and hasattr(compiled, "packed_metadata"):
                    _remember(specialised, (compiled, tuple(constexprs[name] for name in names)))
                return None
            _remember(exact, hit)
        return hit


def _launcher(compiled) -> tuple:
    """How to launch a compiled kernel: (a callable, the arguments between the stream and the pointers).
    Triton's launcher object (``compiled.run``) allocates the global and profile scratch a kernel may ask
    for, then calls its C function ``launch``; where the kernel asks for neither, that function is called
    directly, which costs ~2 µs less host time per launch (docs/benchmarks/call/notes.md). AttributeError
    where the compiled kernel lacks what this reads."""
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    if run.global_scratch_size == 0 and run.profile_scratch_size == 0:
        return run.launch, (function, run.launch_cooperative_grid, run.launch_pdl, None, None, metadata, None, None,
                            None)
    return run, (function, metadata, None, None, None)


def launch(kernel, grid: tuple[int, int, int], tensors: tuple, scalars: tuple, *, num_warps: int,
            num_stages: int | None = None, **constexprs) -> None:
    """One launch of ``kernel[grid](*tensors, *scalars, **constexprs)`` (see :class:`Launch`)."""
    Launch(kernel, grid, scalars, num_warps=num_warps, num_stages=num_stages, **constexprs)(tensors)


def _remember(key: tuple, entry: tuple) -> None:
    if len(_COMPILED) >= _COMPILED_LIMIT:
        _COMPILED.clear()
    _COMPILED[key] = entry


def _flat(scalars: tuple) -> tuple:
    """``scalars`` with each tuple among them replaced by its elements, recursively."""
    if not any(type(x) is tuple for x in scalars):
        return scalars
    return tuple(y for x in scalars for y in (_flat(x) if type(x) is tuple else (x,)))


def _int_spec(kernel, types: tuple, scalars: tuple) -> tuple:
    """What Triton specialises on in a kernel's int scalars (bools are not ints to Triton): each one's
    residue modulo 16 and whether it is 1, or the values where one is outside int32."""
    key = (id(kernel), types)
    if key not in _INT_GETTERS:
        if not set(types) <= {int, float, bool}:
            raise TypeError(f"a kernel's scalars must be int, float or bool (pointers come first), got {types}")
        positions = [i for i, t in enumerate(types) if t is int]
        _INT_GETTERS[key] = operator.itemgetter(*positions) if positions else None
    ints = _INT_GETTERS[key]
    if ints is None:
        return ()
    vals = ints(scalars)
    vals = vals if type(vals) is tuple else (vals,)
    if -_INT32 <= min(vals) and max(vals) < _INT32:
        return tuple(map(operator.mod, vals, repeat(16))), tuple(map(operator.eq, vals, repeat(1)))
    return vals


def _jit_launch(kernel, grid, tensors, scalars, num_warps, num_stages, constexprs):
    """Triton's own launch; returns its compiled kernel (None under the interpreter)."""
    options = {"num_warps": num_warps} if num_stages is None else {"num_warps": num_warps, "num_stages": num_stages}
    return kernel[grid](*tensors, *scalars, **constexprs, **options)


def _hooked() -> bool:
    """Whether a launch hook (a profiler's) is installed: Triton's launch then calls it with each launch's
    metadata, so the launch takes Triton's path (as does a Triton without ``knobs``). Triton keeps the
    hooks as a chain of calls (3.5 and later) or as one optional callable."""
    if _knobs is None:
        return True
    hook = _knobs.runtime.launch_enter_hook
    return bool(hook.calls) if hasattr(hook, "calls") else hook is not None
