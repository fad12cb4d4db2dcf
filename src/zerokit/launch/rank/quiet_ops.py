"""DeepSpeed's `DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully`, kept out of a rank's output.

DeepSpeed prints it on every rank whenever its CPU communication backend loads the shared-memory op, prebuilt
or not (deepspeed/comm/torch.py, `build_shm_op`). On a kit whose point is that nothing compiles at run time, a
newcomer reads it as a JIT compile on each start. The op's load is still known: `loaded_ops()` names it, for
the run record; `--verbose` keeps the line.
"""

from __future__ import annotations

import contextlib
import io
import sys

SHM_OP = "deepspeed_shm_comm"
_loaded: list[str] = []


def quiet_op_loads(verbose: bool) -> None:
    """Wrap DeepSpeed's build_shm_op so that its line is said only when verbose; call before deepspeed.comm starts."""
    import importlib

    # By module name: `import deepspeed.comm.torch as m` gives torch itself (deepspeed.comm's attribute `torch`).
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    build = ds_torch.build_shm_op
    if getattr(build, "__zerokit_quiet__", False):
        return

    def build_quietly():  # the same op, its print captured
        with contextlib.redirect_stdout(io.StringIO()) as said:
            module = build()
        if verbose:
            sys.stdout.write(said.getvalue())
        if module is not None:
            _loaded.append(SHM_OP)
        return module

    build_quietly.__zerokit_quiet__ = True  # type: ignore[attr-defined]
    ds_torch.build_shm_op = build_quietly


def loaded_ops() -> list[str]:
    """The ops DeepSpeed loaded in this process while quiet_op_loads watched, each once."""
    return sorted(set(_loaded))
