"""HF flags mean in `train` what they mean in HF: `--save_steps N` alone saves every N steps, and
`--report_to tensorboard` leaves event files (offline), on a real 1-rank ZeRO-2 run of the embedded model. The same
run chooses its micro-batch (`--micro-batch auto`, on a CPU rank the memory estimate alone): said in one line,
recorded in zerokit-run.json, and what the Trainer and DeepSpeed trained with. A small text file keeps that cheap: on
CPU ranks the memory allows thousands of the tiny model's samples, so the training blocks cap the choice (the
embedded corpus's would make it 512, twice this run's time)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_zerokit


def test_save_steps_alone_saves_and_tensorboard_leaves_events(tmp_path: Path, zk_env):
    output = tmp_path / "run"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(300)))
    argv = ["train", "--config", "zero2", "--output-dir", str(output), "--max_steps", "6", "--save_steps", "3"]
    argv += ["--dataset", str(corpus)]
    result = run_zerokit([*argv, "--report_to", "tensorboard", "--logging_steps", "2", "--micro-batch", "auto"], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    said = re.findall(r"zerokit: micro-batch (\d+) per rank \(--micro-batch auto: the memory estimate", result.stdout)
    record = json.loads((output / "zerokit-run.json").read_text())
    assert said == [str(record["micro_batch"]["chosen"])] and record["micro_batch"]["how"] == "estimate"
    micro = record["micro_batch"]["chosen"]
    assert micro & (micro - 1) == 0 and micro < record["micro_batch"]["estimate_bound"]  # a power of two, data-capped
    assert record["batch"] == {"micro": micro, "accumulation": 1, "data_parallel": 1, "global": micro}
    assert record["deepspeed"]["resolved"]["train_micro_batch_size_per_gpu"] == micro
    events = list(output.rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events), sorted(p.name for p in output.rglob("*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars = EventAccumulator(str(events[0].parent)).Reload().Tags()["scalars"]
    assert "train/loss" in scalars, scalars
