"""`demo`: the main job on the embedded default, end to end.

2 CPU ranks (or GPUs), ZeRO-3, a few hundred steps into runs/demo/, then the eval perplexity
(before and after training) and a generated sample, also saved as samples.txt.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.sources.corpus import SAMPLE_PROMPTS


@dataclass(frozen=True)
class DemoFlags:
    """`demo`'s flags, each defined once here (zerokit.foundations.flags)."""

    output: Path = flag("--output", type=Path, default=Path("runs/demo"), help=None)
    nproc_per_node: int = flag("--nproc-per-node", type=int, default=2, help=None)
    config: str = flag("--config", default="zero3", help=None)
    max_steps: int = flag("--max-steps", type=int, default=300, help=None)
    overwrite: bool = flag(
        "--overwrite", default=False, action="store_true", help="replace the results of an earlier demo"
    )


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(DemoFlags, environ, prog="demo", description=__doc__)


def train_argv(args: DemoFlags) -> list[str]:
    argv = [
        "--config",
        args.config,
        "--output-dir",
        str(args.output),
        "--nproc-per-node",
        str(args.nproc_per_node),
        "--max_steps",
        str(args.max_steps),
        "--eval_on_start",
        "true",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        str(max(1, args.max_steps // 3)),
    ]
    return argv + (["--overwrite"] if args.overwrite else [])


def first_eval_perplexity(output: Path) -> float:
    """Perplexity of the untrained model: the eval logged at step 0 (--eval_on_start)."""
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return math.exp(next(entry["eval_loss"] for entry in history if "eval_loss" in entry))


def run_train(argv: list[str]) -> int:
    """`zerokit train ARGV` as a child process, its exit code: train with --nproc-per-node becomes launch (an
    exec), so it cannot run inside this process, which still has samples to write. The terminal's Ctrl-C reaches
    the child too (one foreground group), which answers it; a SIGTERM or SIGHUP sent to this process alone is
    passed on to it, so that launch stops its ranks rather than being left behind."""
    child = subprocess.Popen([sys.executable, "-m", "zerokit", "train", *argv])

    def pass_on(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code  # a signal's end as a shell says it (Popen's -N)


def main(argv: list[str]) -> int:
    args = from_namespace(DemoFlags, build_parser().parse_args(argv))
    code = run_train(train_argv(args))
    if code != 0:
        return code
    from zerokit.generate import generate

    results = json.loads((args.output / "eval_results.json").read_text())
    before = first_eval_perplexity(args.output)
    samples = generate(str(args.output), SAMPLE_PROMPTS)
    (args.output / "samples.txt").write_text("\n".join(samples) + "\n")
    print(f"\neval perplexity: {results['perplexity']:.2f} (untrained: {before:.2f})")
    print("samples (also in " + str(args.output / "samples.txt") + "):")
    for sample in samples:
        print(f"  {sample}")
    return 0
