"""HF flags mean in `train` what they mean in HF: `--save_steps N` alone saves every N steps, and
`--report_to tensorboard` leaves event files (offline), on a real 1-rank ZeRO-2 run of the embedded model."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_zerokit


def test_save_steps_alone_saves_and_tensorboard_leaves_events(tmp_path: Path, zk_env):
    output = tmp_path / "run"
    argv = ["train", "--config", "zero2", "--output-dir", str(output), "--max_steps", "6", "--save_steps", "3"]
    result = run_zerokit([*argv, "--report_to", "tensorboard", "--logging_steps", "2"], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    events = list(output.rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events), sorted(p.name for p in output.rglob("*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars = EventAccumulator(str(events[0].parent)).Reload().Tags()["scalars"]
    assert "train/loss" in scalars, scalars
