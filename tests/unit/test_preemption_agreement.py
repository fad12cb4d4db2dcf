"""The preemption flag's agreement, on a real 2-rank gloo group: one step late, the same on every rank.

PreemptionCallback stops every rank at the step where this agreement first says "set", so this
is the guarantee that all ranks stop at the same step (tests/e2e/test_preemption.py checks the
checkpoint and the resume around it).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.multiprocessing as mp

from zerokit.launch.rank.environment import free_port

STEPS = 8


def rank_main(rank: int, port: int, signal_at: dict[int, int], out: str) -> None:
    import torch.distributed as dist

    from zerokit.train.callbacks.preemption import FlagAgreement

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    agreement = FlagAgreement.for_this_job()
    seen = [agreement.exchange(step >= signal_at.get(rank, STEPS + 1)) for step in range(1, STEPS + 1)]
    agreement.finish()
    dist.destroy_process_group()
    Path(out, f"rank-{rank}.json").write_text(json.dumps(seen))


def agreed(tmp_path: Path, signal_at: dict[int, int]) -> list[list[bool]]:
    mp.spawn(rank_main, args=(free_port(), signal_at, str(tmp_path)), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


def test_a_signal_on_one_rank_is_seen_by_both_at_the_next_step_and_not_before(tmp_path: Path):
    rank0, rank1 = agreed(tmp_path, {1: 3})  # only rank 1 got the signal, during step 3
    assert rank0 == rank1
    assert rank0 == [False] * 3 + [True] * (STEPS - 3)  # from step 4 on: one step after the signal's


def test_alone_a_signal_is_seen_at_once():
    from zerokit.train.callbacks.preemption import FlagAgreement

    alone = FlagAgreement(None)
    assert [alone.exchange(flag) for flag in (False, True)] == [False, True]
