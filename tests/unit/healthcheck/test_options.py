"""`launch --check` flags: one-line errors for bad values, and the plan that runs the check on every rank."""

from __future__ import annotations

import pytest

from zerokit.cluster import detect_environment
from zerokit.foundations.errors import UserError
from zerokit.healthcheck.command import CheckConfig, parse_options, rank_argv
from zerokit.healthcheck.rendezvous import missing_line
from zerokit.launch.config import parse
from zerokit.launch.plan import forwarded_env, plan

PY = "/venv/bin/python"
SLURM_RANK_1 = {"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_NODEID": "1",
                "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[07-08]",
                "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_TASKS_PER_NODE": "1(x2)",
                "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}  # fmt: skip


def make_plan(argv: list[str], environ: dict[str, str]):
    config = parse(argv, environ, PY)
    return plan(config, detect_environment(environ), environ, 8, lambda address: "ib0", lambda: 41000)


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (
            ["--check", "--check-timeout", "soon", "train"],
            {},
            r"--check-timeout \(ZEROKIT_CHECK_TIMEOUT\)='soon' is not",
        ),
        (["--check-only"], {"ZEROKIT_CHECK_TIMEOUT": "0"}, r"ZEROKIT_CHECK_TIMEOUT\)='0' is not a number of seconds"),
        (
            [
                "--check-only",
                "--check-slow-factor",
                "1",
            ],
            {},
            r"--check-slow-factor .*='1' is not a factor above 1",
        ),
        (["--check-only", "train"], {}, "--check-only runs no command: drop the command, or use --check"),
        (["--check"], {}, "launch needs a command"),
    ],
)
def test_bad_check_flags_are_one_line_errors_naming_the_fix(argv, environ, message):
    with pytest.raises(UserError, match=message):
        parse(argv, environ, PY)


def test_check_only_under_srun_runs_the_check_as_the_rank_with_the_jobs_hosts():
    p = make_plan(["--check-only", "--check-timeout", "20", "--json"], SLURM_RANK_1)
    assert p.mode == "exec"
    assert p.commands[0].argv == (PY, "-m", "zerokit.healthcheck", "--timeout", "20", "--slow-factor", "4", "--json",
                                  "--hosts", "gpu07,gpu08")  # fmt: skip
    assert p.commands[0].env["RANK"] == "1"


def test_check_then_train_on_each_local_rank():
    p = make_plan(["--check", "--nproc-per-node", "2", "train", "--config", "zero3"], {})
    assert p.mode == "spawn"
    assert {c.argv for c in p.commands} == {(PY, "-m", "zerokit.healthcheck", "--timeout", "60", "--slow-factor", "4",
                                             "--", PY, "-m", "zerokit", "train", "--config", "zero3")}  # fmt: skip


def test_a_head_node_launch_wraps_the_target_once_and_keeps_the_check_variables_home(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1\nn2\n")
    environ = {"ZEROKIT_CHECK": "1", "ZEROKIT_CHECK_TIMEOUT": "9", "ZEROKIT_CACHE": "/c"}
    p = make_plan(["--launcher", "pdsh", "--hostfile", str(hostfile), "--", "hostname"], environ)
    line = p.commands[0].argv[-1]
    assert line.count("zerokit.healthcheck") == 1
    assert "--timeout 9 --slow-factor 4 --hosts n1,n2 -- hostname" in line
    assert forwarded_env(environ) == {"ZEROKIT_CACHE": "/c"}
    mpirun = make_plan(["--launcher", "mpirun", "--hostfile", str(hostfile), "--check-only"], {})
    assert mpirun.commands[0].argv[-9:] == (PY, "-m", "zerokit.healthcheck", "--timeout", "60", "--slow-factor", "4",
                                            "--hosts", "n1,n2")  # fmt: skip


def test_the_rank_programs_options_round_trip():
    options = CheckConfig(timeout=12.5, slow_factor=3, as_json=True, hosts=("a", "b"), target=("train", "--x"))
    assert parse_options(rank_argv(PY, options)[3:]) == options


def test_missing_ranks_are_named_by_the_host_the_plan_put_them_on():
    line = missing_line([2, 3, 5], ("n1", "n2", "n3"), per_node=2, timeout=30)
    assert line.startswith("3 rank(s) never arrived within 30 s: n2 (rank 2, 3); n3 (rank 5); fix: ")
    assert "an unknown host (rank 1)" in missing_line([1], (), per_node=1, timeout=5)
