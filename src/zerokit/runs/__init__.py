"""A training run's services: the Trainer as `train` runs it (trainer), preemption and Ctrl-C (preemption),
the run record (run_record), offline-by-default loading (offline) and arguments whose pickle holds no
token (secret_free).
"""
