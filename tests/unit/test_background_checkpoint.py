"""Background checkpoints, the parts that need no training: the host copy and its reused buffers, a file written
whole, and the writer that publishes only after the save's callbacks and every file (the e2e tests train)."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from zerokit.train.checkpoints.capture import Capture, capturing
from zerokit.train.checkpoints.files import PARTIAL_SUFFIX, PAUSE_VARIABLE, PendingFile
from zerokit.train.checkpoints.host_snapshot import HostSnapshot
from zerokit.train.checkpoints.writer import BackgroundWriter, Job, SaveFigures, SaveLog


def test_the_copy_holds_the_state_as_it_was_and_reuses_its_buffers():
    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    moment = torch.nn.Parameter(torch.ones(4))
    state = OrderedDict(
        module={"w": weight, "view": weight[0]}, optimizer=[{"step": 3, "exp_avg": moment}], betas=(0.9, 0.99)
    )
    snapshot = HostSnapshot()
    snapshot.begin()
    first = snapshot.copy(state, "model_states.pt")
    again = snapshot.copy({"w": weight}, "model.safetensors")  # the same tensor in another file: copied once
    snapshot.finish()
    weight.add_(100)  # training goes on
    moment.data.mul_(0)
    assert type(first) is OrderedDict and first["betas"] == (0.9, 0.99) and first["optimizer"][0]["step"] == 3
    assert first["module"]["w"].tolist() == [[0, 1, 2], [3, 4, 5]] and first["module"]["view"].tolist() == [0, 1, 2]
    assert again["w"] is first["module"]["w"]
    assert isinstance(first["optimizer"][0]["exp_avg"], torch.nn.Parameter)
    assert first["optimizer"][0]["exp_avg"].tolist() == [1, 1, 1, 1]
    assert snapshot.bytes == (6 + 3 + 4) * 4
    held = snapshot.held_bytes

    snapshot.begin()  # the next save copies into the same buffers
    second = snapshot.copy(state, "model_states.pt")
    snapshot.finish()
    assert second["module"]["w"].data_ptr() == first["module"]["w"].data_ptr()
    assert second["module"]["w"][0, 0].item() == 100 and snapshot.held_bytes == held


def test_a_distinct_copy_never_shares_memory():
    """safetensors refuses tensors that share memory: two names for one tensor get a copy each."""
    tied = torch.ones(3)
    snapshot = HostSnapshot()
    snapshot.begin()
    copied = snapshot.copy({"a": tied, "b": tied}, "model.safetensors", distinct=True)
    assert copied["a"].data_ptr() != copied["b"].data_ptr()


def test_a_file_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch):
    state = {"x": torch.randn(50_000), "n": 7}
    target = tmp_path / "optim_states.pt"
    assert PendingFile(target, state, "torch").write() == target.stat().st_size
    loaded = torch.load(target, weights_only=False)
    assert torch.equal(loaded["x"], state["x"]) and loaded["n"] == 7
    model = tmp_path / "model.safetensors"
    tensors = {"w": torch.randn(3, 4).to(torch.bfloat16), "b": torch.zeros(2)}
    PendingFile(model, tensors, "safetensors", {"format": "pt"}).write()
    assert all(torch.equal(load_file(model)[k], v) for k, v in tensors.items())

    # Paced (the fault tests' variable), and failing half way: no file under either name.
    monkeypatch.setenv(PAUSE_VARIABLE, "0.001")
    broken = tmp_path / "broken.pt"
    with pytest.raises(TypeError):
        PendingFile(broken, {"x": torch.ones(100_000), "bad": threading.Lock()}, "torch").write()
    assert not broken.exists() and not list(tmp_path.glob(f"*{PARTIAL_SUFFIX}"))
    PendingFile(broken, state, "torch").write()  # paced, whole
    assert torch.equal(torch.load(broken, weights_only=False)["x"], state["x"])


def test_the_capture_defers_deepspeeds_and_transformers_large_files(tmp_path: Path):
    from transformers import modeling_utils

    class Engine:
        checkpoint_engine = object()

    engine, snapshot = Engine(), HostSnapshot()
    snapshot.begin()
    capture = Capture(snapshot)
    own = modeling_utils.safe_save_file
    with capturing(engine, capture):
        engine.checkpoint_engine.save({"module": {"w": torch.ones(2)}}, str(tmp_path / "mp_rank_00_model_states.pt"))
        modeling_utils.safe_save_file({"w": torch.ones(2)}, str(tmp_path / "model.safetensors"), metadata=None)
    assert modeling_utils.safe_save_file is own and not hasattr(engine.checkpoint_engine, "capture")
    assert [f.path.name for f in capture.files] == ["mp_rank_00_model_states.pt", "model.safetensors"]
    assert not list(tmp_path.iterdir())  # nothing written until the writer writes


def test_the_writer_publishes_only_after_the_saves_callbacks_and_raises_what_failed(tmp_path: Path):
    log = SaveLog("background")
    writer = BackgroundWriter()  # one rank: nothing to agree on
    published: list[float] = []

    def publish(figures: SaveFigures) -> int:
        published.append(time.monotonic())
        return 123

    figures = SaveFigures(4, "background", 0.0)
    log.saves.append(figures)
    files = [PendingFile(tmp_path / "a.pt", {"x": torch.ones(3)}, "torch")]
    writer.submit(Job(files, figures, time.monotonic(), publish, "checkpoint-4"))
    time.sleep(0.2)
    assert (tmp_path / "a.pt").is_file() and not published  # written, not published before release
    released = time.monotonic()
    writer.release()
    assert writer.wait() >= 0 and published and published[0] >= released
    assert figures.bytes == 123 and figures.write_seconds is not None and figures.mib_per_s is not None
    assert log.summary(step_seconds=2.0)["saves"][0]["stall_steps"] == 0.0

    bad = [PendingFile(tmp_path / "a.pt" / "b.pt", {"x": torch.ones(3)}, "torch")]  # under a file: cannot be
    writer.submit(Job(bad, SaveFigures(8, "background", 0.0), time.monotonic(), publish, "checkpoint-8"))
    with pytest.raises(OSError):
        writer.wait()
    assert len(published) == 1 and writer.pending is None


def test_the_run_record_goes_into_the_unpublished_checkpoint_and_records_what_each_save_cost(tmp_path: Path):
    from types import SimpleNamespace

    from zerokit.image.provenance import RECORD_NAME
    from zerokit.train.callbacks.run_record import RunRecorder
    from zerokit.train.options import TrainFlags

    saves = SaveLog("background")
    recorder = RunRecorder(TrainFlags(output_dir=tmp_path), resume=None, rank=0, layout={"dp_size": 1}, saves=saves)
    args = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=1, deepspeed=None, bf16=False,
                           fp16=False, output_dir=str(tmp_path))  # fmt: skip
    recorder.on_init_end(args, None, None)
    for step in (1, 2, 3, 4):
        recorder.on_step_end(args, SimpleNamespace(global_step=step), None)
    staging = tmp_path / "tmp-checkpoint-4" / "checkpoint-4"  # being written in the background
    staging.mkdir(parents=True)
    saves.saves.append(SaveFigures(4, "background", 0.5, 0.0, 100, 3.0, 2**20 * 6))
    recorder.on_save(args, SimpleNamespace(global_step=4), None)
    assert json.loads((staging / RECORD_NAME).read_text())["checkpoint"]["step"] == 4
    recorder.on_train_end(args, SimpleNamespace(global_step=4), None)
    record = json.loads((tmp_path / RECORD_NAME).read_text())["checkpoint_saves"]
    assert record["write"] == "background" and record["median_step_seconds"] > 0
    (save,) = record["saves"]
    assert save["step"] == 4 and save["mib_per_s"] == 2.0 and save["stall_steps"] > 0


def test_a_file_whose_copy_finds_no_host_memory_is_written_in_place(tmp_path: Path, monkeypatch, capsys):
    from zerokit.train.checkpoints import host_snapshot

    monkeypatch.setattr(host_snapshot, "RESERVE_BYTES", 2**60)  # no node has that much left
    monkeypatch.setattr(Capture, "warned", False)
    written: list[str] = []
    snapshot = HostSnapshot()
    snapshot.begin()
    capture = Capture(snapshot)
    capture.torch_file({"x": torch.ones(2)}, tmp_path / "optim_states.pt", lambda: written.append("optim"))
    capture.safetensors_file({"w": torch.ones(2)}, tmp_path / "model.safetensors", None, lambda: written.append("w"))
    assert written == ["optim", "w"] and capture.files == []
    assert capsys.readouterr().err.count("no host memory to copy optim_states.pt") == 1
