"""zerokit: a pinned, verified environment for training transformers with DeepSpeed on HPC clusters."""

__version__ = "0.1.0"
