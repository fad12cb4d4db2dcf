"""Reading a rank's stacks: its main thread, whether it waits in a collective, where the user's code is."""

from __future__ import annotations

from zerokit.launch.rank.stacks import HEADER, verdict

SITE = "/venv/lib/python3.11/site-packages"
WAITING_IN_DEEPSPEED = (
    HEADER.format(rank=2, pid=77, host="node2", thread=0x7F00)
    + f"""\
Thread 0x0000000000007f11 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x0000000000007f00 (most recent call first):
  File "{SITE}/torch/distributed/distributed_c10d.py", line 4000 in all_gather_into_tensor
  File "{SITE}/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "{SITE}/deepspeed/comm/torch.py", line 220 in all_gather_into_tensor
  File "{SITE}/deepspeed/comm/comm.py", line 117 in log_wrapper
  File "{SITE}/transformers/trainer.py", line 3000 in evaluate
  File "/home/me/finetune.py", line 41 in main
  File "/home/me/finetune.py", line 50 in <module>
"""
)
STUCK_IN_A_LIBRARY = (
    HEADER.format(rank=1, pid=78, host="node1", thread=0x7F00)
    + f"""\
Thread 0x0000000000007f00 (most recent call first):
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 113 in get
  File "{SITE}/torch/utils/data/dataloader.py", line 1133 in _try_get_data
  File "/home/me/finetune.py", line 30 in train_loop
  File "/home/me/finetune.py", line 50 in <module>
"""
)


def test_a_rank_in_a_deepspeed_gather_waits_in_it():
    found = verdict(WAITING_IN_DEEPSPEED)
    assert (found.rank, found.pid, found.host) == ("2", "77", "node2")
    assert found.waits_in == "all_gather_into_tensor"  # the main thread's, not the threading one's


def test_a_rank_outside_any_collective_is_stuck_at_the_innermost_frame_of_the_users_code():
    found = verdict(STUCK_IN_A_LIBRARY)
    assert found.waits_in is None
    assert found.stuck_at == "/home/me/finetune.py:30"


def test_without_a_header_the_thread_not_started_by_threading_is_the_main_one():
    text = WAITING_IN_DEEPSPEED.split("\n", 1)[1]
    assert verdict(text).waits_in == "all_gather_into_tensor" and verdict(text).rank == "?"
