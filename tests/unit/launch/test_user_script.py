"""How launch runs a user's script (zerokit.launch.program, zerokit.launch.rank.user_script) and how the image's ssh
rewrites a launcher's remote command (zerokit.launch.remote_shell): pure functions, tables of cases."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.launch.command import Command
from zerokit.launch.config import target_argv
from zerokit.launch.job import read_job
from zerokit.launch.program import check_batch_size as check_job_batch
from zerokit.launch.program import check_commands
from zerokit.launch.rank.user_script import imported_roots, rank_variables
from zerokit.launch.remote_shell import SSH, remote_argv, split_ssh

PY = "/opt/venv/bin/python"
BOOT = (PY, "-m", "zerokit.launch.rank.user_script")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["--", "python", "run_clm.py", "--x"], (*BOOT, "run_clm.py", "--x")),
        (["--", "python3", "a/run.py"], (*BOOT, "a/run.py")),
        (["run_clm.py", "--deepspeed", "ds.json"], (*BOOT, "run_clm.py", "--deepspeed", "ds.json")),
        (["--", PY, "run.py"], (*BOOT, "run.py")),
        (["--", "python", "-u", "run.py"], ("python", "-u", "run.py")),  # interpreter options: as given
        (["--", "/other/python", "run.py"], ("/other/python", "run.py")),  # another interpreter: as given
        (["--", "hostname"], ("hostname",)),
        (["train", "--config", "zero3"], (PY, "-m", "zerokit", "train", "--config", "zero3")),
    ],
)
def test_python_scripts_run_through_the_bootstrap(command, expected):
    assert target_argv(command, PY) == expected


def check_batch_size(args: list[str], world_size: int) -> None:
    """The batch check of a script run with args, as launch reads its record."""
    check_job_batch(read_job((*BOOT, "run.py", *args), {}), world_size)


def write(tmp_path: Path, config: dict) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_a_fixed_batch_size_that_the_ranks_make_passes(tmp_path):
    path = write(tmp_path, {"train_batch_size": 8})
    check_batch_size(["--deepspeed", path, "--per_device_train_batch_size", "4"], 2)
    check_batch_size([f"--deepspeed={path}", "--per_device_train_batch_size=2", "--gradient_accumulation_steps=2"], 2)
    check_batch_size(["--deepspeed", write(tmp_path, {"train_batch_size": "auto"})], 3)


def test_a_fixed_batch_size_the_ranks_cannot_make_names_the_fix(tmp_path):
    path = write(tmp_path, {"train_batch_size": 8})
    with pytest.raises(UserError, match=r'= 4: set it to "auto", or start 2 ranks$'):
        check_batch_size(["--deepspeed", path, "--per_device_train_batch_size", "4"], 1)
    with pytest.raises(UserError, match="8 per rank x 1 accumulation step"):  # HF's default per device
        check_batch_size(["--deepspeed", path], 2)


def test_check_commands_reads_the_world_size_of_each_rank(tmp_path):
    path = write(tmp_path, {"train_batch_size": 8})
    argv = (sys.executable, "-m", "zerokit.launch.rank.user_script", "run.py", "--deepspeed", path)
    command = Command((*argv, "--per_device_train_batch_size", "4"), {"WORLD_SIZE": "4"})
    with pytest.raises(UserError, match="x 4 rank"):
        check_commands([command], read_job(command.argv, {}), {})


def test_imported_roots_finds_hf_anywhere_in_a_script():
    source = "import os\ndef main():\n    from transformers import Trainer\nimport deepspeed.comm as dist\n"
    assert imported_roots(source) == {"os", "transformers", "deepspeed"}


def test_rank_variables_come_from_openmpi_when_unset():
    environ = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "MASTER_ADDR": "10.0.0.1"}  # fmt: skip
    assert rank_variables(environ) == 2
    assert (environ["RANK"], environ["LOCAL_RANK"], environ["WORLD_SIZE"]) == ("1", "0", "2")


SIF_ENV = {"APPTAINER_CONTAINER": "/x/train.sif", "USER_PATH": "/opt/apptainer/bin:/usr/bin"}


def test_split_ssh_skips_options_and_their_values():
    assert split_ssh(["-2", "-x", "-l", "root", "-p22", "node2", "cd", "/w;", "cmd"]) == (
        ["-2", "-x", "-l", "root", "-p22"],
        "node2",
        ["cd", "/w;", "cmd"],
    )


@pytest.mark.parametrize("caller", ["pdsh", "pdsh.bin", "mpirun", "orted"])  # pdsh.bin: Debian's pdsh
def test_a_launchers_remote_command_reenters_the_image(caller: str):
    words = ["-lroot", "node2", "export A=1;", "cd /w;", PY, "-u", "-m", "deepspeed.launcher.launch"]
    assert remote_argv(words, SIF_ENV, caller) == [
        SSH, "-lroot", "node2",
        "env PATH=/opt/apptainer/bin:/usr/bin apptainer exec --nv /x/train.sif bash -c "
        f"'export A=1; cd /w; {PY} -u -m deepspeed.launcher.launch'",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("words", "environ", "caller"),
    [
        (["node1", "hostname", "-I"], SIF_ENV, "python3"),  # DeepSpeed's own check: not a launcher
        (["node2"], SIF_ENV, "pdsh"),  # a login
        (["node2", "cd /w && apptainer exec --nv /x/train.sif launch"], SIF_ENV, "pdsh"),  # zerokit's launch
        (["node2", "orted"], {}, "mpirun"),  # outside a container
    ],
)
def test_anything_else_is_the_systems_ssh_unchanged(words, environ, caller):
    assert remote_argv(words, environ, caller) == [SSH, *words]
