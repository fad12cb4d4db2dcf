"""How a run's ranks divide, and what each parallelism refuses: layout (one ParallelLayout: tp x pp x dp, checked
once against the world), tensor_parallel (--tp-size), pipeline_parallel (--pp-size). A new parallelism goes here,
its degree in the one layout.
"""
