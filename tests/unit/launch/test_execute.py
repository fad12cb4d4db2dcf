"""Running local ranks: each gets its variables, and a failing rank brings the others down with its exit code.

Signals sent to launch itself are tested in tests/faults/test_launch_faults.py (a subprocess).
"""

from __future__ import annotations

import signal
import socket
import sys
import time

from zerokit.launch.command import Command
from zerokit.launch.config import parse
from zerokit.launch.execute import execute
from zerokit.launch.job import read_job
from zerokit.launch.plan import plan
from zerokit.launch.watch.supervisor import describe_exit, execute_commands, exit_code


def test_every_rank_runs_with_its_variables(tmp_path):
    script = "import os, pathlib; e = os.environ; pathlib.Path(e['OUT'], e['RANK']).write_text(e['WORLD_SIZE'])"
    plan = [
        Command((sys.executable, "-c", script), {"RANK": str(r), "WORLD_SIZE": "3", "OUT": str(tmp_path)})
        for r in range(3)
    ]
    assert execute_commands(plan) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"0": "3", "1": "3", "2": "3"}


def test_a_failing_rank_stops_the_others_and_its_code_is_returned():
    hang = Command((sys.executable, "-c", "import time; time.sleep(60)"), {})
    fail = Command((sys.executable, "-c", "import sys; sys.exit(7)"), {})
    started = time.monotonic()
    assert execute_commands([hang, fail]) == 7
    assert time.monotonic() - started < 30


def test_a_rank_killed_by_a_signal_is_named_and_gives_128_plus_n(capsys):
    hang = Command((sys.executable, "-c", "import time; time.sleep(60)"), {"RANK": "0", "LOCAL_RANK": "0"})
    killed = Command(("sh", "-c", "kill -KILL $$"), {"RANK": "1", "LOCAL_RANK": "1"})
    assert execute_commands([hang, killed], stop_grace=5) == 128 + signal.SIGKILL
    assert "launch: rank 1 (local 1) was killed by SIGKILL (exit 137); stopping the other ranks\n" in (
        capsys.readouterr().err
    )


def test_a_rank_aborting_after_the_model_is_written_is_named_with_its_node_and_complete_outputs(tmp_path, capsys):
    """Issue 32's failure: the job's work is done, then a rank dies by a signal at exit."""
    out = tmp_path / "out"
    write = (
        f"import pathlib; pathlib.Path({str(out)!r}).mkdir(); pathlib.Path({str(out)!r}, 'model.safetensors').touch()"
    )
    saves = Command((sys.executable, "-c", write, "--output_dir", str(out)), {"RANK": "0", "LOCAL_RANK": "0"})
    aborts = Command(
        ("sh", "-c", "sleep 1; kill -ABRT $$", "sh", "--output_dir", str(out)), {"RANK": "1", "LOCAL_RANK": "1"}
    )
    assert execute_commands([saves, aborts]) == 128 + signal.SIGABRT
    assert (
        f"launch: rank 1 (local 1) on {socket.gethostname()} was killed by SIGABRT (exit 134); "
        f"the final model is in {out}: the run's outputs are complete\n"
    ) in capsys.readouterr().err


def test_the_one_rank_of_a_node_aborting_is_named_by_launch_with_its_status(tmp_path, capsys):
    """A pdsh launch with one rank per node: the node's launch plans, starts and watches that rank, so a
    signal that kills it is named (not only pdsh's `ssh exited with exit code 255`)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.safetensors").touch()
    argv = ["--hosts", "node1,node2", "--node-host", "node2", "--nproc-per-node", "1", "--master-addr", "node1",
            "--ifname", "lo", "--stop-grace", "5", "--stall-timeout", "0",
            "--", "sh", "-c", "kill -ABRT $$", "sh", "--output_dir", str(out)]  # fmt: skip
    config = parse(argv, {}, sys.executable)
    replan = lambda config, environ: plan(config, None, environ, 2, lambda _: "lo", lambda: 41000)  # noqa: E731
    the_plan = replan(config, {})
    assert the_plan.mode == "spawn"  # "exec" would replace this test's process with the rank
    assert execute(the_plan, read_job(config.target, {}), config, replan) == 128 + signal.SIGABRT
    err = capsys.readouterr().err
    assert err.endswith(
        f"launch: rank 1 (local 0) on {socket.gethostname()} was killed by SIGABRT (exit 134); "
        f"the final model is in {out}: the run's outputs are complete\n"
    )
    assert err.count("SIGABRT") == 1, err  # one line, not a second one as the rank ends


def test_a_head_launcher_whose_status_says_a_rank_was_killed_adds_the_outputs_state(tmp_path, capsys):
    """`launch --launcher mpirun`: mpirun names the rank, node and signal and exits 128+N; launch adds whether
    the outputs are complete, in one line instead of `mpirun exited with 134`."""
    out = tmp_path / "out"
    mpirun = Command(("sh", "-c", "exit 134", "mpirun", "--", "python", "x.py", "--output_dir", str(out)), {})
    assert execute_commands([mpirun]) == 134
    assert capsys.readouterr().err == (
        "launch: sh exited with 134: a rank it started was killed by SIGABRT (its report above names the rank and "
        f"node); no final model in {out}: the run's outputs are incomplete\n"
    )


def test_exit_statuses_read_as_a_shell_reads_them():
    assert [exit_code(code) for code in (0, 3, -signal.SIGTERM, -signal.SIGSEGV)] == [0, 3, 143, 139]
    assert describe_exit(4) == "exited with 4"
    assert describe_exit(-signal.SIGINT) == "was killed by SIGINT (exit 130)"


def test_a_program_the_kernel_will_not_run_is_named_without_a_traceback(tmp_path, capsys):
    """What cli's check cannot see: an executable file in no format the kernel runs (no #! line)."""
    program = tmp_path / "job"
    program.write_text("echo hi\n")
    program.chmod(0o755)
    started = Command((sys.executable, "-c", "import time; time.sleep(60)"), {"RANK": "0", "LOCAL_RANK": "0"})
    assert execute_commands([started, Command((str(program),), {"RANK": "1", "LOCAL_RANK": "1"})]) == 126
    assert capsys.readouterr().err == f"launch: cannot start rank 1 (local 1): {program}: Exec format error\n"
