"""Commands with one module each: generate, universal, smoke, demo (the larger commands are packages of
their own: train, launch, doctor, prepare, bench, healthcheck; `zerokit.__main__` lists them all).
"""
