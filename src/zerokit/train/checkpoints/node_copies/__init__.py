"""`--memory-checkpoints K`: a checkpoint kept in the nodes' host memory. saver (the copy, a background save into
the node's store), store (where a node keeps copies, what makes one whole), ring (each node's copy to the next
node), recovery (a restart rebuilds the newest whole step from the survivors' copies).
"""
