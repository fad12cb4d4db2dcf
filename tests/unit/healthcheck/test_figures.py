"""The check's figures and judgement: nccl-tests' bandwidths, the pair schedule, slow and differing nodes."""

from __future__ import annotations

import itertools
from dataclasses import asdict

import pytest

from zerokit.healthcheck import report
from zerokit.healthcheck.links import Link, merge, rounds
from zerokit.healthcheck.sweep import CPU_SIZES, GPU_SIZES, Timing, bus_bandwidth
from zerokit.healthcheck.transport import NodeTransport
from zerokit.healthcheck.verdict import differing_nodes, gpu_findings, judge, slow_nodes

GB = 1e9


@pytest.mark.parametrize(("op", "ranks", "factor"), [("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75),
                                                      ("all_reduce", 1, 0.0), ("all_gather", 4, 0.75)])  # fmt: skip
def test_bus_bandwidth_is_nccl_tests(op: str, ranks: int, factor: float):
    assert bus_bandwidth(op, 10 * GB, ranks) == pytest.approx(10 * GB * factor)


def test_algbw_is_bytes_over_time_and_busbw_follows():
    timing = Timing("all_reduce", 2**20, 0.001)
    assert timing.algbw() == pytest.approx(2**20 / 0.001)
    assert timing.busbw(4) == pytest.approx(timing.algbw() * 1.5)


def test_the_gpu_sweep_is_all_reduce_perf_default_and_the_cpu_one_small():
    assert (GPU_SIZES[0], GPU_SIZES[-1], GPU_SIZES[1] // GPU_SIZES[0]) == (8, 128 * 2**20, 2)
    assert CPU_SIZES[-1] <= 4 * 2**20


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 8, 64])
def test_rounds_pair_every_node_once_and_nobody_twice_in_a_round(count: int):
    schedule = rounds(count)
    pairs = [pair for step in schedule for pair in step]
    assert sorted(pairs) == list(itertools.combinations(range(count), 2))
    for step in schedule:
        busy = [node for pair in step for node in pair]
        assert len(busy) == len(set(busy))
    assert len(schedule) <= count


def test_the_two_ends_halves_make_one_link():
    halves = [{"a": "n1", "b": "n2", "latency": 1e-4, "a_to_b": 5 * GB}, {"a": "n1", "b": "n2", "b_to_a": 2 * GB}]
    assert merge(halves) == [Link("n1", "n2", 1e-4, 5 * GB, 2 * GB)]
    assert merge(halves)[0].bandwidth == 2 * GB


def links_with(slow: str, hosts=("n1", "n2", "n3", "n4"), latency=50e-6, bandwidth=10 * GB) -> list[Link]:
    """Every pair of hosts; the links of `slow` 100x slower in bandwidth."""
    found = []
    for a, b in itertools.combinations(hosts, 2):
        bad = slow in (a, b)
        found.append(Link(a, b, latency, bandwidth / (100 if bad else 1), bandwidth))
    return found


@pytest.mark.parametrize("hosts", [("n1", "n2", "n3"), ("n1", "n2", "n3", "n4", "n5", "n6")])
def test_the_node_on_every_slow_link_is_named_not_its_partners(hosts):
    found = slow_nodes(links_with("n2", hosts), factor=4)
    assert [f.host for f in found] == ["n2"]
    assert "bandwidth 0.100 GB/s on its best link, the median node's 10.000 GB/s" in found[0].problem


def test_a_high_latency_node_is_named_but_not_latency_noise():
    links = [Link("n1", "n2", 25e-3, 1 * GB, 1 * GB), Link("n2", "n3", 25e-3, 1 * GB, 1 * GB),
             Link("n1", "n3", 60e-6, 1 * GB, 1 * GB)]  # fmt: skip
    assert [f.host for f in slow_nodes(links, factor=4)] == ["n2"]
    noisy = [Link("n1", "n2", 900e-6, GB, GB), Link("n2", "n3", 900e-6, GB, GB), Link("n1", "n3", 50e-6, GB, GB)]
    assert slow_nodes(noisy, factor=4) == []  # 18x, but under a millisecond: a busy CPU, not a link


def test_two_nodes_share_one_link_and_neither_is_blamed():
    assert slow_nodes([Link("n1", "n2", 1.0, 1.0, 1.0)], factor=4) == []


def facts(**changes) -> dict:
    same = {"zerokit": "0.1.0", "stack": "cpu", "lock_sha256": "abc", "torch": "2.13.0", "gpu_count": 0}
    return {host: {**same, **changes.get(host, {})} for host in ("n1", "n2", "n3")}


def test_a_node_unlike_the_majority_is_named_with_what_differs():
    found = differing_nodes(facts(n3={"stack": "dev", "lock_sha256": "def"}), main_host="n1")
    assert [(f.host, f.problem) for f in found] == [
        ("n3", "differs: stack dev (the others: cpu), lock_sha256 def (the others: abc)")
    ]


def test_without_a_majority_the_main_node_decides():
    two = {"n1": {"torch": "2.13.0"}, "n2": {"torch": "2.12.0"}}
    assert [f.host for f in differing_nodes(two, main_host="n2")] == ["n1"]


def test_uncorrected_ecc_errors_name_the_node():
    assert [
        f.host for f in gpu_findings({"n1": {"ecc_uncorrected": [0, None]}, "n2": {"ecc_uncorrected": [0, 3]}})
    ] == ["n2"]


def test_the_report_reads_as_the_readme_shows():
    links = links_with("n2", ("n1", "n2", "n3"))
    node_facts = {h: {**f, "host": h, "interface": "eth0", "mem_available": 2**30, "shm_bytes": 2**30, "commit": "c",
                      "image": "none (host)", "deepspeed": "0.19.8", "nccl": "-", "gpu_model": "-",
                      "transport": asdict(NodeTransport("sockets", "", "eth0"))}
                  for h, f in facts().items()}  # fmt: skip
    findings = judge(links, node_facts, "n1", factor=4, backend="gloo")
    built = report.build(backend="gloo", ranks=3, node_facts=node_facts, ranks_per_host={"n1": 1, "n2": 1, "n3": 1},
                         rendezvous_s=0.5, barrier_s=1e-4, timings=[Timing("all_reduce", 4096, 1e-4),
                         Timing("all_gather", 4095, 1e-4)], links=links, findings=findings, elapsed_s=3.0)  # fmt: skip
    assert built["verdict"] == "fail"
    assert built["slowest_links"][:2] == ["n1-n2", "n2-n3"]
    text = report.text(built)
    assert "FAIL n2: slow link" in text and text.endswith("verdict: FAIL (1 finding(s) above)")
    assert "      4K" in text and "n1 <-> n2: 0.100 GB/s via gloo over TCP (eth0); latency 50 us" in text


def test_the_image_is_named_by_its_build_and_its_path_is_shown_apart():
    from zerokit.healthcheck.facts import IDENTITY, image_identity, runtime_image

    assert image_identity({"tag": "zerokit:cuda13", "build_id": "cuda13-0123456789ab"}) == (
        "zerokit:cuda13 (cuda13-0123456789ab)"
    )
    assert image_identity({}) == "none (host)"
    assert runtime_image({"APPTAINER_CONTAINER": "/local/train.sif"}) == "apptainer /local/train.sif"
    assert "image" in IDENTITY and "image_path" not in IDENTITY
