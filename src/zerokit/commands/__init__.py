"""Commands with one module each: universal, smoke, demo (generate and the larger commands are packages of
their own: train, launch, doctor, prepare, bench, healthcheck; `zerokit.__main__` lists them all).
"""
