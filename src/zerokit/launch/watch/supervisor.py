"""Run the local ranks of a plan at once and supervise them, as torchrun's agent does on a node.

- Every rank starts in its own session, so its process group holds it and its children: when the
  job ends, each group is killed (SIGKILL), and nothing a rank started is left running. A
  terminal's Ctrl-C then reaches launch alone, which passes it on. A rank dies with launch
  (PR_SET_PDEATHSIG): a SIGKILL to launch leaves no rank training on unsupervised.
- A stop signal to launch (SIGTERM, SIGINT, SIGHUP, SIGQUIT) is passed on to every rank; a rank
  still running `stop_grace` seconds later is killed with its group. The grace lets a healthy
  `train` finish its step and checkpoint (it traps SIGTERM) and bounds a rank stuck in a
  collective; keep it under the scheduler's own (Slurm's KillWait, 30 s by default).
- Signals go to each rank's own process, not its group, as a shell's `kill` would: the rank decides
  for its children (train's data loader workers must live until its checkpoint is written).
- SIGUSR1 and SIGUSR2 (a scheduler's warning, Slurm's `--signal`) are passed on and stop nothing:
  train checkpoints on its own time and exits, and a rank that exits non-zero stops the others.
- The first rank to fail is named with its exit status, and the others are stopped as above. When a
  signal killed it, launch ends with one line naming the rank, this node, the signal, and whether the
  final model is in the command's output folder (--output_dir), so a user knows whether to trust it:
  a rank can abort at exit after the job has written everything (issue 32). A node's only rank is
  supervised as well (plan.py: spawn), so this holds for one rank per node too. A head-node mpirun or
  mpiexec that exits 128+N names its rank itself; launch's line then adds the outputs' state. A rank the
  kernel's OOM killer ended is named as such, with its size when the kernel log tells (zerokit.launch.watch.oom).
- With a stall watch (`--stall-timeout`, zerokit.launch.watch.stall): when no rank has made progress for
  its timeout, launch gets every rank's stacks, stops the ranks as for a failed rank, and ends with one
  line naming the stuck rank(s); the ranks' exits on the way are not failures of their own.
- A node's launch that a head-node pdsh started stops its ranks as for SIGTERM when its stdin, the head's
  connection, closes (stop_when_stdin_closes; zerokit.launch.head): the head's launch is gone. SIGTERM, as a
  scheduler's preemption: where every rank still runs, train checkpoints at the step's end; a rank stuck in a
  collective with a dead node's is killed after the stop grace.
- Once its ranks have ended, launch removes what DeepSpeed's CPU all-reduce segments they left in /dev/shm
  (a rank killed before it removed its own: zerokit.cluster.shm_segments).
- Exit code: that of the first rank that failed on its own (128+N when signal N killed it), else 124
  after a stall, else 128+N when launch itself got stop signal N, else 0.
- Of ranks seen ended at the same look, one killed by a machine fault (zerokit.launch.watch.exits) is taken as the
  first to fail: its peers' collectives fail a moment after it died, and they must not hide the cause.
  The restart loop reads how the ranks ended from the Supervisor (zerokit.launch.restarts.one_node.RankExits).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from zerokit.cluster import node_memory
from zerokit.cluster.shm_segments import remove_segments
from zerokit.foundations.errors import REQUEUE_EXIT_CODE, UserError
from zerokit.launch.command import Command
from zerokit.launch.job import Job, outputs_state, read_job
from zerokit.launch.rank.progress import STALL_EXIT_CODE
from zerokit.launch.watch.exits import is_machine_fault
from zerokit.launch.watch.oom import SIGKILL_EXITS, oom_cause
from zerokit.launch.watch.stall import StallWatch, Watched

DEFAULT_STOP_GRACE = 15.0  # seconds; under Slurm's default KillWait (30 s)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
WARNING_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
POLL_SECONDS = 0.1
# A rank that exits with UserError's code met bad input that every rank meets alike, and rank 0 names it in
# one line; one that exits with the requeue code wrote the preemption checkpoint every rank agreed on, which
# rank 0 may still be publishing. Either way the others are on their way out: they get this long to end on
# their own before they are stopped, or rank 0 could be stopped on its way (under srun, a stop is a SIGKILL).
AGREED_END_GRACE = 10.0
AGREED_EXIT_CODES = (UserError.exit_code, REQUEUE_EXIT_CODE)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def exit_code(returncode: int) -> int:
    """A shell's exit status for a Popen return code: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal_name(-returncode)} (exit {exit_code(returncode)})"
    return f"exited with {returncode}"


def label(command: Command) -> str:
    """How messages name a command: its rank, or (a head-node launcher) its program, and the host it starts."""
    if "RANK" in command.env:
        return f"rank {command.env['RANK']} (local {command.env.get('LOCAL_RANK', '?')})"
    program = os.path.basename(command.argv[0])
    return f"{program} to {command.host}" if command.host else program


class Rank:
    """One started command, the leader of its own process group."""

    def __init__(self, command: Command) -> None:
        self.label = label(command)
        self.host = command.host  # the host a head-node launcher's command starts, if one alone
        self.rank = command.env.get("RANK", "?")
        self.argv = command.argv
        self.is_rank = "RANK" in command.env  # else a head-node launcher (pdsh, mpirun) starting the ranks
        self.process = subprocess.Popen(
            command.argv,
            env={**os.environ, **command.env},
            start_new_session=True,
            preexec_fn=die_with_parent(os.getpid()),
        )
        self.killed = False  # by launch, after the grace: its exit is not a failure of its own
        self.stopped = False  # sent a stop signal by launch: how it ended says nothing of its node (srun: 137)

    def running(self) -> bool:
        return self.process.poll() is None

    def send(self, signum: int) -> None:
        if self.running():
            self.stopped = self.stopped or signum in STOP_SIGNALS
            self.process.send_signal(signum)

    def kill_group(self) -> None:
        """SIGKILL to the rank and every process still in its group (its group id is its pid)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # empty (or the id reused)
            os.killpg(self.process.pid, signal.SIGKILL)


def die_with_parent(parent: int):
    """In the child before exec: SIGKILL it when launch dies (PR_SET_PDEATHSIG).

    A rank in its own session outlives a SIGKILL to launch's process group (`kill -9 -PGID`, an
    OOM kill of launch): without this it would train on, unsupervised, into the same folder.
    """

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only makes the call

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # launch died before prctl took effect
            os._exit(128 + signal.SIGKILL)

    return preexec


def say(line: str) -> None:
    print(f"launch: {line}", file=sys.stderr, flush=True)


class Supervisor:
    """Watches the ranks until every one has exited; see the module's docstring for the rules."""

    def __init__(
        self,
        ranks: list[Rank],
        job: Job,
        stop_grace: float,
        stall: StallWatch | None = None,
        received: list[int] | None = None,
        lost_nodes: Callable[[], Mapping[str, float]] | None = None,
    ) -> None:
        """lost_nodes: the hosts counted lost -> seconds silent (a head's HeartbeatWatch,
        zerokit.launch.watch.heartbeat); their commands are ended, which then fail as any command killed does."""
        self.ranks = ranks  # filled as they start, once the signal handlers are in place
        self.job = job  # what the commands run: its outputs are said when a signal killed one
        self.lost_nodes = lost_nodes
        self.lost: dict[str, str] = {}  # host counted lost -> why, in words
        self.stop_grace = stop_grace
        self.stall = stall
        self.stalled: str | None = None  # the line naming the stuck rank(s), once the watch found a stall
        # Signals to launch, queued by the handler (queued_signals: one queue for every restart), handled by the loop.
        self.received: list[int] = [] if received is None else received
        self.stop_signal: int | None = None  # the first stop signal launch got
        self.failure: Rank | None = None  # the first rank that failed on its own
        self.deadline: float | None = None  # when ranks still running get SIGKILL
        self.stopped_by = ""  # the signal the deadline counts from, for messages
        self.exited: set[Rank] = set()  # the ranks whose exit was seen
        self.agreed_wait: float | None = None  # until when the others may end on their own (AGREED_END_GRACE)
        self.oom_kills = node_memory.oom_kills()  # the cgroup's count before any rank starts
        self.cause: str | None = None  # the OOM killer's part in the first failure, when the kernel tells

    def run(self) -> int:
        while True:
            self._handle_signals()
            self._reap()
            if not any(rank.running() for rank in self.ranks):
                self._report_signal_death()
                if self.stalled is not None and self.failure is None:
                    say(self.stalled)
                return self._exit_code()
            if self.stall is not None and self.deadline is None and self.stalled is None:
                self._check_stall(self.stall)
            if self.lost_nodes is not None and self.deadline is None:
                self._end_lost_nodes(self.lost_nodes())
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self._kill_stragglers()
            if self.agreed_wait is not None and time.monotonic() >= self.agreed_wait and self.deadline is None:
                self._stop_others(self.failure)
            time.sleep(POLL_SECONDS)

    def _handle_signals(self) -> None:
        while self.received:
            signum = self.received.pop(0)
            running = [rank for rank in self.ranks if rank.running()]
            for rank in running:
                rank.send(signum)
            note = ""
            if signum in STOP_SIGNALS:
                self.stop_signal = self.stop_signal or signum
                if self.deadline is None:
                    self._arm(signal_name(signum))
                    note = f"; SIGKILL to any still running in {self.stop_grace:g} s"
            say(f"got {signal_name(signum)}: passed it to {len(running)} rank(s){note}")

    def _arm(self, signal_sent: str) -> None:
        self.deadline = time.monotonic() + self.stop_grace
        self.stopped_by = signal_sent

    def _check_stall(self, stall: StallWatch) -> None:
        """At a stall: the stacks, then the ranks stopped as for a failed rank; the line comes at the end."""
        idle = stall.idle_for()
        if idle is None:
            return
        running = [rank for rank in self.ranks if rank.running()]
        say(f"no rank made progress for {idle:.0f} s: asking {len(running)} rank(s) for their stacks, then stopping")
        self.stalled = stall.report([Watched(r.rank, r.label, r.process.pid) for r in running if r.is_rank], idle)
        for rank in running:
            rank.send(signal.SIGTERM)
        self._arm("SIGTERM")

    def _end_lost_nodes(self, silent: Mapping[str, float]) -> None:
        """A node whose launch went silent: its command here is killed, so that the job stops and restarts."""
        for rank in self.ranks:
            if rank.host in silent and rank.running():
                self.lost[rank.host] = f"ended: {rank.host} sent no heartbeat for {silent[rank.host]:.0f} s"
                say(f"{rank.host} sent no heartbeat for {silent[rank.host]:.0f} s: counted lost; ending {rank.label}")
                rank.kill_group()

    def _reap(self) -> None:
        ended = [rank for rank in self.ranks if rank not in self.exited and not rank.running()]
        for rank in sorted(ended, key=lambda r: not is_machine_fault(r.process.returncode)):
            self.exited.add(rank)
            returncode = rank.process.returncode
            if returncode == 0 or rank.killed or self.failure is not None or self.stalled is not None:
                continue
            self.failure = rank
            self.cause = self.lost.get(rank.host or "") or self._oom_cause(rank)
            others = [other for other in self.ranks if other.running()]
            if others and self.deadline is None and returncode in AGREED_EXIT_CODES:
                self.agreed_wait = time.monotonic() + AGREED_END_GRACE
            elif others and self.deadline is None:
                self._stop_others(rank)
            elif others or death_line(rank, self.job, self.cause) is None:  # else the last: its line follows at once
                say(f"{rank.label} {self.ended_how(rank)}")

    def ended_how(self, rank: Rank) -> str:
        """How a rank (or a head's command) ended, in words: for the first failure, what launch knows of it (the
        OOM killer, a node counted lost), else its exit."""
        if rank is self.failure and self.cause:
            return self.cause
        return describe_exit(rank.process.returncode)

    def _oom_cause(self, rank: Rank) -> str | None:
        """Whether the kernel's OOM killer ended rank (zerokit.launch.watch.oom), read as soon as it ended."""
        if rank.process.returncode not in SIGKILL_EXITS:
            return None
        kills_after, log, limit = node_memory.oom_kills(), node_memory.kernel_kill_records(), node_memory.memory_limit()
        return oom_cause(rank.process.returncode, {rank.process.pid}, self.oom_kills, kills_after, log, limit)

    def _stop_others(self, failed: Rank) -> None:
        """A rank failed: the others get SIGTERM now, and SIGKILL after the grace."""
        say(f"{failed.label} {self.ended_how(failed)}; stopping the other ranks")
        for other in self.ranks:
            if other.running():
                other.send(signal.SIGTERM)
        self._arm("SIGTERM")

    def _kill_stragglers(self) -> None:
        stragglers = [rank for rank in self.ranks if rank.running() and not rank.killed]
        if stragglers:
            names = ", ".join(rank.label for rank in stragglers)
            say(f"{names} still running {self.stop_grace:g} s after {self.stopped_by}: killing (SIGKILL)")
        for rank in stragglers:
            rank.killed = True
            rank.kill_group()

    def _report_signal_death(self) -> None:
        """Once every rank has ended: the first failed rank, when a signal killed it, and the run's outputs."""
        line = death_line(self.failure, self.job, self.cause) if self.failure is not None else None
        if line is not None:
            say(line)

    def _exit_code(self) -> int:
        if self.failure is not None:
            return exit_code(self.failure.process.returncode)
        if self.stalled is not None:
            return STALL_EXIT_CODE
        return 128 + self.stop_signal if self.stop_signal is not None else 0


def death_line(rank: Rank, job: Job, cause: str | None = None) -> str | None:
    """The one line for a rank that a signal killed: rank, node, signal (or cause: the OOM killer's part, from
    zerokit.launch.watch.oom), and whether the run's outputs are complete.

    A head-node MPI launcher (mpirun, mpiexec) that exits 128+N, N a signal, names the rank and its node itself
    (`process rank 1 ... on node node2 exited on signal 6`): the line adds the outputs' state when the job has an
    output folder and the launcher's command line carries the job's words (not pdsh's, inside one shell line).
    None for any other exit."""
    code = rank.process.returncode
    if code < 0 or cause is not None:
        return f"{rank.label} on {socket.gethostname()} {cause or describe_exit(code)}; {outputs_state(job)}"
    carries = job.output_dir is not None and rank.argv[len(rank.argv) - len(job.argv) :] == job.argv
    if not rank.is_rank and code - 128 in signal.valid_signals() and carries:
        return (
            f"{rank.label} exited with {code}: a rank it started was killed by {signal_name(code - 128)} "
            f"(its report above names the rank and node); {outputs_state(job)}"
        )
    return None


def execute_commands(
    commands: Sequence[Command], stop_grace: float = DEFAULT_STOP_GRACE, stall: StallWatch | None = None
) -> int:
    """Run every command at once under a Supervisor; its exit code (see the module's docstring).

    `stall`: the watch whose folder the commands' environment names (zerokit.launch.watch.stall), if any. The job is
    read from the first command."""
    with queued_signals() as received:
        return supervise(commands, read_job(commands[0].argv, {}), stop_grace, stall, received)[0]


@contextlib.contextmanager
def queued_signals() -> Iterator[list[int]]:
    """Stop and warning signals to launch queued for the Supervisor(s) run meanwhile, from before any rank
    starts until the last has ended (across restarts too). A signal ignored from the start stays ignored
    (`nohup launch ...`)."""
    received: list[int] = []
    handled = [sig for sig in (*STOP_SIGNALS, *WARNING_SIGNALS) if signal.getsignal(sig) != signal.SIG_IGN]
    previous = {sig: signal.signal(sig, lambda signum, _frame: received.append(signum)) for sig in handled}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_when_stdin_closes(fd: int = 0) -> None:
    """A node's launch under a head-node pdsh: when its stdin (the head's connection: zerokit.launch.head) reads
    end-of-file, the head's pdsh is gone, and this launch gets SIGTERM, which stops its ranks as any stop signal
    does (a checkpoint first, where the job can still write one). Nothing is watched where stdin is no pipe or
    socket (a terminal, /dev/null: not started so)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def watch() -> None:
        with contextlib.suppress(OSError):  # a read that fails is a connection gone too
            while os.read(fd, 65536):
                pass
        say("stdin closed: the head node's launch is gone; stopping the ranks")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


def supervise(
    commands: Sequence[Command],
    job: Job,
    stop_grace: float,
    stall: StallWatch | None,
    received: list[int],
    lost_nodes: Callable[[], Mapping[str, float]] | None = None,
) -> tuple[int, Supervisor]:
    """Start every command, watch them under a Supervisor until all have ended; the exit code, and the
    Supervisor (what ended them). Signals come queued in `received` (queued_signals); `job`: what the commands
    run (zerokit.launch.job)."""
    ranks: list[Rank] = []
    supervisor = Supervisor(ranks, job, stop_grace, stall, received, lost_nodes)
    try:
        for command in commands:
            try:
                ranks.append(Rank(command))
            except OSError as err:  # what cli's check of the program cannot see (ENOEXEC) or a race
                say(f"cannot start {label(command)}: {command.argv[0]}: {err.strerror}")
                return (127 if err.errno == errno.ENOENT else 126), supervisor
        return supervisor.run(), supervisor
    finally:
        for rank in ranks:  # the job is over: nothing a rank started outlives it
            rank.kill_group()
            rank.process.wait()
        remove_segments({**os.environ, **command.env} for command in commands[: len(ranks)])
