"""launch's restarts (`--max-restarts`): the one loop (loop: an Attempt supervised, its end seen as a fault or not,
the job placed again) and its two strategies: one node's ranks restarted where they ran (one_node), or a job of
several nodes restarted from the head node on the hosts that answer (head_node, with probe: which hosts do)."""
