"""Compile the Triton attention kernel for Hopper (sm_90) without a GPU and report what its SASS holds:
registers, stack (spills), local-memory loads, asynchronous copies (a software-pipelined loop issues
``cp.async``, LDGSTS), matrix instructions (HGMMA), barriers and the instruction count.

    PYTHONPATH=python python3 scripts/kernel_sass.py [CONFIG ...] [--out DIR] [--no-lse]

Triton's wheel carries ``ptxas`` and ``cuobjdump``, so this runs on any machine with the Triton of the GPU
machine installed (the SASS depends on Triton's version). Each CONFIG of CONFIGS is one specialisation as
a prefill or decode call of the benchmarks would compile it: pointers 16-byte aligned, int arguments
multiples of 16, one query head per KV head. ``--out`` keeps each SASS and TTGIR listing. ``--no-lse``: as a
call that does not ask for the lse compiles it (the public call's default). Another
version of the kernel: PYTHONPATH=DIR, DIR holding that version's ``pasa_npu`` (``git archive``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pasa_npu.backends import triton as tb
from pasa_npu.precision import get_allocation
from pasa_npu.problem import default_block_kv
from pasa_npu.backends import triton_kernels as k

#: name -> (D, BLOCK_M, num_warps, num_stages, precision, decode): the backend's configurations.
CONFIGS = {
    "pasa_rs_d64": (64, 64, 4, 3, "pasa_rs", False),
    "pasa_rs_d128": (128, 128, 8, 3, "pasa_rs", False),
    "pasa_rs_d256": (256, 128, 8, 1, "pasa_rs", False),
    "pasa_rs_decode": (128, 16, 4, 2, "pasa_rs", True),
    "fp32_d64": (64, 64, 4, 3, "fp32", False),
    "fp32_d128": (128, 128, 8, 3, "fp32", False),
    "fp32_decode": (128, 16, 4, 2, "fp32", True),
    "fp32_frame_d64": (64, 64, 4, 3, "fp32_frame", False),
    "fp32_frame_d128": (128, 128, 8, 3, "fp32_frame", False),
    "fp32_frame_d256": (256, 128, 8, 2, "fp32_frame", False),
    "fp32_frame_decode": (128, 16, 4, 2, "fp32_frame", True),
}
POINTERS = {"Mask": "*u8", "Lse": "*fp32", "Part": "*fp32", "Arrived": "*i32", "Table": "*i32", "KVInfo": "*i32",
            "Sink": "*fp32"}
#: The float arguments, this kernel's and earlier versions' (so that older commits compile too).
FLOATS = {"sm_scale", "scale", "rho", "inva", "shift_a", "shift_b", "q_mul", "relevance", "reshift_at", "frame_drop",
          "lse_none"}
#: The kernel's grouped arguments (tuples): their element types.
TUPLES = {"q_str": ("i32",) * 3, "k_str": ("i32",) * 3, "v_str": ("i32",) * 3, "mask_str": ("i32",) * 4,
          "dims": ("i32",) * 4, "band": ("i32",) * 2, "scratch_at": ("i32",) * 3, "tiles": ("i32",) * 2,
          "terms": ("fp32",) * 9}


def compile_config(d, block_m, warps, stages, precision, decode, lse=True):
    kernel = k.attention_kernel
    alloc = get_allocation(precision)
    block_n = default_block_kv(alloc, d, "triton")  # the public call's block (fp32's free block is the same)
    ones = tb._config(d, tb._blocked(alloc), block_n, 4096, framed=alloc.framed)[4]
    names = kernel.arg_names
    grouped = "q_str" in names  # this kernel: strides and terms in tuples, the allocation's family by name
    consts = dict(G=1, D=d, D_PAD=d, BLOCK_M=block_m, BLOCK_N=block_n, ONES=ones,
                  SHIFTED=False, ROW_SHIFT=alloc.row_shifted, FRAMED=alloc.framed, STATE16=False,
                  FAMILY=tb._family(alloc) if grouped else None, FUSED_SHIFT=decode,
                  HAS_MASK=False, HAS_BAND=False, SPLIT=decode, SPLITS=16 if decode else 1, FP16_EXP=True, PAGED=False,
                  PAGE=0 if grouped else 1, LAYOUT="BNSD", STORE_LSE=lse, OUT_BSND=False, HAS_SINK=False,
                  VARLEN=False, MERGE_ROWS=1,
                  EVEN_KV=d <= 128)  # the benchmarks' S = 4096 and 8192: whole blocks (the backend's rule)
    consts = {n: v for n, v in consts.items() if n in names}
    pointers = names[:names.index("q_str" if grouped else "stt")]  # the kernel takes its pointers first
    sig = {n: "constexpr" if n in consts else POINTERS.get(n, "*fp16") if n in pointers
           else TUPLES.get(n) or ("fp32" if n in FLOATS else "i32") for n in names}
    constexprs = {(names.index(n),): v for n, v in consts.items()}
    if grouped:  # G, one query head per KV head, is dims[3]: Triton specialises an int of 1 as a constant
        sig["dims"] = ("i32",) * 3 + ("constexpr",)
        constexprs[(names.index("dims"), 3)] = 1
    # Every pointer 16-byte aligned, every int a multiple of 16 (a tuple's ints each).
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n] == "i32" or sig[n][0] == "*"}
    attrs.update({(i, j): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in TUPLES
                  for j, t in enumerate(sig[n]) if t == "i32"})
    src = ASTSource(fn=kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", default=list(CONFIGS), metavar="CONFIG")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-lse", action="store_true", help="compile without the lse's store (STORE_LSE=False)")
    args = ap.parse_args()
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    print(f"triton {triton.__version__}, sm_90")
    print("| config | registers | stack bytes | LDL | LDGSTS | HGMMA | BAR.SYNC | instructions |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.configs:
        compiled = compile_config(*CONFIGS[name], lse=not args.no_lse)
        with tempfile.TemporaryDirectory() as tmp:
            cubin = os.path.join(tmp, "k.cubin")
            Path(cubin).write_bytes(compiled.asm["cubin"])
            usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout
            sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True).stdout
        regs = re.search(r"REG:(\d+)", usage).group(1)
        stack = re.search(r"STACK:(\d+)", usage).group(1)
        ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+([A-Z0-9_]+)", sass, re.M)
        count = lambda op: sum(o == op for o in ops)  # noqa: E731
        print(f"| {name} | {regs} | {stack} | {count('LDL')} | {count('LDGSTS')} | {count('HGMMA')} | "
              f"{sass.count('BAR.SYNC')} | {len(ops)} |")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.sass").write_text(sass)
            (args.out / f"{name}.ttgir").write_text(compiled.asm["ttgir"])


if __name__ == "__main__":
    main()
