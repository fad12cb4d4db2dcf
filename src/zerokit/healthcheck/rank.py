"""One rank of the health check: meet, measure, judge (rank 0), report; then exec the command if it passed.

Exit codes: 0 pass (or the command's, through exec), 1 the check failed (the report says why),
2 bad options, 3 the watchdog ended a check that ran past its bound (WATCHDOG_FACTOR x --timeout).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta

from zerokit.foundations.errors import UserError
from zerokit.healthcheck import report
from zerokit.healthcheck.command import CheckConfig, parse_options
from zerokit.healthcheck.facts import node_facts
from zerokit.healthcheck.links import measure_links, merge
from zerokit.healthcheck.rendezvous import CheckFailed, meet
from zerokit.healthcheck.sweep import run_sweep, time_barrier
from zerokit.healthcheck.verdict import judge

WATCHDOG_EXIT = 3
WATCHDOG_FACTOR = 3  # the rendezvous takes up to 2.5 x --timeout on a rank that arrives early
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def say(line: str) -> None:
    print(f"health check: {line}", file=sys.stderr, flush=True)


class Watchdog:
    """Ends this process if the check runs past its bound, naming the phase it was in."""

    def __init__(self, seconds: float, who: str) -> None:
        self.phase = "start"
        self.timer = threading.Timer(seconds, self._fire, args=(seconds, who))
        self.timer.daemon = True
        self.timer.start()

    def _fire(self, seconds: float, who: str) -> None:
        say(f"FAIL {who}: still in {self.phase} after {seconds:g} s, giving up; fix: see the other ranks' "
            "messages (a node that stopped answering), or raise --check-timeout")  # fmt: skip
        os._exit(WATCHDOG_EXIT)

    def cancel(self) -> None:
        self.timer.cancel()


def rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    missing = [name for name in RANK_VARIABLES if not environ.get(name)]
    if missing:
        raise UserError(f"{', '.join(missing)} not set: run the check through `launch --check-only` (or --check)")
    return {name: environ[name] for name in (*RANK_VARIABLES, "LOCAL_WORLD_SIZE")}


def check(options: CheckConfig, environ: Mapping[str, str], watchdog: Watchdog) -> bool:
    """The whole check on this rank; True when it passed (every rank returns the same)."""
    import torch
    import torch.distributed as dist

    started = time.monotonic()
    ranks = rank_env(environ)
    rank, world, local_rank = int(ranks["RANK"]), int(ranks["WORLD_SIZE"]), int(ranks["LOCAL_RANK"])
    per_node = int(environ.get("LOCAL_WORLD_SIZE") or 1)
    host = socket.gethostname()
    watchdog.phase = "rendezvous"
    store = meet(rank=rank, world=world, address=ranks["MASTER_ADDR"], port=int(ranks["MASTER_PORT"]),
                 timeout=options.timeout, host=host, hosts=options.hosts, per_node=per_node)  # fmt: skip
    rendezvous_s = time.monotonic() - started
    # One backend for every rank: NCCL when each local rank has its GPU (cuda:LOCAL_RANK, as training takes it).
    on_gpu = torch.cuda.is_available() and per_node <= torch.cuda.device_count()
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    backend = "nccl" if on_gpu else "gloo"
    dist.init_process_group(
        backend,
        store=dist.PrefixStore("zerokit-check/pg", store),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=options.timeout),
        device_id=device if on_gpu else None,
    )

    try:
        watchdog.phase = "gathering the nodes' facts"
        everyone: list = [None] * world
        dist.all_gather_object(everyone, node_facts(environ, torch))
        hosts_by_rank = [f["host"] for f in everyone]
        node_hosts = list(dict.fromkeys(hosts_by_rank))
        leaders = [hosts_by_rank.index(h) for h in node_hosts]
        watchdog.phase = "the barrier"
        barrier_s = time_barrier(dist)
        watchdog.phase = "the all-reduce/all-gather sweep"
        timings = run_sweep(dist, torch, device, on_gpu)
        watchdog.phase = "the point-to-point links"
        halves = measure_links(dist, torch, device, leaders, node_hosts, on_gpu)
        gathered: list = [None] * world
        dist.all_gather_object(gathered, halves)
        verdict = ["pass"]
        if rank == 0:
            links = merge([half for part in gathered for half in part])
            facts = {h: everyone[leaders[i]] for i, h in enumerate(node_hosts)}
            findings = judge(links, facts, host, options.slow_factor, backend)
            result = report.build(backend=backend, ranks=world, node_facts=facts,
                                  ranks_per_host=dict(Counter(hosts_by_rank)), rendezvous_s=rendezvous_s,
                                  barrier_s=barrier_s, timings=timings, links=links, findings=findings,
                                  elapsed_s=time.monotonic() - started)  # fmt: skip
            print(json.dumps(result, indent=2) if options.as_json else report.text(result), flush=True)
            verdict = [result["verdict"]]
        watchdog.phase = "sharing the verdict"
        dist.broadcast_object_list(verdict, src=0)
        dist.barrier()  # rank 0's store lives until every rank has the verdict
    finally:
        dist.destroy_process_group()
    return verdict[0] == "pass"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_options(sys.argv[1:] if argv is None else argv)
        rank_env(os.environ)
    except UserError as err:
        say(str(err))
        return err.exit_code
    who = f"rank {os.environ['RANK']} on {socket.gethostname()}"
    import torch.distributed  # noqa: F401 (imported before the clock starts: seconds, and not a wait)

    watchdog = Watchdog(WATCHDOG_FACTOR * options.timeout, who)
    try:
        passed = check(options, os.environ, watchdog)
    except CheckFailed as failure:
        say(f"FAIL {failure}")
        return 1
    except RuntimeError as err:  # a collective that timed out or lost a peer
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        say(f"FAIL {who}: {watchdog.phase} failed ({first}); fix: see the other ranks' messages for the node "
            "that stopped answering (its link, its firewall), or raise --check-timeout")  # fmt: skip
        return 1
    finally:
        watchdog.cancel()
    if not passed:
        return 1
    if options.target:
        sys.stdout.flush()
        try:
            os.execvp(options.target[0], list(options.target))
        except OSError as err:
            say(f"passed, but cannot start {options.target[0]}: {err.strerror}; fix: check the command's spelling")
            return 127
    return 0
