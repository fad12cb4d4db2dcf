"""`bench`: the scaling and start-up report (report.md, scaling.png, results.json).

cli (flags) -> plan (the runs) -> runner (one subprocess per run, timed by StepClock inside
train) -> report (the table, the plot, the raw numbers).
"""
