"""`--pp-size N`: DeepSpeed's pipeline engine, the model cut into N stages x ZeRO-1 data parallelism across them.

Ranks are laid out as DeepSpeed's PipeDataParallelTopology lays them out: stage s holds ranks
s*DP .. s*DP+DP-1, so consecutive ranks are data-parallel replicas of one stage and a stage boundary
falls between nodes when DP is the ranks per node (activations cross nodes, gradients stay in one).
Pipeline runs train with the engine's own `train_batch` loop (zerokit.train.engines.pipeline_engine), not the
Trainer; the layouts and options that loop cannot serve are refused here first, in one line naming the
fix: the options (`check_options`, before torch); the rank counts are the run's ParallelLayout's
(zerokit.train.parallel.layout).
"""

from __future__ import annotations

from zerokit.foundations.errors import UserError
from zerokit.train.parallel.layout import refuse_unserved

# zerokit options the pipeline loop does not serve: flag -> whether it is given.
UNSERVED = {
    "--tp-size": lambda o: o.tp_size > 1,
    "--lora": lambda o: o.lora is not None,
    "--train-last-layers": lambda o: bool(o.train_last_layers),
    "--streaming": lambda o: o.streaming,
}


def check_options(options) -> None:
    """--pp-size against the other options and the DeepSpeed config (TrainFlags; before torch)."""
    pp = options.pp_size
    if pp is None:
        return
    refuse_unserved("--pp-size", pp, UNSERVED, options, "pipeline runs")
    if options.ds_settings is None:
        raise UserError(f"--pp-size {pp} needs DeepSpeed (its pipeline engine trains the stages): --config zero1")
    stage = options.ds_settings.zero_stage
    if stage != 1:
        raise UserError(
            f"--pp-size {pp} with ZeRO-{stage} (--config {options.config}): DeepSpeed's pipeline engine refuses "
            "ZeRO-2 and 3, and at ZeRO-0 its gradient clipping leaves the other stages' gradients out; "
            "use --config zero1 (or a file with zero_optimization.stage 1)"
        )
