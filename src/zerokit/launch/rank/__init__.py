"""launch's rank side: what runs inside each rank process, imported by `train`, `generate` and a user's script.

environment (the torch.distributed variables, from the scheduler or a world of one), rendezvous (the bounded
wait for the peers), progress (the rank's heartbeat for the stall watch, its stacks on request), stacks (those
stacks read back) and user_script (a user's Python script run as a rank). The supervisor side, which starts and
watches the ranks, is the rest of zerokit.launch: config -> plan -> execute, supervisor, stall.
"""
