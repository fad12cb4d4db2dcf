"""`prepare`: get models and data ready for compute nodes (the command line: zerokit.prepare.cli)."""
