"""Run a user's Python script as one rank of a job: the process group first, then the script, as `python
script.py` would run it (`sys.argv`, `__main__`, `__file__`, the script's folder first on `sys.path`).

`launch ... -- python script.py ARGS` (or `launch ... script.py ARGS`) runs each rank as
`python -m zerokit.launch.rank.user_script script.py ARGS`; DeepSpeed's launcher can run it too:
`deepspeed --hostfile H --module zerokit.launch.rank.user_script script.py ARGS`.

Why, measured with transformers 5.23, accelerate 1.15, DeepSpeed 0.19.8 on CPU ranks:
- without `--use_cpu` (a script written for GPU nodes), accelerate sets up no process group on a
  host without an accelerator: each rank trains alone (world size 1) into the same output folder;
- with `--use_cpu`, accelerate starts torch.distributed but not DeepSpeed's communication, and ZeRO-3's
  `zero.Init` reads the world size (1) before it starts it: "train_batch_size is not equal to
  micro_batch_per_gpu * gradient_acc_step * world_size 8 != 4 * 1 * 1".
accelerate's CPU path needs `cpu=True`, and ACCELERATE_USE_CPU cannot give it: TrainingArguments and
accelerate's AcceleratorState both read it, and with it AcceleratorState drops DeepSpeed (the Trainer then
wraps a ZeRO-3 model in DDP: "'weight' must be 2-D"). So before the script, on a rank of several:
CPU ranks get TrainingArguments(use_cpu=True) whatever the script says (on a host without an accelerator it
means nothing else: the device is the CPU either way, and the flag only makes accelerate's setup join the
job, as zerokit's train passes it); torch.distributed starts (gloo on CPU, nccl on GPU after selecting
LOCAL_RANK's device), then deepspeed.comm on top of it; and accelerate's own view of the job must hold all
the ranks, or the rank stops at once: never N lone trainings.

Only a script that imports transformers, accelerate or deepspeed is set up so; any other (a plain torch
script that calls init_process_group itself) runs as it is, with the rank's variables.

Under launch's stall watch (zerokit.launch.rank.progress) the rank first reports its progress: a script that
imports torch (or one of the above) has its torch.distributed collectives and start-up rendezvous watched,
an HF one its Trainer's steps; and it gives its stacks when launch asks.
"""

from __future__ import annotations

import ast
import functools
import os
import runpy
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from zerokit.cluster import detect_environment
from zerokit.cluster.shm_segments import release_own_segment
from zerokit.foundations.errors import OneLineError, UserError
from zerokit.foundations.process_end import end_process, exit_status
from zerokit.launch.rank import progress

HF_MODULES = ("transformers", "accelerate", "deepspeed")
USAGE = "usage: python -m zerokit.launch.rank.user_script SCRIPT.py [ARGS]"


def imported_roots(source: str) -> set[str]:
    """The top-level packages a script imports, anywhere in it."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def script_imports(script: Path) -> set[str]:
    try:
        return imported_roots(script.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return set()  # Python itself reports it, as `python script.py` would


def uses_hf(script: Path) -> bool:
    return bool(script_imports(script) & set(HF_MODULES))


def rank_variables(environ: MutableMapping[str, str]) -> int:
    """The world size, after filling RANK, WORLD_SIZE ... from an MPI launcher's variables where unset
    (DeepSpeed's `--launcher openmpi` starts ranks with OMPI_COMM_WORLD_* alone)."""
    if "RANK" not in environ:
        cluster = detect_environment(environ)
        if cluster is not None:
            for name, value in cluster.torch_env().items():
                environ.setdefault(name, value)
    return int(environ.get("WORLD_SIZE", "1") or "1")


def join_job(world_size: int, environ: MutableMapping[str, str]) -> str:
    """Start torch.distributed and deepspeed.comm for a rank of `world_size`; the backend used."""
    import torch
    import torch.distributed as dist

    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(environ.get("LOCAL_RANK", "0")))
        backend = "nccl"
    else:
        train_on_cpu()
        accelerate_on_cpu()
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    try:
        import deepspeed
    except ImportError:
        pass
    else:
        deepspeed.init_distributed(dist_backend=backend)
        if not on_gpu:  # every rank has mapped the others' all-reduce segment (zerokit.cluster.shm_segments)
            dist.barrier()
            release_own_segment()
    check_one_job(world_size, cpu=not on_gpu)
    return backend


def train_on_cpu() -> None:
    """Every TrainingArguments of this process gets use_cpu=True (see the module's docstring)."""
    try:
        from transformers import TrainingArguments
    except ImportError:
        return
    post_init = TrainingArguments.__post_init__

    @functools.wraps(post_init)
    def on_cpu(self) -> None:
        self.use_cpu = True
        post_init(self)

    TrainingArguments.__post_init__ = on_cpu


def accelerate_on_cpu() -> None:
    """A script's own Accelerator joins the job on CPU ranks, with DeepSpeed when the script asks for it.

    Without `cpu=True`, accelerate looks for an accelerator, finds none, and sets up no backend: the rank
    counts as a job of one, and DeepSpeed's batch check fails ("4 != 4 * 1 * 2"); with `cpu=True` it
    joins the job but drops DeepSpeed. So where accelerate finds no backend, the rank's is gloo
    (MULTI_CPU), and the rest of accelerate's setup, DeepSpeed's included, runs as on GPU ranks.
    """
    try:
        from accelerate.state import PartialState
        from accelerate.utils import DistributedType
    except ImportError:
        return
    prepare_backend = PartialState._prepare_backend

    @functools.wraps(prepare_backend)
    def gloo_when_none(self, cpu: bool = False, sagemaker_dp: bool = False, backend: str | None = None):
        found, distributed_type = prepare_backend(self, cpu, sagemaker_dp, backend)
        if found is None:
            return backend or "gloo", DistributedType.MULTI_CPU
        return found, distributed_type

    PartialState._prepare_backend = gloo_when_none


def check_one_job(world_size: int, cpu: bool) -> None:
    """Stop (UserError) unless torch.distributed and accelerate both see `world_size` ranks."""
    import torch.distributed as dist

    seen = {"torch.distributed": dist.get_world_size()}
    try:
        from accelerate import PartialState
    except ImportError:
        pass
    else:
        seen["accelerate"] = PartialState(cpu=cpu).num_processes
        PartialState._reset_state()  # TrainingArguments builds its own, from the same variables
    wrong = {name: size for name, size in seen.items() if size != world_size}
    if wrong:
        views = ", ".join(f"{name} sees {size}" for name, size in wrong.items())
        raise UserError(
            f"launch started {world_size} ranks, but {views}: each rank would train alone into the same "
            "output folder; unset the ACCELERATE_* variables that pick a device"
        )


def run(argv: Sequence[str], environ: MutableMapping[str, str] = os.environ) -> None:
    words = list(argv)
    # DeepSpeed's launcher with --module puts its --local_rank=N first; the script gets it, as without --module.
    local_rank = [words.pop(0)] if words and words[0].startswith("--local_rank=") else []
    if not words:
        raise UserError(USAGE)
    script, args = Path(words[0]), [*local_rank, *words[1:]]
    if not script.is_file():
        raise UserError(f"no such script: {script}: check the path (relative to {os.getcwd()})")
    world_size = rank_variables(environ)
    roots = script_imports(script)
    hf = bool(roots & set(HF_MODULES))
    progress.start(environ, collectives=world_size > 1 and bool(roots & {"torch", *HF_MODULES}), trainer_steps=hf)
    if world_size > 1 and hf:
        join_job(world_size, environ)
    sys.argv = [str(script), *args]
    sys.path[0] = str(script.resolve().parent)  # as `python script.py` has it
    runpy.run_path(str(script), run_name="__main__")


def main(argv: Sequence[str]) -> int:
    """The rank's exit status: the script's own (its sys.exit included), 2 for a usage error."""
    try:
        run(argv)
    except OneLineError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except SystemExit as stop:
        return exit_status(stop)
    return 0


if __name__ == "__main__":
    end_process(main(sys.argv[1:]))  # not sys.exit: see zerokit.foundations.process_end
