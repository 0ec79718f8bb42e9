"""Context-parallel fused_attention: time per call on one device and on a torchrun group, the
scaling efficiency, and the accuracy of the distributed result against the one-device result.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 scripts/bench_distributed.py --out results/
    torchrun --standalone --nproc-per-node 2 scripts/bench_distributed.py --device cpu \\
        --seq-lens 512,1024 --heads 4 --head-dim 16 --out /tmp/bench   # the gloo path, on a CPU

For each global sequence length S (B, N, S, D; FP16 inputs, --inputs random or biased Q, K ~
N(30, 1)), each mode (ring, ulysses; ring_ulysses on 4+ ranks) and masking (full, causal with
zigzag shards for the ring): the time of one call on rank 0 alone (the whole sequence) and on the
group (each rank its shard; the slowest rank's time), both from CUDA events after warm-up calls;
speedup T1 / TW and efficiency T1 / (W · TW); and the distributed output gathered on rank 0
against the one-device output (max |Δ|, relative L2, bit-identical or not). Lengths go up until one
does not fit: the memory a run needs is estimated before it starts and the ranks agree to stop, so
that no rank is left waiting in a collective for one that ran out of memory.

Writes results.json (environment, arguments, rows) and results.md (the table) into --out.
NVLink multicast (NVLS) is switched off (NCCL_NVLS_ENABLE=0, set before the group starts).
Nothing is downloaded; the group rendezvous is torchrun's (--standalone: on this host).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from pasa_npu import DEFAULT_PRECISION, fused_attention
from pasa_npu.accuracy import source_commit
from pasa_npu.distributed import (ring_attention, ring_ulysses_attention, shard_sequence, ulysses_attention,
                                  unshard_sequence)

CAUSAL_MASK_SIDE = 2048
MODES = ("ring", "ulysses", "ring_ulysses")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="folder for results.json and results.md")
    p.add_argument("--seq-lens", default="32768,65536,131072,262144",
                   help="global sequence lengths, comma-separated, ascending (default %(default)s)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--modes", default="ring,ulysses", help=f"comma-separated, of {MODES} (default %(default)s)")
    p.add_argument("--masks", default="full,causal", help="comma-separated, of full, causal (default %(default)s)")
    p.add_argument("--precision", default=DEFAULT_PRECISION, help="fused_attention's precision (default %(default)s)")
    p.add_argument("--fa-backend", default=None, help="fused_attention's backend (default: by device)")
    p.add_argument("--inputs", choices=("random", "biased"), default="random",
                   help="random: Q, K, V ~ N(0, 1); biased: Q, K ~ N(30, 1), V ~ N(0, 1)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--timeout-s", type=int, default=900, help="process group timeout (default %(default)s)")
    p.add_argument("--memory-fraction", type=float, default=0.85,
                   help="run a size only if its estimated memory is below this fraction of the free memory")
    a = p.parse_args(argv)
    try:
        a.seq_lens = [int(x) for x in a.seq_lens.split(",")]
    except ValueError:
        p.error(f"--seq-lens must be comma-separated integers, got {a.seq_lens!r}")
    a.modes = a.modes.split(",")
    a.masks = a.masks.split(",")
    if bad := [m for m in a.modes if m not in MODES]:
        p.error(f"--modes: unknown {bad}; choose from {MODES}")
    if bad := [m for m in a.masks if m not in ("full", "causal")]:
        p.error(f"--masks: unknown {bad}; choose from full, causal")
    if min(a.batch, a.heads, a.head_dim, a.iters) < 1 or a.warmup < 0:
        p.error("--batch, --heads, --head-dim and --iters must be >= 1, --warmup >= 0")
    return a


def setup(args):
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if k not in os.environ]
    if missing:
        sys.exit(f"bench_distributed: {missing} not set: run under torchrun, e.g. "
                 "torchrun --standalone --nproc-per-node 2 scripts/bench_distributed.py --out DIR")
    # NVLink multicast (NVLS) stays off on the machines this runs on, whatever the environment says.
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    local = int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("bench_distributed: --device cuda but torch sees no CUDA device (use --device cpu for gloo)")
        if local >= torch.cuda.device_count():
            sys.exit(f"bench_distributed: local rank {local} but only {torch.cuda.device_count()} CUDA devices")
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s),
                            **({"device_id": device} if backend == "nccl" else {}))
    if dist.get_world_size() < 2:
        sys.exit("bench_distributed: needs at least 2 ranks (--nproc-per-node 2)")
    return device


def agree(flag: bool, device) -> bool:
    """True on every rank only if ``flag`` is True on every rank."""
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def free_bytes(device) -> float:
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else math.inf


def tensor_bytes(b, n, s, d) -> int:
    return 2 * b * n * s * d  # FP16


def estimate(b, n, s_local, d, world, parts) -> int:
    """Bytes a call needs, generously: Q, K, V and the output, the K/V send and receive buffers,
    ``parts`` partial outputs and the FP32 merge's temporaries (3 copies of them at 2x width)."""
    one = tensor_bytes(b, n, s_local, d)
    return (4 + 4 + parts + 6 * parts) * one + 64 * 2**20


def timed(fn, args, device):
    """Seconds per call: warm-up calls, then CUDA events (or a wall clock on the CPU) around
    ``args.iters`` calls."""
    for _ in range(args.warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            out = fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3 / args.iters, out
    t0 = time.perf_counter()
    for _ in range(args.iters):
        out = fn()
    return (time.perf_counter() - t0) / args.iters, out


def make_inputs(args, s, device):
    g = torch.Generator(device=device).manual_seed(1234 + s)
    shape = (args.batch, s, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, generator=g, device=device, dtype=torch.float16) for _ in range(3))
    if args.inputs == "biased":
        q, k = q + 30, k + 30
    return q, k, v


def run_size(args, s, device, rank, world, groups):
    """Every mode and mask at one length; returns rows (rank 0) or None when it did not fit."""
    b, n, d = args.batch, args.heads, args.head_dim
    kw = dict(input_layout="BSND", num_heads=n, scale=d ** -0.5, softmax_lse_flag=True, precision=args.precision,
              **({"backend": args.fa_backend} if args.fa_backend else {}))
    causal_kw = dict(sparse_mode=2, atten_mask=torch.ones(CAUSAL_MASK_SIDE, CAUSAL_MASK_SIDE, dtype=torch.bool,
                                                          device=device).triu_(1))
    fits_group = estimate(b, n, s // world, d, world, world) + 3 * tensor_bytes(b, n, s, d)
    if not agree(fits_group < args.memory_fraction * free_bytes(device), device):
        return None
    q, k, v = make_inputs(args, s, device)
    fits_single = estimate(b, n, s, d, 1, 1) < args.memory_fraction * free_bytes(device)
    single_ok = agree(fits_single or rank != 0, device)
    rows = []
    for mask in args.masks:
        extra = causal_kw if mask == "causal" else {}
        t1 = ref = None
        dist.barrier()
        if rank == 0 and single_ok:
            t1, (ref, _) = timed(lambda: fused_attention(q, k, v, **kw, **extra), args, device)
        dist.barrier()
        for mode in args.modes:
            if mode == "ring_ulysses" and (world < 4 or world % 2):
                continue
            row = measure(args, mode, mask, s, q, k, v, kw, extra, device, rank, world, groups, t1, ref)
            if rank == 0:
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def measure(args, mode, mask, s, q, k, v, kw, extra, device, rank, world, groups, t1, ref):
    causal = mask == "causal"
    if mode == "ring":
        sh = dict(ring_rank=rank, ring_size=world, zigzag=causal)
        fn = lambda *t: ring_attention(*t, **kw, **extra)  # noqa: E731
    elif mode == "ulysses":
        sh = dict(ulysses_rank=rank, ulysses_size=world)
        fn = lambda *t: ulysses_attention(*t, **kw, **extra)  # noqa: E731
    else:
        ring_g, uly_g, u = groups
        sh = dict(ring_rank=rank // u, ring_size=world // u, ulysses_rank=rank % u, ulysses_size=u, zigzag=causal)
        fn = lambda *t: ring_ulysses_attention(*t, ring_group=ring_g, ulysses_group=uly_g, **kw, **extra)  # noqa: E731
    local = [shard_sequence(x, seq_dim=1, **sh).contiguous() for x in (q, k, v)]
    dist.barrier()
    tw, (out, _) = timed(lambda: fn(*local), args, device)
    slowest = torch.tensor([tw], device=device, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    tw = slowest.item()
    # The whole output on rank 0, in sequence order, against the one-device output.
    shards = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(shards, out.contiguous())
    row = dict(seq_len=s, mode=mode, mask=mask, world=world, ms_1=None if t1 is None else t1 * 1e3,
               ms_w=tw * 1e3)
    if rank == 0:
        sizes = {k2: v2 for k2, v2 in sh.items() if k2.endswith("size") or k2 == "zigzag"}
        full = unshard_sequence(shards, seq_dim=1, **sizes)
        if t1 is not None:
            diff = (full.float() - ref.float())
            row.update(speedup=t1 / tw, efficiency=t1 / (world * tw), max_abs_diff=diff.abs().max().item(),
                       rel_l2=(diff.norm() / ref.float().norm()).item(), bit_identical=bool(torch.equal(full, ref)))
    return row


def mesh_groups(world, device):
    """(ring group, Ulysses group, Ulysses size) of a (world / 2, 2) mesh; None below 4 ranks."""
    if world < 4 or world % 2:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("ring", "ulysses"))
    return mesh.get_group("ring"), mesh.get_group("ulysses"), 2


def environment(args, device, world):
    env = dict(torch=torch.__version__, python=platform.python_version(), world=world, device=str(device.type),
               NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE"), host=platform.node(),
               time_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), commit=source_commit())
    if device.type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
    return env


def markdown(rows, env, args) -> str:
    head = (f"# Context-parallel fused_attention\n\n{env.get('gpu', env['device'])} x {env['world']}, torch "
            f"{env['torch']}, B={args.batch} N={args.heads} D={args.head_dim}, precision {args.precision}, "
            f"{args.inputs} inputs, {args.iters} timed calls after {args.warmup} warm-up, NCCL_NVLS_ENABLE="
            f"{env['NCCL_NVLS_ENABLE']}\n\n")
    lines = ["| S | mode | mask | 1 device (ms) | group (ms) | speedup | efficiency | max abs diff vs 1 device "
             "| rel L2 | bit-identical |", "|---|---|---|---|---|---|---|---|---|---|"]

    def f(x, fmt):
        return "—" if x is None else format(x, fmt)

    for r in rows:
        lines.append(f"| {r['seq_len']} | {r['mode']} | {r['mask']} | {f(r['ms_1'], '.2f')} | {r['ms_w']:.2f} | "
                     f"{f(r.get('speedup'), '.2f')} | {f(r.get('efficiency'), '.2f')} | "
                     f"{f(r.get('max_abs_diff'), '.3g')} | {f(r.get('rel_l2'), '.3g')} | "
                     f"{'—' if 'bit_identical' not in r else ('yes' if r['bit_identical'] else 'no')} |")
    return head + "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    device = setup(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    if "ulysses" in args.modes and args.heads % world:
        sys.exit(f"bench_distributed: --heads ({args.heads}) must be a multiple of the world size {world} for ulysses")
    groups = mesh_groups(world, device) if "ring_ulysses" in args.modes else None
    env = environment(args, device, world)
    rows, stopped = [], None
    for s in sorted(args.seq_lens):
        if s % (2 * world):
            stopped = f"S={s} is not a multiple of 2 x world size = {2 * world}"
            break
        got = run_size(args, s, device, rank, world, groups)
        if got is None:
            stopped = f"S={s} does not fit in {args.memory_fraction:.0%} of the free memory"
            break
        rows.extend(got or [])
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        arguments = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        record = dict(environment=env, arguments=arguments, rows=rows, stopped=stopped)
        (args.out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
        note = f"\nStopped: {stopped}.\n" if stopped else ""
        (args.out / "results.md").write_text(markdown(rows, env, args) + note)
        print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}"
              + (f"; stopped: {stopped}" if stopped else ""))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
