"""The pasa-npu command line: accuracy (the main job), beta (Table 3 for any block size) and scan
(per-layer FP16 overflow verdicts for a transformers model).

Bad arguments end the command with one line on stderr, "pasa-npu: error: ...", and exit status 2 (as
argparse's own errors do), not with a traceback. Arguments are checked before any work starts: before
a model is loaded and before an output folder is created.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from . import __version__, accuracy, beta
from .precision import ALLOCATIONS, DEFAULT_PRECISION, PRECISIONS


def _accuracy(args) -> int:
    twice = sorted({p for p in args.precisions if args.precisions.count(p) > 1})
    if twice:
        raise ValueError(f"--precisions names {', '.join(twice)} more than once: name each allocation once")
    if args.hard_only and args.hard_seeds == 0:
        raise ValueError("--hard-seeds 0 with --hard-only leaves nothing to run: give --hard-seeds a positive count "
                         "or drop --hard-only")
    _check_out(args.out)
    if not args.no_plots:
        _require("matplotlib", "the accuracy study's plot", "--no-plots")
    if not args.no_progress:
        _require("tqdm", "the accuracy study's progress bar", "--no-progress")
    print(f"pasa-npu accuracy: {'full' if args.full else 'quick'} grid, shape (B, N, S, D) = {tuple(args.shape)}, "
          f"seed {args.seed}, allocations {', '.join(args.precisions)}, KV block {args.block_kv}, "
          f"query tile {args.block_q}"
          + (f", hard cases at D = {args.head_dim}" if args.head_dim else ""))
    t0 = time.time()
    rows = accuracy.run_study(full=args.full, shape=tuple(args.shape), seed=args.seed, precisions=args.precisions,
                              hard_seeds=args.hard_seeds, jobs=args.jobs or os.cpu_count(),
                              progress=not args.no_progress, paper=not args.hard_only, head_dim=args.head_dim,
                              block_kv=args.block_kv, block_q=args.block_q)
    summary = accuracy.write_outputs(rows, Path(args.out), full=args.full, shape=tuple(args.shape), seed=args.seed,
                                     precisions=args.precisions, plots=not args.no_plots, head_dim=args.head_dim,
                                     block_kv=args.block_kv, block_q=args.block_q, command=args.command)
    print("\nRelative RMSE against float64 (eq. 19); 'NaN x%' = the output overflowed:")
    print(accuracy.format_results(rows, args.precisions))
    if summary["table4"]:
        print("\nTable 4: fp16_fp32 NaN % (paper vs ours over independent draws; 'within noise' = the paper's "
              "value within 3 std of our draws, or every draw 100 % where the paper says 100 %):")
        print(accuracy.format_table4(summary["table4"]))
    if summary["claim"]:
        print("\nThe paper's claim, for cases without overflow: 'PASA has a smaller RMSE than Partially "
              "low-precision FA(FA16-FP32) for all cases with non-zero mean values':")
        for p, c in summary["claim"].items():
            print(f"  {p}: holds on {c['holds']} of {c['cases']} cases")
    if "fp32" in args.precisions:
        print("\nRMSE / fp32's RMSE on the same draw (median, worst over draws without failure); failures = NaN/Inf "
              "or zero rows; lse ok = draws with |lse error| <= max(10 x fp32's, 1e-3):")
        print(accuracy.format_summary(summary["summary"]))
        if any(r["dist"] in accuracy.HARD_DISTRIBUTIONS for r in rows):
            print("\nThe hard sweep by case (RMSE / fp32's RMSE, median / worst over the draws; failures; lse ok):")
            print(accuracy.format_classes(summary["summary"]))
    written = ["results.csv", "results.json"] + (["table4.csv"] if summary["table4"] else []) + \
        ([] if args.no_plots else ["accuracy.png"])
    print(f"\nwrote {', '.join(written)} in {Path(args.out)} in {time.time() - t0:.0f} s")
    return 0


def _beta(args) -> int:
    scale = None if args.head_dim is None else 1.0 / math.sqrt(args.head_dim)
    m = "M = I - beta/n*J (the paper's Table 3)" if scale is None else \
        f"M = (I - beta/n*J)*scale, scale = 1/sqrt({args.head_dim}) (the M the kernels build)"
    rows = beta.invariance_table(args.block_kv, args.dtype, scale)  # checks n and the scale first
    print(f"Optimal beta, n = {args.block_kv}, {args.dtype}, {m}")
    print(beta.format_invariance_table(rows))
    return 0


def _scan(args) -> int:
    # Every check that needs no model comes first: loading one takes seconds to minutes.
    if not Path(args.model_dir).is_dir():
        raise FileNotFoundError(f"model_dir: no such directory: {args.model_dir}")
    config = Path(args.model_dir) / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"model_dir: {args.model_dir} holds no config.json: pass a local transformers model "
                                "folder (its config.json, weights and tokenizer files)")
    try:
        json.loads(config.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"model_dir: {config} is not a JSON file ({e}): pass a local transformers model folder") \
            from None
    if not args.prompt.strip():
        raise ValueError("--prompt must be non-empty text")
    if args.beta is not None and not 0.0 <= args.beta < 1.0:  # also rejects nan
        raise ValueError(f"--beta must be in [0, 1), got {args.beta}")
    _check_out(args.out)
    _require("transformers", "pasa-npu scan", None, "pip install transformers")
    _require("matplotlib", "pasa-npu scan's heat map", None)
    importlib.import_module("pasa_npu.integrations.transformers")  # refuses transformers versions it does not take

    # transformers is needed only here: import it with the scanner, not with the CLI.
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from . import scan

    try:
        AutoConfig.from_pretrained(args.model_dir)  # the config's own faults, before the tokenizer's
    except (ValueError, OSError, KeyError) as e:
        raise ValueError(f"model_dir: transformers cannot read {config}: {e}") from None
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModel.from_pretrained(args.model_dir, dtype=getattr(torch, args.dtype)).eval()
    inputs = tok(args.prompt, return_tensors="pt")
    print(f"pasa-npu scan: {args.model_dir} ({type(model).__name__}, {args.dtype}), {inputs['input_ids'].shape[1]} "
          f"tokens, block {args.block_kv}, beta {'default' if args.beta is None else args.beta}")
    rows, caps = scan.scan_model(model, dict(inputs), beta=args.beta, block_kv=args.block_kv)
    print(scan.format_table(rows))
    meta = dict(model_dir=str(args.model_dir), prompt=args.prompt, tokens=int(inputs["input_ids"].shape[1]),
                dtype=args.dtype, block_kv=args.block_kv, beta=args.beta, commit=accuracy.source_commit(),
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if args.verify:
        ran = scan.verify(caps, beta=args.beta, block_kv=args.block_kv)
        agree = sum(ran[(r.layer, r.head, p)] == (r.overflow[p] == "nan") for r in rows for p in scan.VERDICT_PRECISIONS)
        print(f"verify: running each allocation on the captured Q/K/V gives a non-finite output exactly where the "
              f"verdict says NaN in {agree} of {len(ran)} (layer, head, allocation) cases")
        meta["verify_agree"], meta["verify_cases"] = agree, len(ran)
    # Created only now, so that a run that fails leaves no empty folder behind.
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scan.write_json(rows, out / "scan.json", meta)
    scan.write_heatmap(rows, out / "scan.png", title=f"{Path(args.model_dir).name}: {args.prompt[:60]}")
    print(f"wrote {out}/scan.json, scan.png")
    return 0


def _check_out(out: str) -> None:
    """--out names a folder that exists or can be made, and written in (checked before any work, by making the
    folders it lacks and a file in it, all removed again: permission bits do not tell, for root or on read-only
    or virtual file systems)."""
    if not out.strip():
        raise ValueError("--out must name a folder, got an empty string")
    path = Path(out).absolute()
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"--out must be a folder (existing or not), got the file {out}")
    made = []
    try:
        for folder in reversed([p for p in (path, *path.parents) if not p.exists()]):
            folder.mkdir()
            made.append(folder)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as e:
        raise PermissionError(f"--out: cannot write in {out}: {e.strerror or e}") from None
    finally:
        for folder in reversed(made):
            folder.rmdir()


def _require(module: str, what: str, skip: str | None, install: str = "pip install 'pasa-npu[study]'") -> None:
    """An optional dependency of a command, checked before any work: a one-line error saying how to get it."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"{what} needs {module}, which is not installed: {install}"
                                  f"{'' if skip is None else f', or pass {skip}'}")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


#: The longest KV block the accuracy study and the scanner take: PASA's shifting matrix (n x n) stores beta/n*scale
#: in FP16, which keeps enough bits for every scale down to 2**-8 (head dims up to 65536) only up to n = 1024.
MAX_BLOCK_KV = 1024


def _block_kv(text: str) -> int:
    value = _positive(text)
    if value > MAX_BLOCK_KV:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BLOCK_KV} (the shifting matrix's entries beta/n*scale "
                                         f"leave FP16's range for longer blocks), got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line, as the commands' own are (not usage, then the error)."""

    def error(self, message: str):
        self.exit(2, f"pasa-npu: error: {message} (see '{self.prog} --help')\n")


def main(argv=None) -> int:
    parser = _Parser(
        prog="pasa-npu", description="PASA (online pseudo-average shifting attention): overflow-safe FP16 "
        "attention. Run 'pasa-npu COMMAND --help' for the arguments of a command.")
    parser.add_argument("--version", action="version", version=f"pasa-npu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    acc = sub.add_parser("accuracy", help="every allocation on the golden model: the paper's random benchmark "
                         "(Figs 9-10, Table 4) and the hard sweep",
                         description="Every allocation on the golden model against float64 attention: the paper's "
                         "random benchmark (Figs 9-10, Table 4) and the hard sweep of the inputs PASA exists for (Q/K "
                         "resonance, drifting key levels, attention sinks, score spreads to +-60000, 131072 keys, "
                         "large scales, D 64-256, GQA, masks, decode). Reports each allocation's relative RMSE, its "
                         "ratio to fp32's on the same draw, failures (NaN, Inf, zero rows) and lse errors.")
    acc.add_argument("--full", action="store_true", help="the full grid (Table 4 over 10 draws) instead of the quick one")
    acc.add_argument("--out", default="accuracy_out", help="output folder (default: accuracy_out)")
    acc.add_argument("--seed", type=_non_negative, default=0, help="base seed, a non-negative integer (default 0)")
    acc.add_argument("--shape", type=_positive, nargs=4, metavar=("B", "N", "S", "D"), default=list(accuracy.PAPER_SHAPE),
                     help="Q/K/V shape (default: the paper's 1 16 1280 128)")
    acc.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS),
                     help="allocations to compare (default: all): "
                     + "; ".join(f"{a.name}, {a.description}" for a in ALLOCATIONS.values()))
    acc.add_argument("--hard-seeds", type=_non_negative, default=None,
                     help="draws of each hard case (default 3, 5 with --full; 0 skips the hard sweep)")
    acc.add_argument("--hard-only", action="store_true", help="the hard sweep alone (no paper sweeps, no Table 4)")
    acc.add_argument("--head-dim", type=_positive, default=None,
                     help="the hard cases' head dim D in place of their own (default: each case's own)")
    acc.add_argument("--block-kv", type=_block_kv, default=128,
                     help="the KV block of every allocation's loop, fp32's included (default 128)")
    acc.add_argument("--block-q", type=_positive, default=128,
                     help="the query tile of every allocation, which decides the KV blocks a tile visits under a "
                     "band (default 128; the AscendC kernel's tile depends on D, docs/npu.md)")
    acc.add_argument("--jobs", type=_positive, default=None, help="worker processes (default: one per core)")
    acc.add_argument("--no-plots", action="store_true", help="skip the PNG")
    acc.add_argument("--no-progress", action="store_true", help="no progress bar")
    acc.set_defaults(func=_accuracy)

    bt = sub.add_parser("beta", help="the optimal beta and the invariances (the paper's Table 3)",
                        description="The optimal beta of the shifting matrix M = (I - beta/n*J)*scale with its "
                        "entries rounded to FP16 or BF16, and the invariances, in the layout of the paper's Table 3.")
    bt.add_argument("--block-kv", type=_positive, default=128, help="block length n (default 128)")
    bt.add_argument("--dtype", choices=beta.DTYPES, default="float16", help="type M is rounded to (default float16)")
    bt.add_argument("--head-dim", type=_positive, default=None,
                    help="model the scaled M of the kernels with scale 1/sqrt(D) (default: unscaled, as Table 3)")
    bt.set_defaults(func=_beta)

    sc = sub.add_parser("scan", help="per layer and head: would FP16 attention overflow on this model and prompt?",
                        description="Run a prompt through a local transformers model and report, per layer and head, "
                        f"the largest attention scores and whether each allocation (the default {DEFAULT_PRECISION} included) "
                        "would overflow in FP16; writes scan.json and scan.png.")
    sc.add_argument("model_dir", help="a local transformers model folder (config, weights, tokenizer)")
    sc.add_argument("--prompt", required=True, help="the text to run through the model")
    sc.add_argument("--out", default="scan_out", help="output folder for scan.json and scan.png (default: scan_out)")
    sc.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                    help="the model's dtype while scanning (default float32)")
    sc.add_argument("--block-kv", type=_block_kv, default=128,
                    help=f"PASA's KV block length n, 1 to {MAX_BLOCK_KV} (default 128)")
    sc.add_argument("--beta", type=float, default=None, help="PASA's beta (default: the optimum for n and the scale)")
    sc.add_argument("--verify", action="store_true",
                    help="also run each allocation on the captured Q/K/V and check the verdicts against it")
    sc.set_defaults(func=_scan)

    args = parser.parse_args(argv)
    # What the results record as their command: the call a reader types, whichever path or script ran it.
    args.command = shlex.join(["python", "-m", "pasa_npu", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, ImportError) as e:
        # Bad input (an argument, a missing or unreadable file): say what is wrong, in one line.
        print("pasa-npu: error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
