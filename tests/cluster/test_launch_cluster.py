"""`launch` and the job scripts on a real 2-node cluster (network namespaces, Slurm, OpenMPI, sshd), and a dead
node under `launch --max-restarts` on the 3-node one.

Real runs of the embedded default with ZeRO-3 on CPU, in the host environment (CONTAINER=none):
the job scripts exactly as a user submits them, but for the GPU request, which these CPU-only
nodes cannot grant (the tests drop that one line, as a user of a CPU partition would).

The matrix of job scripts and launchers runs once, in train.sif (test_apptainer_cluster.py: per-rank and
per-node sbatch, host mpirun, qsub, pdsh and mpirun from inside, a killed node, 2 nodes against 1); here
only what the host environment adds: a job script with CONTAINER=none, pdsh from the dev checkout, bench.
The helpers here serve both files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.netcluster import Cluster, kill_node, start_again
from tests.conftest import logged_losses
from zerokit.outputs.checkpoints import newest_complete_checkpoint

REPO = Path(__file__).resolve().parents[2]
STEPS = 30


def node_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The host environment a user of the dev checkout has on every node, with private caches."""
    return {
        "PATH": f"{REPO / 'entrypoints'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "ZEROKIT_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO / "src"),
        "ZEROKIT_CACHE": str(tmp / "zerokit-cache"),
        "HF_HOME": str(tmp / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "TORCH_EXTENSIONS_DIR": str(tmp / "torch-extensions"),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
        **extra,
    }


def train_args(output: Path, *more: str) -> str:
    return f"--config zero3 --output-dir {output} --max_steps {STEPS} --logging_steps 10 " + " ".join(more)


def assert_trained(output: Path) -> None:
    logged = logged_losses(output)
    assert len(logged) == STEPS // 10
    assert logged[-1] < 0.8 * logged[0], logged
    assert (output / "model.safetensors").is_file()


def ranks_seen(log: str) -> dict[int, str]:
    """rank -> host, from launch's one line per rank."""
    return {int(r): host for r, host in re.findall(r"launch: rank (\d+) of \d+ on (\S+)", log)}


def cpu_job_script(script: str, tmp: Path) -> Path:
    """The job script with its GPU request removed (these nodes have none)."""
    text = (REPO / script).read_text()
    path = tmp / Path(script).name
    path.write_text("\n".join(line for line in text.splitlines() if "--gpus-per-node" not in line) + "\n")
    return path


def sbatch(cluster: Cluster, script: Path, tmp: Path, env: dict[str, str], *flags: str) -> tuple[int, str]:
    """Submit the job script and wait for it; (its exit code, what sbatch and the job wrote)."""
    argv = ["sbatch", "--parsable", "--nodes=2", "--cpus-per-task=1", "--time=10", *flags, str(script)]
    result = cluster.run("node1", argv, env=env, cwd=tmp, timeout=60)
    code = finished_job_code(cluster, result.stdout.strip().split(";")[0]) if result.returncode == 0 else 1
    logs = "".join(p.read_text() for p in sorted(tmp.glob("zerokit-*.*")))
    return code, result.stdout + result.stderr + logs


# A job's states once it has ended (squeue's long names).
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}  # fmt: skip


def finished_job_code(cluster: Cluster, job_id: str, timeout: float = 600) -> int:
    """Wait for a batch job to end, polling twice a second, and give its exit code as `sbatch --wait` would
    (128 + N for a signal). Not `sbatch --wait` itself: it polls at 2, 8 and then 32 s, so a job of 15 s
    took 42 (Slurm's sbatch, with the default MinJobAge)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = cluster.run("node1", ["scontrol", "-o", "show", "job", job_id]).stdout
        fields = dict(word.split("=", 1) for word in shown.split() if "=" in word)
        if fields.get("JobState") in ENDED:
            status, signum = (int(part) for part in fields["ExitCode"].split(":"))
            return 128 + signum if signum else status
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still running after {timeout:g} s")


def test_sbatch_two_nodes_one_rank_each(cluster: Cluster):
    """scripts/slurm/train.sbatch on 2 nodes x 1 rank, in the host environment."""
    tmp = cluster.shared_dir / "sbatch"
    tmp.mkdir()
    output = tmp / "run"
    env = node_env(tmp, CONTAINER="none", TRAIN_ARGS=train_args(output))
    code, log = sbatch(cluster, cpu_job_script("scripts/slurm/train.sbatch", tmp), tmp, env, "--ntasks-per-node=1")
    assert code == 0, log[-4000:]
    assert ranks_seen(log) == {0: "node1", 1: "node2"}
    assert "interface eth0" in log
    assert_trained(output)


def test_pdsh_from_the_head_node_over_real_sshd(cluster: Cluster):
    tmp = cluster.shared_dir / "pdsh"
    tmp.mkdir()
    (tmp / "hosts").write_text("node1\nnode2\n")
    output = tmp / "run"
    argv = ["launch", "--launcher", "pdsh", "--hostfile", str(tmp / "hosts"), "--nproc-per-node", "1",
            "--", "train", *train_args(output).split()]  # fmt: skip
    result = cluster.run("node1", argv, env=node_env(tmp), cwd=tmp, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert set(ranks_seen(log).items()) == {(0, "node1"), (1, "node2")}
    assert (tmp / ".deepspeed_env").read_text() == "OMP_NUM_THREADS=1\n"
    assert_trained(output)


# Rank 0 writes the run's final model; the last rank, on the other node, waits for it and then aborts as issue
# 32's ranks did at exit (SIGABRT); the others end well. argv: --output_dir FOLDER
ABORT_AFTER_THE_MODEL = """
import os, pathlib, sys, time
model = pathlib.Path(sys.argv[2], "model.safetensors")
if os.environ["RANK"] == "0":
    model.parent.mkdir(exist_ok=True)
    model.write_bytes(b"weights")
elif int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
    while not model.exists():
        time.sleep(0.05)
    os.abort()
"""


@pytest.mark.parametrize(("nproc", "rank"), [("1", "rank 1 (local 0)"), ("2", "rank 3 (local 1)")])
def test_a_remote_rank_aborting_after_the_model_is_written_is_named_with_its_node(
    cluster: Cluster, nproc: str, rank: str
):
    """pdsh from node1, 1 or 2 ranks per node: node2's launch names its rank, node2 and SIGABRT, and says the
    outputs are complete; the job ends with the rank's status, 134, through ssh and pdsh (the scheduler marks it
    failed; the user reads why, and whether to trust it). A node's only rank is supervised too: before, launch
    became it (exec) and pdsh showed only `ssh exited with exit code 255`."""
    tmp = cluster.shared_dir / f"remote-abort-{nproc}"
    tmp.mkdir()
    (tmp / "hosts").write_text("node1\nnode2\n")
    (tmp / "job.py").write_text(ABORT_AFTER_THE_MODEL)
    output = tmp / "out"
    argv = ["launch", "--launcher", "pdsh", "--hostfile", str(tmp / "hosts"), "--nproc-per-node", nproc,
            "--", sys.executable, str(tmp / "job.py"), "--output_dir", str(output)]  # fmt: skip
    result = cluster.run("node1", argv, env=node_env(tmp), cwd=tmp, timeout=300)
    log = result.stdout + result.stderr
    assert result.returncode == 128 + signal.SIGABRT, log[-4000:]
    expected = (
        f"launch: {rank} on node2 was killed by SIGABRT (exit 134); "
        f"the final model is in {output}: the run's outputs are complete"
    )
    assert expected in log, log[-4000:]


def test_bench_over_one_and_two_nodes(cluster: Cluster):
    """bench's node counts go through launch over pdsh: the 2-node run's ranks are on both nodes."""
    tmp = cluster.shared_dir / "bench"
    tmp.mkdir()
    (tmp / "hosts").write_text("node1\nnode2\n")
    argv = ["bench", "--output", str(tmp / "report"), "--nodes", "1,2", "--ranks", "1", "--hostfile",
            str(tmp / "hosts"), "--steps", "8", "--warmup-steps", "2", "--eval-steps", "4",
            "--skip", "overhead", "--skip", "configs", "--skip", "data", "--skip", "checkpoint"]  # fmt: skip
    result = cluster.run("node1", argv, env=node_env(tmp), cwd=tmp, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    figures = json.loads((tmp / "report" / "results.json").read_text())
    assert [(r["ranks"], r["nodes"]) for r in figures["scaling"]] == [(1, 1), (2, 2)]
    assert [r["hosts"] for r in figures["runs"]] == [["node1"], ["node1", "node2"]]
    assert "| 2 | 2 |" in (tmp / "report" / "report.md").read_text()


def assert_killed_node_ends_the_job(cluster: Cluster, container: list[str], tmp: Path, env: dict[str, str]) -> None:
    """srun with 2 ranks, each `launch train` in CONTAINER: SIGKILL node2's rank after the second checkpoint;
    srun ends non-zero within 2 minutes and the last checkpoint is whole."""
    output = tmp / "run"
    args = train_args(output, "--save_strategy steps --save_steps 5").replace(
        f"--max_steps {STEPS}", "--max_steps 2000"
    )
    srun = ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=1",
            *container, "launch", "train", *args.split()]  # fmt: skip
    job = cluster.popen("node1", srun, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (output / "checkpoint-10" / "trainer_state.json").is_file():
            assert job.poll() is None, "the job ended before its second checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 5 minutes"
            time.sleep(1)
        killed_at = time.monotonic()
        victims = node_train_pids(cluster.node("node2").netns)
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        code = job.wait(timeout=120)
        assert time.monotonic() - killed_at < 120
        assert code != 0
    finally:
        if job.poll() is None:
            job.kill()
    log = job.stdout.read().decode(errors="replace")
    checkpoints = sorted(output.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    last = checkpoints[-1]
    state = json.loads((last / "trainer_state.json").read_text())
    assert state["global_step"] == int(last.name.split("-")[1]), log[-3000:]
    assert (last / "model.safetensors").is_file() or any(last.glob("global_step*"))


def node_train_pids(netns: str) -> list[int]:
    """PIDs of the training ranks running in a node's network namespace."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    found = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"zerokit" in cmdline and b"train" in cmdline and b"launch" not in cmdline:
            found.append(int(pid))
    return found


def test_a_dead_node_is_left_out_and_the_job_resumes_from_the_copies_in_the_others_memory(cluster3: Cluster):
    """pdsh from node1 to 3 nodes x 1 rank, --max-restarts 1, a checkpoint on disk every 4 steps and one in the
    nodes' memory at every step between (--memory-checkpoints 1: each node's copy in its own memory and in the next
    node's, in the node's private /tmp). Once 6 steps are logged, every process of node3 is SIGKILLed, its sshd too
    (a node that died; kill_node keeps what the cluster needs), and its memory wiped. The head stops the other
    nodes' ranks, finds node3 silent, and starts the job again on node1 and node2, where train rebuilds the newest
    step of which they hold every node's copy (node3's own from node1's memory), newer than the disk's
    checkpoint-4, and resumes it on 2 ranks where 3 wrote it (the same global batch of 24, 4 per rank x 3
    accumulation steps instead of 2). The run finishes; its record names the fault, the copies and the steps lost
    (at most 2: K, and the step whose copy was still travelling); its losses after the fault are those of an
    uninterrupted 2-node run resumed from the same checkpoint (within 1e-4 relative).

    The same fault resumed from the disk's checkpoint: under mpirun and Slurm below. A node cut off instead (its
    link down), with a spare taking its place: test_node_partition.py."""
    tmp = cluster3.shared_dir / f"node-fault-{time.monotonic_ns()}"
    tmp.mkdir()
    argv, output = head_restart_argv(tmp, "zero2")
    argv[argv.index("--save_steps") + 1], argv[argv.index("--max_steps") + 1] = "4", "12"
    at = argv.index("--save_strategy")
    argv[at:at] = ["--memory-checkpoints", "1", "--memory-checkpoint-dir", "/tmp/zerokit-memory"]
    dies, repair = dead_node(cluster3, "node3")

    def dies_with_its_memory() -> None:
        dies()
        cluster3.run("node3", ["rm", "-rf", "/tmp/zerokit-memory"], check=True)

    code, lines, failed_at = through_a_fault(
        cluster3, argv, tmp, output, dies_with_its_memory, repair, ready=lambda lines: steps_logged(lines) >= 6
    )
    log = "".join(line for _, line in lines)
    assert code == 0, log[-6000:]
    assert "launch: pdsh to node3 exited with 255; " in log
    restart = ": a machine fault; node3 left out; restart 1 of 1 on 2 node(s) (node1,node2), from the newest whole"
    assert restart in log, log[-6000:]
    assert (output / "model.safetensors").is_file()
    record = json.loads((output / "zerokit-run.json").read_text())
    (event,) = record["restarts"]
    assert (event["nodes"], event["left_out"], event["hosts"], event["restart"]) == (
        ["node3"], ["node3"], ["node1", "node2"], 1)  # fmt: skip
    recovery = record["memory_recovery"]
    resumed = int(recovery["checkpoint"].rsplit("-", 1)[1])
    assert recovery["source"] == "memory" and recovery["disk_checkpoint"] == "checkpoint-4" and resumed > 4, recovery
    assert any("/node1/peer/" in folder for folder in recovery["copies_from"]["node1"]), recovery  # node3's copy
    assert 0 <= event["steps_lost"] <= 2, event
    restarted = next(t for t, line in lines if "a machine fault; node3 left out" in line)
    step = next(t for t, line in lines if t > restarted and "'loss'" in line)
    print(
        f"node killed at step {event['reached_step']}: resumed from the memory copy of step {resumed} "
        f"({event['steps_lost']} step(s) lost; the disk's was step 4); restart {restarted - failed_at:.1f} s, "
        f"first step {step - failed_at:.1f} s after the kill"
    )

    # The curve after the fault is that of an uninterrupted 2-node run resumed from the same checkpoint.
    (tmp / "two").write_text("node1\nnode2\n")
    reference = tmp / "reference"
    at = argv.index("--max-restarts")
    again = [*argv[:4], str(tmp / "two"), *argv[5:at], *argv[at + 2 :]]
    again[again.index("auto")] = str(output / recovery["checkpoint"])
    again[again.index(str(output))] = str(reference)
    again[-1] = "3"  # 2 ranks x 3 accumulation steps: the global batch of 24, as the restart kept it
    result = cluster3.run("node1", again, env=node_env(tmp), cwd=tmp, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    after, uninterrupted = (
        {e["step"]: e["loss"] for e in json.loads((folder / "trainer_state.json").read_text())["log_history"]
         if "loss" in e and e["step"] > resumed}
        for folder in (output, reference)
    )  # fmt: skip
    assert after.keys() == uninterrupted.keys() == set(range(resumed + 1, 13))
    worst = max(abs(after[k] - uninterrupted[k]) / abs(uninterrupted[k]) for k in after)
    assert worst <= 1e-4, (after, uninterrupted)
    print(f"steps {resumed + 1}-12 after the fault against an uninterrupted 2-node run: {worst:.1e} relative at most")


def test_a_dead_node_of_an_mpirun_job_is_left_out_and_the_job_restarts_on_the_others(cluster3: Cluster):
    """`launch --launcher mpirun` from node1 to 3 nodes x 1 rank, ZeRO-3, --max-restarts 1: one mpirun starts every
    rank, so launch sees no node's end of its own; once the first checkpoint is whole, every process of node3 is
    SIGKILLed (its orted and sshd too). mpirun ends the job when it loses node3's daemon, launch probes the hosts,
    leaves node3 out and starts mpirun again on node1 and node2 from that checkpoint; the run finishes."""
    tmp = cluster3.shared_dir / f"mpirun-node-fault-{time.monotonic_ns()}"
    tmp.mkdir()
    argv, output = head_restart_argv(tmp, "zero3", launcher="mpirun")
    code, lines, failed_at = through_a_fault(cluster3, argv, tmp, output, *dead_node(cluster3, "node3"))
    log = "".join(line for _, line in lines)
    assert code == 0, log[-6000:]
    restart = ": a machine fault; node3 left out; restart 1 of 1 on 2 node(s) (node1,node2), from "
    assert restart in log and "node3 does not answer (" in log, log[-6000:]
    assert (output / "model.safetensors").is_file()
    (event,) = json.loads((output / "zerokit-run.json").read_text())["restarts"]
    assert (event["left_out"], event["hosts"], event["restart"]) == (["node3"], ["node1", "node2"], 1)
    restarted = next(t for t, line in lines if restart in line)
    step = next(t for t, line in lines if t > restarted and "'loss'" in line)
    print(f"mpirun, node killed: restart {restarted - failed_at:.1f} s, first step {step - failed_at:.1f} s after")


def through_a_fault(
    cluster: Cluster,
    argv: list[str],
    tmp: Path,
    output: Path,
    fault: Callable[[], object],
    repair: Callable[[], object],
    ready: Callable[[list[tuple[float, str]]], bool] | None = None,
) -> tuple[int, list[tuple[float, str]], float]:
    """Run launch's argv on node1; once output holds a whole checkpoint (or ready(the lines so far) holds),
    fault(), then wait for the job's end; repair() after, for the tests after. The job's exit code, its timed
    lines, and when the fault came."""
    job = cluster.popen("node1", argv, env=node_env(tmp), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines, reader = timed_lines(job)
    fault_at = None
    try:
        if ready is None:
            wait_for_checkpoint(output, lines, job)
        else:
            wait_until(lambda: ready(lines), lines, job)
        fault_at = time.monotonic()
        fault()
        code = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
        if fault_at is not None:
            repair()
    reader.join(timeout=30)
    return code, lines, fault_at


def dead_node(cluster: Cluster, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """The fault of a node that dies (every process of it SIGKILLed, its sshd too, its training rank among them),
    and its repair (sshd started again)."""

    def dies() -> None:
        killed = kill_node(cluster, name)
        assert any("zerokit train" in line for line in killed), killed

    return dies, lambda: start_again(cluster, name)


def timed_lines(job: subprocess.Popen) -> tuple[list[tuple[float, str]], threading.Thread]:
    """The job's output lines as they come, each with the time it came, and the thread that reads them."""
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in job.stdout:
            lines.append((time.monotonic(), line.decode(errors="replace")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def test_a_dead_node_of_a_slurm_job_is_left_out_and_the_job_restarts_on_the_others(cluster3: Cluster):
    """scripts/slurm/train-restart.sbatch (sbatch --no-kill) on 3 nodes x 1 rank: launch --launcher srun
    --max-restarts 1 in the batch step, one step per node. Once the first checkpoint is whole, every process of
    node3 is SIGKILLed, its slurmd and sshd too (a node that died). The other nodes' ranks fail in their
    collectives; launch stops their steps, finds node3 out (its step of `true` gets no answer: slurmctld would
    say NOT_RESPONDING only after SlurmdTimeout, 300 s), and starts a step on node1 and on node2 from that
    checkpoint (2 ranks where 3 wrote it: 4 per rank x 3 accumulation steps keeps the global batch of 24); the job
    ends 0, and the run's record names the fault. node3's daemons start again once the restart is under way, as a
    node back from a reboot, for the job's end and the tests after."""
    tmp = cluster3.shared_dir / f"slurm-node-fault-{time.monotonic_ns()}"
    tmp.mkdir()
    job_id, output, lines, stop_reading = submit_restart_job(cluster3, tmp, "zero3")
    failed_at = restarted = None
    try:
        wait_for_checkpoint(output, lines)
        failed_at = time.monotonic()
        killed = kill_node(cluster3, "node3", ("sshd", "slurmd"))
        assert any("zerokit train" in line for line in killed), killed
        restarted = line_seen(lines, "a machine fault; node3 left out", failed_at + 120)
    except BaseException:
        cluster3.run("node1", ["scancel", job_id])
        raise
    finally:
        if failed_at is not None:  # node3 back, for the job's end and the tests after
            start_again(cluster3, "node3", ("slurmd", "sshd"))
    code = finished_job_code(cluster3, job_id, timeout=300)
    stop_reading()
    log = "".join(line for _, line in lines)
    assert code == 0 and restarted is not None, log[-6000:]
    assert ": a machine fault; node3 left out; restart 1 of 1 on 2 node(s) (node1,node2), from " in log, log[-6000:]
    assert "node3 does not answer (" in log
    assert (output / "model.safetensors").is_file()
    (event,) = json.loads((output / "zerokit-run.json").read_text())["restarts"]
    assert (event["left_out"], event["hosts"], event["restart"]) == (["node3"], ["node1", "node2"], 1)
    assert "node3" in event["nodes"]
    step = next(t for t, line in lines if t > restarted and "'loss'" in line)
    print(f"node killed: restart {restarted - failed_at:.1f} s, first step {step - failed_at:.1f} s after the kill")
    print("".join(line for _, line in lines if line.startswith("launch: ") and "rank " not in line[:14]))


def submit_restart_job(cluster: Cluster, tmp: Path, zero: str, **env: str) -> tuple[str, Path, list, Callable]:
    """scripts/slurm/train-restart.sbatch on 3 nodes x 1 rank, --max-restarts 1 and a 5 s stop grace: the
    embedded model under DeepSpeed config `zero`, 4 per rank x 2 accumulation steps (a global batch of 24), a
    checkpoint every 2 of 8 steps. The job's id, its output folder, its lines as they come (timed_file_lines) and
    the function that stops reading them."""
    output = tmp / "run"
    args = (f"--config {zero} --output-dir {output} --resume auto --save_strategy steps --save_steps 2 --max_steps 8 "
            "--logging_steps 1 --per_device_train_batch_size 4 --gradient_accumulation_steps 2")  # fmt: skip
    env = node_env(tmp, CONTAINER="none", TRAIN_ARGS=args, RANKS_PER_NODE="1", MAX_RESTARTS="1",
                   ZEROKIT_STOP_GRACE="5", **env)  # fmt: skip
    script = cpu_job_script("scripts/slurm/train-restart.sbatch", tmp)
    submitted = cluster.run("node1", ["sbatch", "--parsable", "--cpus-per-task=1", "--time=10", str(script)],
                            env=env, cwd=tmp)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    lines, stop_reading = timed_file_lines(tmp, "zerokit-*.*")
    return submitted.stdout.strip().split(";")[0], output, lines, stop_reading


def head_restart_argv(tmp: Path, zero: str, *flags: str, launcher: str = "pdsh") -> tuple[list[str], Path]:
    """launch's command line for launcher (pdsh, mpirun) from node1 to the hosts node1..node3 (written to
    tmp/hosts), 1 rank each, --max-restarts 1, a 5 s stop grace, and launch's flags; train as submit_restart_job's.
    And the output folder."""
    (tmp / "hosts").write_text("node1\nnode2\nnode3\n")
    output = tmp / "run"
    argv = ["launch", "--launcher", launcher, "--hostfile", str(tmp / "hosts"), "--nproc-per-node", "1",
            "--max-restarts", "1", "--stop-grace", "5", *flags, "--", "train", "--config", zero, "--output-dir",
            str(output), "--resume", "auto", "--save_strategy", "steps", "--save_steps", "2", "--max_steps", "8",
            "--logging_steps", "1", "--per_device_train_batch_size", "4",
            "--gradient_accumulation_steps", "2"]  # fmt: skip
    return argv, output


def wait_for_checkpoint(
    output: Path, lines: list[tuple[float, str]], job: subprocess.Popen | None = None, seconds: float = 300
) -> None:
    """Until output holds a whole checkpoint; the job's lines shown if it ends first or none comes in time."""
    deadline = time.monotonic() + seconds
    while newest_complete_checkpoint(output) is None:
        assert job is None or job.poll() is None, "".join(line for _, line in lines)[-4000:]
        assert time.monotonic() < deadline, "no checkpoint in time:\n" + "".join(t for _, t in lines)
        time.sleep(0.2)


def wait_until(
    condition: Callable[[], bool], lines: list[tuple[float, str]], job: subprocess.Popen, seconds: float = 300
) -> None:
    """Until condition() holds; the job's lines shown if it ends first or the condition does not come in time."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert job.poll() is None, "".join(line for _, line in lines)[-4000:]
        assert time.monotonic() < deadline, "not in time:\n" + "".join(t for _, t in lines)
        time.sleep(0.1)


def steps_logged(lines: list[tuple[float, str]]) -> int:
    """How many training steps the job's lines have logged (`--logging_steps 1`: one loss line each)."""
    return sum("'loss'" in line for _, line in list(lines))


def line_seen(lines: list[tuple[float, str]], text: str, deadline: float) -> float | None:
    """When a line holding text came, waiting for it until deadline (time.monotonic's); None if it did not."""
    while True:
        seen = next((t for t, line in lines if text in line), None)
        if seen is not None or time.monotonic() >= deadline:
            return seen
        time.sleep(0.2)


def timed_file_lines(folder: Path, pattern: str) -> tuple[list[tuple[float, str]], Callable[[], None]]:
    """The lines of the files matching pattern in folder (a batch job's output) as they are written, each with the
    time it was seen (polled every 0.1 s), and the function that stops reading them."""
    lines: list[tuple[float, str]] = []
    done = threading.Event()

    def read() -> None:
        offsets: dict[Path, int] = {}
        while not done.wait(0.1):
            for path in sorted(folder.glob(pattern)):
                with path.open("rb") as file:
                    file.seek(offsets.get(path, 0))
                    text = file.read()
                whole = text[: text.rfind(b"\n") + 1]
                offsets[path] = offsets.get(path, 0) + len(whole)
                lines.extend((time.monotonic(), line) for line in whole.decode(errors="replace").splitlines(True))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def stop() -> None:
        done.set()
        reader.join(timeout=5)

    return lines, stop
