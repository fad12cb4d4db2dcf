"""The callbacks a training run installs in its engine: preemption (a signal means: checkpoint at the step's
end), finite_loss (a diverged run stops before it saves), step_clock (timings for bench), run_record
(zerokit-run.json in the output folder and each checkpoint).
"""
