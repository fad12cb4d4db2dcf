"""Which hosts of a head-node launch still answer, once its job has failed (zerokit.launch.restarts.head_node): every
host probed at once, within PROBE_SECONDS; a host that does not answer -> why, in its probe's words.

- Over ssh (pdsh, mpirun, mpiexec): `ssh HOST true` (the `ssh` pdsh runs; inside the image, the system's for this
  caller: zerokit.launch.remote_shell), its connection bounded by half the time, the rest for the login.
- In a Slurm job (srun): Slurm's own view, and a step on each host, whichever says no first.
  `scontrol --oneliner show node HOSTS`: a node whose state holds DOWN, DRAIN, FAIL or NOT_RESPONDING is out (drained
  by an admin or a health check, or given up on by slurmctld). slurmctld counts a node whose slurmd went silent as
  NOT_RESPONDING only after SlurmdTimeout (300 s by default), far too late to wait for: so each host also runs a
  step, `srun --nodes 1 --ntasks 1 --nodelist HOST --overlap --time 1 true`, which fails within seconds where the
  node's slurmd is gone (its port refused) and is ended by the bound where the node is cut off. --overlap: the
  stopped job's steps may still hold the node's CPUs.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from zerokit.launch.head import HEAD_LAUNCHERS
from zerokit.launch.watch.supervisor import describe_exit

PROBE_SECONDS = 10.0  # for every host to answer
# In a node's state as scontrol writes it (IDLE+DRAIN, MIXED+NOT_RESPONDING; older: DOWN*, where * is
# NOT_RESPONDING), the words that say Slurm runs nothing more there.
SLURM_OUT_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING"})
STATE_FLAGS = "*~#%$@!^-"  # sinfo-style suffixes: * not responding, ~ powered off, $ maintenance, @ reboot, ...


def probe_for(launcher: str) -> Callable[[Sequence[str]], dict[str, str]]:
    """How the hosts of a `--launcher` job are probed: in Slurm's view (srun), else over ssh; the probe gives the
    hosts that do not answer within PROBE_SECONDS -> why, in the hosts' order."""
    silent = silent_in_job if HEAD_LAUNCHERS[launcher].in_allocation else silent_over_ssh
    return lambda hosts: silent(hosts, PROBE_SECONDS)


def silent_over_ssh(hosts: Sequence[str], timeout: float) -> dict[str, str]:
    """The hosts that do not run `ssh HOST true` within timeout -> ssh's words
    (`ssh: connect to host node3 port 22: Connection refused`)."""
    since = time.monotonic()
    return answers({host: started(ssh_argv(host, timeout)) for host in hosts}, since, timeout, {})


def silent_in_job(hosts: Sequence[str], timeout: float) -> dict[str, str]:
    """The hosts of this Slurm job that Slurm has out, or that do not run a step of `true` within timeout -> why
    (`Slurm: IDLE+DRAIN, bad GPU`, srun's error)."""
    since = time.monotonic()
    steps = {host: started(srun_probe_argv(host)) for host in hosts}
    return answers(steps, since, timeout, slurm_verdicts(scontrol_nodes(hosts, timeout)))


def ssh_argv(host: str, timeout: float) -> tuple[str, ...]:
    """`ssh HOST true`, its connection bounded by half the timeout."""
    return ("ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout / 2))}", host, "true")


def srun_probe_argv(host: str) -> tuple[str, ...]:
    """A step of `true` on host, beside any step the stopped job left there (--overlap), for a minute at most."""
    return ("srun", "--nodes", "1", "--ntasks", "1", "--nodelist", host, "--overlap", "--time", "1", "true")


def started(argv: Sequence[str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def answers(
    probes: Mapping[str, subprocess.Popen], since: float, timeout: float, known: Mapping[str, str]
) -> dict[str, str]:
    """The hosts whose probe (started at `since`) failed or had not ended within timeout -> why (the last line it
    wrote), and those `known` to be out already (their probe is not waited for), in the probes' order."""
    silent = {}
    for host, probe in probes.items():
        if host in known:
            probe.kill()
            probe.communicate()
            silent[host] = known[host]
            continue
        try:
            said = probe.communicate(timeout=max(0.0, since + timeout - time.monotonic()))[1]
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.communicate()
            said = f"no answer within {timeout:g} s"
        if probe.returncode != 0:
            lines = said.strip().splitlines()
            silent[host] = lines[-1] if lines else f"{probe.args[0]} {describe_exit(probe.returncode)}"
    return silent


def scontrol_nodes(hosts: Sequence[str], timeout: float) -> str:
    """`scontrol --oneliner show node HOSTS`' lines; "" where it fails (the steps alone then answer)."""
    argv = ["scontrol", "--oneliner", "show", "node", ",".join(hosts)]
    try:
        shown = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return shown.stdout if shown.returncode == 0 else ""


def slurm_verdicts(shown: str) -> dict[str, str]:
    """The nodes that `scontrol --oneliner show node` shows out (see SLURM_OUT_STATES) -> why, in Slurm's words:
    `Slurm: IDLE+DRAIN, bad GPU [admin@2026-01-01T00:00:00]`."""
    verdicts = {}
    for line in shown.splitlines():
        name, state = field(line, "NodeName"), field(line, "State")
        if name and state and is_out(state):
            reason = field(line, "Reason")
            verdicts[name] = f"Slurm: {state}{f', {reason}' if reason else ''}"
    return verdicts


def is_out(state: str) -> bool:
    """Whether a node's state, as scontrol writes it, says Slurm runs nothing more there."""
    words = state.split("+")
    return "*" in words[0] or any(word.rstrip(STATE_FLAGS) in SLURM_OUT_STATES for word in words)


def field(line: str, name: str) -> str | None:
    """A field of scontrol's one-line record: the words up to the next `Name=` (a Reason holds spaces)."""
    found = re.search(rf"(?:^|\s){name}=(.*?)(?=\s+[A-Za-z_:]+=|$)", line)
    return found[1].strip() if found and found[1].strip() else None
