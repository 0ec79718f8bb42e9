"""The call trace of :func:`pasa_npu.patch_torch_npu` (``record=PATH``), and its reading back for a replay
(``scripts/bench_serving.py --replay PATH``): one format, written and read here only.

A trace is a JSON Lines file. Its first line is the header ``{"format": FORMAT, "version": VERSION}``; every
other line is one call of a routed torch_npu entry point, as the patch saw it::

    {"op": "npu_fused_infer_attention_score", "form": "call" | "out",
     "entry": "torch_npu.npu_fused_infer_attention_score", "ran": "pasa-npu" | "torch_npu", "reason": "...",
     "args": [VALUE, ...], "kwargs": {"name": VALUE, ...}}

``op`` is the attribute of torch_npu that was called (a workspace query is its own op), ``form`` "out" for
FIA's ``.out`` overloads, ``entry``/``ran``/``reason`` the route as :func:`pasa_npu.torch_npu_routes` counts it.
A VALUE is JSON's own for None, bools, numbers and strings, and otherwise one of

* ``{"seq": [VALUE, ...]}``: a list or tuple (lengths, ``out=(attention_out, softmax_lse)``);
* ``{"array": [...]}``: a NumPy array of integers (SGLang's lengths), its values;
* ``{"tensor": {"shape": [...], "dtype": "float16", "device": "npu:0", "values": [...]}}``: a tensor's shape,
  dtype and device; ``values`` (flattened) for integer tensors of at most :data:`MAX_VALUES` elements: the
  lengths and block tables that decide what a call computes. Other tensors (queries, caches, masks) keep
  no values: a replay makes them (:func:`read`'s ``make``).

Recording reads each recorded integer tensor to the host: a synchronisation per call, for a recording run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["FORMAT", "VERSION", "MAX_VALUES", "Call", "Recorder", "read"]

FORMAT = "pasa-npu torch_npu call trace"
VERSION = 1
#: Integer tensors up to this many elements are recorded with their values.
MAX_VALUES = 1 << 16


class Call(NamedTuple):
    """One recorded call, its arguments rebuilt by :func:`read`."""

    op: str
    form: str
    entry: str
    ran: str
    reason: str
    args: tuple
    kwargs: dict


def _encode(x):
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, (list, tuple)):
        return {"seq": [_encode(e) for e in x]}
    if isinstance(x, np.ndarray):
        return {"array": x.tolist()}
    if isinstance(x, torch.Tensor):
        spec = {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch."), "device": str(x.device)}
        if not x.is_floating_point() and x.dtype != torch.bool and x.numel() <= MAX_VALUES:
            spec["values"] = x.detach().flatten().tolist()
        return {"tensor": spec}
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    raise TypeError(f"a torch_npu call trace cannot hold a {type(x).__name__}")


class Recorder:
    """Appends each call to a trace file (created, or truncated, with its header)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with self.path.open("w") as f:
            f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")

    def __call__(self, op: str, form: str, entry: str, ran: str, reason: str, args: tuple, kwargs: dict) -> None:
        line = {"op": op, "form": form, "entry": entry, "ran": ran, "reason": reason,
                "args": [_encode(a) for a in args], "kwargs": {k: _encode(v) for k, v in kwargs.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


#: make(argument name, tensor spec, device) -> the tensor a replay passes for a tensor recorded without values.
Make = Callable[[str, dict, torch.device], torch.Tensor]


def _decode(x, name: str, make: Make, device: torch.device):
    if not isinstance(x, dict):
        return x
    if "seq" in x:
        return [_decode(e, name, make, device) for e in x["seq"]]
    if "array" in x:
        return np.asarray(x["array"])
    spec = x["tensor"]
    if "values" in spec:
        on = device if spec["device"] != "cpu" else torch.device("cpu")
        return torch.tensor(spec["values"], dtype=getattr(torch, spec["dtype"]), device=on).reshape(spec["shape"])
    return make(name, spec, device)


def read(path: str | Path, make: Make, device: torch.device | str = "cpu") -> Iterator[Call]:
    """The calls of a trace, in order, each with its arguments rebuilt on ``device`` (tensors recorded on the
    host stay there): recorded values as they were, every other tensor ``make(name, spec, device)``, where
    name is the argument's name (positional arguments: ``"arg0"``, ...). Raises ValueError for a file that is
    not such a trace."""
    device = torch.device(device)
    with Path(path).open() as f:
        header = f.readline()
        try:
            head = json.loads(header)
        except json.JSONDecodeError:
            head = None
        if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("version") != VERSION:
            raise ValueError(f"{path} is not a {FORMAT} of version {VERSION} (its first line is {header[:80]!r})")
        for line in f:
            c = json.loads(line)
            args = tuple(_decode(a, f"arg{i}", make, device) for i, a in enumerate(c["args"]))
            kwargs = {k: _decode(v, k, make, device) for k, v in c["kwargs"].items()}
            yield Call(c["op"], c["form"], c["entry"], c["ran"], c["reason"], args, kwargs)
