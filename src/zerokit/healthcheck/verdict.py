"""Rank 0's judgement: which node is slow, which differs from the others, and the fix for each.

A node is slow when its *best* link is `factor` times worse than the median node's best link (latency
higher, or bandwidth lower). Judging nodes by their best link, not links against the median link,
puts the blame where it lies: with one bad NIC among three nodes, two of the three links are slow,
but only the bad node has no fast link. Two nodes share one link: that cannot say which end is slow,
so a pair is judged only against its absolute figures (the report shows them). A pair that NCCL runs over
TCP sockets while either node has a fabric, slower than that fabric's line rate by `factor`, is named with
the cause (transport.py).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from zerokit.healthcheck.facts import IDENTITY
from zerokit.healthcheck.links import Link
from zerokit.healthcheck.transport import (
    below_fabric,
    carried,
    node_transports,
    pair_name,
    pair_transport,
    sockets_cause,
)

# Latency differences below this are taken as noise (a rank waiting for a busy CPU), whatever the factor.
LATENCY_FLOOR = 1e-3  # seconds
SLOW_FIX = (
    "check that node's link (ethtool/ibstat: speed, errors; `tc qdisc show`), or leave it out of the job "
    "(sbatch --exclude=HOST)"
)


@dataclass(frozen=True)
class Finding:
    host: str
    problem: str
    fix: str

    def line(self) -> str:
        return f"{self.host}: {self.problem}; fix: {self.fix}"


def node_scores(links: list[Link]) -> dict[str, tuple[float, float]]:
    """host -> (best latency, best bandwidth) over its links."""
    scores: dict[str, tuple[float, float]] = {}
    for link in links:
        for host in (link.a, link.b):
            latency, bandwidth = scores.get(host, (float("inf"), 0.0))
            scores[host] = (min(latency, link.latency), max(bandwidth, link.bandwidth))
    return scores


def slow_nodes(links: list[Link], factor: float) -> list[Finding]:
    scores = node_scores(links)
    if len(scores) < 3:
        return []
    latency = statistics.median(s[0] for s in scores.values())
    bandwidth = statistics.median(s[1] for s in scores.values())
    found = []
    for host, (best_latency, best_bandwidth) in scores.items():
        reasons = []
        if best_latency > factor * latency and best_latency - latency > LATENCY_FLOOR:
            reasons.append(f"latency {best_latency * 1e6:,.0f} us on its best link, the median node's "
                           f"{latency * 1e6:,.0f} us")  # fmt: skip
        if best_bandwidth * factor < bandwidth:
            reasons.append(f"bandwidth {best_bandwidth / 1e9:.3f} GB/s on its best link, the median node's "
                           f"{bandwidth / 1e9:.3f} GB/s")  # fmt: skip
        if reasons:
            found.append(Finding(host, f"slow link ({'; '.join(reasons)}; more than {factor:g}x)", SLOW_FIX))
    return found


def slowest_links(links: list[Link], count: int = 3) -> list[Link]:
    return sorted(links, key=lambda link: (link.bandwidth, -link.latency))[:count]


def differing_nodes(facts: dict[str, dict], main_host: str) -> list[Finding]:
    """Nodes whose identity facts differ from the majority's (ties: the main node's value wins)."""
    found: dict[str, list[str]] = {}
    for key in IDENTITY:
        values = {host: str(f.get(key, "-")) for host, f in facts.items()}
        counts = Counter(values.values())
        if len(counts) < 2:
            continue
        top = max(counts.values())
        leaders = [v for v, c in counts.items() if c == top]
        majority = values[main_host] if values[main_host] in leaders else leaders[0]
        for host, value in values.items():
            if value != majority:
                found.setdefault(host, []).append(f"{key} {value} (the others: {majority})")
    fix = "run every node from the same image and lock (the same --container image, the same venv)"
    return [Finding(host, "differs: " + ", ".join(what), fix) for host, what in found.items()]


def gpu_findings(facts: dict[str, dict]) -> list[Finding]:
    """Nodes whose GPUs count uncorrected ECC errors (nvidia-smi; volatile: since the driver loaded)."""
    found = []
    for host, f in facts.items():
        errors = [e for e in f.get("ecc_uncorrected", []) if e]
        if errors:
            found.append(Finding(host, f"uncorrected ECC errors on its GPUs ({sum(errors)})",
                                 "drain the node and report it to the site (nvidia-smi -q -d ECC)"))  # fmt: skip
    return found


def transport_findings(links: list[Link], facts: dict[str, dict], backend: str, factor: float) -> list[Finding]:
    """Pairs that NCCL runs over TCP sockets, slow beside a fabric either node has: the cause and its fix."""
    if backend != "nccl":  # gloo is TCP whatever the nodes have, in the check as in the job
        return []
    transports = node_transports(facts)
    found = []
    for link in links:
        ends = {link.a: transports[link.a], link.b: transports[link.b]}
        pair = pair_transport(ends[link.a], ends[link.b], backend)
        cause = sockets_cause(ends) if pair.kind == "sockets" else None
        if cause and below_fabric(link.bandwidth, ends.values(), factor):
            problem = f"{carried(link.bandwidth, pair.text)} {cause[0]}"
            found.append(Finding(pair_name(link.a, link.b), problem, cause[1]))
    return found


def judge(links: list[Link], facts: dict[str, dict], main_host: str, factor: float, backend: str) -> list[Finding]:
    return [*slow_nodes(links, factor), *transport_findings(links, facts, backend, factor),
            *differing_nodes(facts, main_host), *gpu_findings(facts)]  # fmt: skip
