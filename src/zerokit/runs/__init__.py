"""A training run's services: the Trainer as `train` runs it (trainer), preemption and Ctrl-C (preemption),
the run record (run_record) and offline-by-default loading (offline).
"""
