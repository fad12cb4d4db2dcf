"""Shared test helpers: run zerokit as a user would (a subprocess), in an isolated environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zerokit.cluster.shm_segments import PREFIX, SHM_DIR, orphaned_segments
from zerokit.foundations.process_tree import STACKS_ENV, stop_tree

REPO = Path(__file__).resolve().parents[1]


def isolated_env(root: Path) -> dict[str, str]:
    """Environment for a zerokit subprocess: private caches under root, so tests neither share nor pollute them."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(
        {
            "PYTHONPATH": str(REPO / "src"),
            "ZEROKIT_CACHE": str(root / "zerokit-cache"),
            "HF_HOME": str(root / "hf-home"),
            "TORCH_EXTENSIONS_DIR": str(root / "torch-extensions"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONWARNINGS": "ignore",
        }
    )
    return env


@pytest.fixture
def zk_env(tmp_path: Path) -> dict[str, str]:
    """isolated_env under the test's tmp_path (module-scoped fixtures call isolated_env themselves)."""
    return isolated_env(tmp_path)


def run_bounded(
    argv: list[str], *, timeout: float, input: str | None = None, **popen_kwargs
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv, capture_output=True, text=True, timeout=...), except that a timeout ends the command's
    whole tree of processes (torchrun's, launch's and DeepSpeed's ranks outlive their parent otherwise, orphaned
    and running after the test), and the Python ones' stacks are printed, for pytest's report of the failure."""
    env = {**popen_kwargs.pop("env", os.environ), **STACKS_ENV}
    stdin = subprocess.PIPE if input is not None else None
    with subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, **popen_kwargs,
    ) as process:  # fmt: skip
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_tree(process.pid, dump_stacks=True)
            stdout, stderr = process.communicate()
            print(f"{argv} timed out after {timeout} s; its output and stacks:\n{stdout[-5000:]}\n{stderr[-30000:]}",
                  file=sys.stderr)  # fmt: skip
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr) from None
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def run_zerokit(args: list[str], env: dict[str, str], timeout: float = 600, cwd: Path | None = None):
    """`python -m zerokit ARGS`; returns the CompletedProcess with text output."""
    return run_bounded([sys.executable, "-m", "zerokit", *args], env=env, cwd=cwd or REPO, timeout=timeout)


def logged_losses(output: Path) -> list[float]:
    """The training losses the Trainer logged, in step order (from output's trainer_state.json)."""
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry]


def default_stop_signals() -> None:
    """In the child before exec: the stop signals at their default disposition.

    launch keeps a signal it inherited as ignored (nohup's contract, tested by the nohup case), so a
    test of how launch handles a signal must not inherit the disposition of whatever started the suite
    (a CI runner or `nohup` ignores SIGHUP; a shell's background job ignores SIGINT).
    """
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def deepspeed_segments() -> set[Path]:
    return set(SHM_DIR.glob(f"{PREFIX}_*"))


@pytest.fixture(scope="session")
def segments_at_start() -> set[Path]:
    return deepspeed_segments()


@pytest.fixture(autouse=True)
def no_shared_memory_left_behind(segments_at_start: set[Path]):
    """Every run the suite starts removes DeepSpeed's all-reduce segments from /dev/shm (zerokit.cluster.shm_segments):
    a test (or a fixture it uses) that leaves one fails, and what it left is removed. A run that is still ending
    (a job cancelled in its stop grace) gets 20 s. A segment that a process still maps after that is a run of
    another pytest's (.ci/run runs two parts of the suite side by side), not one left behind."""
    yield
    deadline = time.monotonic() + 20
    while (left := deepspeed_segments() - segments_at_start) and time.monotonic() < deadline:
        time.sleep(0.5)
    left &= set(orphaned_segments())
    if left:
        for segment in left:
            segment.unlink(missing_ok=True)
        pytest.fail(f"{len(left)} DeepSpeed all-reduce segment(s) left in /dev/shm: {sorted(s.name for s in left)}")


# What .ci/run builds before these can run: the image (tests/image, tests/runtimes), train.sif (every test whose
# fixtures reach `sif`, tests/apptainer) and the registry. Marked here, from where a test lives and what it uses,
# so that CI runs the rest (`-m "not container"`) while it builds them, then these (`-m container`).
CONTAINER_FOLDERS = ("image", "apptainer", "runtimes")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(item.fspath).relative_to(REPO / "tests").parts[0]
        if folder in CONTAINER_FOLDERS or "sif" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.container)
