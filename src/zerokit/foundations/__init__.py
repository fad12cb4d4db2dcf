"""Foundations: what every other part of zerokit stands on, importing nothing of zerokit's.

errors (the one-line errors and their exit codes), paths (the checkout and its folders), flags (how a
command's flags are defined) and values (one parser per kind of value), files (atomic writes, hashes),
packages (installed versions), process_end (ending a rank without Python's finalization), startup_marks
(the moments a run passes on its way to its first step).
"""
