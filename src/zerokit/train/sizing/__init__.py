"""How much a run takes, and how large its batches are: memory_need (what a rank needs, numbers only) and
memory_check (against this node, before the model is built); micro_batch (`--micro-batch auto`'s choice, in
numbers) and micro_probe (its probe on each rank, the ranks' agreement); global_batch (micro x accumulation x dp:
recorded, and the accumulation that keeps it on a resume).
"""
