"""The check's report: one dict (what --json prints) and its text form (what a job log shows)."""

from __future__ import annotations

from dataclasses import asdict

from zerokit.healthcheck.links import Link
from zerokit.healthcheck.sweep import Timing
from zerokit.healthcheck.transport import carried, node_transports, pair_name, pair_transport
from zerokit.healthcheck.verdict import Finding, node_scores, slowest_links


def build(
    *,
    backend: str,
    ranks: int,
    node_facts: dict[str, dict],
    ranks_per_host: dict[str, int],
    rendezvous_s: float,
    barrier_s: float,
    timings: list[Timing],
    links: list[Link],
    findings: list[Finding],
    elapsed_s: float,
) -> dict:
    scores = node_scores(links)
    nodes = []
    for host, facts in node_facts.items():
        latency, bandwidth = scores.get(host, (None, None))
        nodes.append({
            "host": host,
            "ranks": ranks_per_host.get(host, 0),
            "best_link_latency_us": None if latency is None else round(latency * 1e6, 1),
            "best_link_gbps": None if bandwidth is None else round(bandwidth / 1e9, 4),
            "facts": facts,
        })  # fmt: skip
    return {
        "verdict": "fail" if findings else "pass",
        "backend": backend,
        "ranks": ranks,
        "nodes": nodes,
        "rendezvous_s": round(rendezvous_s, 3),
        "barrier_us": round(barrier_s * 1e6, 1),
        "collectives": [
            {
                "op": t.op,
                "size": t.size,
                "time_us": round(t.seconds * 1e6, 1),
                "algbw_gbps": round(t.algbw() / 1e9, 4),
                "busbw_gbps": round(t.busbw(ranks) / 1e9, 4),
            }
            for t in timings
        ],
        "links": [link_row(link, node_facts, backend) for link in links],
        "slowest_links": [f"{link.a}-{link.b}" for link in slowest_links(links)],
        "findings": [asdict(f) for f in findings],
        "elapsed_s": round(elapsed_s, 2),
    }


def link_row(link: Link, node_facts: dict[str, dict], backend: str) -> dict:
    """A pair's figures, and the transport they went over (the slower direction is `gbps`)."""
    ends = node_transports({host: node_facts[host] for host in (link.a, link.b)})
    transport = pair_transport(ends[link.a], ends[link.b], backend)
    return {
        **asdict(link),
        "latency_us": round(link.latency * 1e6, 1),
        "a_to_b_gbps": round(link.a_to_b / 1e9, 4),
        "b_to_a_gbps": round(link.b_to_a / 1e9, 4),
        "gbps": round(link.bandwidth / 1e9, 4),
        "transport": transport.text,
        "transport_kind": transport.kind,
    }


def link_line(row: dict) -> str:
    """One pair on one line: the slower direction, what carried it, the latency, each way."""
    return (
        f"{pair_name(row['a'], row['b'])}: {carried(row['gbps'] * 1e9, row['transport'])}; "
        f"latency {row['latency_us']:,.0f} us; each way {row['a_to_b_gbps']:.3f} / {row['b_to_a_gbps']:.3f} GB/s"
    )


def size_text(size: int) -> str:
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def text(report: dict) -> str:
    lines = [
        f"health check: {len(report['nodes'])} node(s), {report['ranks']} rank(s), {report['backend']}; "
        f"rendezvous {report['rendezvous_s']:.2f} s, barrier {report['barrier_us']:,.0f} us, "
        f"check {report['elapsed_s']:.1f} s",
        "",
        f"{'node':<16} {'ranks':>5} {'interface':<10} {'best link lat(us)':>17} {'best link GB/s':>14} "
        f"{'free mem':>9} {'/dev/shm':>9}  gpus",
    ]
    for node in report["nodes"]:
        f = node["facts"]
        latency = "-" if node["best_link_latency_us"] is None else f"{node['best_link_latency_us']:,.0f}"
        bandwidth = "-" if node["best_link_gbps"] is None else f"{node['best_link_gbps']:.3f}"
        gpus = f"{f['gpu_count']} x {f['gpu_model']}" if f.get("gpu_count") else "-"
        lines.append(
            f"{node['host']:<16} {node['ranks']:>5} {f['interface']:<10} {latency:>17} {bandwidth:>14} "
            f"{_gib(f['mem_available']):>9} {_gib(f['shm_bytes']):>9}  {gpus}"
        )
    first = report["nodes"][0]["facts"]
    lines += [
        "",
        f"same on every node: zerokit {first['zerokit']} ({first['commit']}), stack {first['stack']} "
        f"(lock {first['lock_sha256']}), image {first['image']}, torch {first['torch']}, "
        f"deepspeed {first['deepspeed']}, nccl {first['nccl']}"
        if not any("differs" in f["problem"] for f in report["findings"])
        else "nodes differ: see the findings",
        "",
        "collectives (nccl-tests: algbw = size/time; busbw = algbw x 2(n-1)/n all_reduce, x (n-1)/n all_gather)",
        f"{'size':>8} {'all_reduce us':>14} {'algbw GB/s':>11} {'busbw GB/s':>11}"
        f" {'all_gather us':>14} {'algbw GB/s':>11} {'busbw GB/s':>11}",
    ]
    reduces = [row for row in report["collectives"] if row["op"] == "all_reduce"]
    gathers = [row for row in report["collectives"] if row["op"] == "all_gather"]
    for reduce, gather in zip(reduces, gathers, strict=True):  # one sweep step per line
        cells = [f"{r['time_us']:>14,.0f} {r['algbw_gbps']:>11.3f} {r['busbw_gbps']:>11.3f}" for r in (reduce, gather)]
        lines.append(f"{size_text(reduce['size']):>8} {' '.join(cells)}")
    if report["links"]:
        lines += ["", "links (point to point, every node pair: the slower direction, and what carried it)"]
        lines += [link_line(row) for row in report["links"]]
        lines.append(f"slowest links: {', '.join(report['slowest_links'])}")
    lines.append("")
    if report["findings"]:
        lines += [f"FAIL {f['host']}: {f['problem']}; fix: {f['fix']}" for f in report["findings"]]
        lines.append(f"verdict: FAIL ({len(report['findings'])} finding(s) above)")
    else:
        lines.append("verdict: PASS")
    return "\n".join(lines)


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f}G" if size else "-"
