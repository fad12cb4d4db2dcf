"""`zerokit ops-gate STACK`: the image build's gate on DeepSpeed's prebuilt ops (zerokit.image.ops_gate)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from zerokit.image.ops_gate import check_ops, record_build
from zerokit.image.stack import load_stack


def main(argv: list[str]) -> int:
    """`zerokit ops-gate STACK`: exit 1 unless every op of the stack is prebuilt and loads; record the build."""
    if len(argv) != 1:
        print("usage: zerokit ops-gate STACK", file=sys.stderr)
        return 2
    stack = load_stack(argv[0])
    # The stack's accelerator, not the one DeepSpeed would guess: on a build machine without a GPU
    # it guesses CPU, whose builders would JIT-compile the CUDA wheel's host ops instead of loading them.
    os.environ["DS_ACCELERATOR"] = stack.accelerator
    statuses = check_ops(stack.ds_ops)
    for status in statuses:
        print(f"{'ok  ' if status.ok else 'FAIL'} {status.name}: {status.detail}")
    failed = [s.name for s in statuses if not s.ok]
    if failed:
        print(f"error: DeepSpeed ops not usable: {', '.join(failed)} (see above)", file=sys.stderr)
        return 1
    print(f"ops-gate: {record_build(stack, Path(sys.prefix))}")
    return 0
