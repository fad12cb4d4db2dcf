"""zerokit-run.json's pieces without training: the environment it keeps (never a secret), the resume
chain, the checkpoint's size record, and doctor --against naming each difference on one line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from zerokit.doctor.against import compare, read_run_record
from zerokit.foundations.errors import UserError
from zerokit.image.provenance import RECORD_NAME, jsonable, recorded_environment, redacted_argv, sif_source
from zerokit.outputs import ownership
from zerokit.outputs.checkpoints import SIZES_NAME, damage, record_sizes
from zerokit.train.callbacks.run_record import RunRecorder, add_to_sizes, deepspeed_section, resume_chain, write_record
from zerokit.train.ds_settings import DeepSpeedSettings
from zerokit.train.options import TrainFlags


def test_the_environment_keeps_what_shapes_a_run_and_never_a_secret():
    environ = {
        "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0,1",
        "ZEROKIT_STACK": "cpu", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "HOME": "/root", "PATH": "/bin",
        "HF_TOKEN": "hf_x", "NCCL_SECRET": "s", "ZEROKIT_API_KEY": "k", "TORCH_PASSWORD": "p", "WANDB_API_KEY": "w",
    }  # fmt: skip
    kept = recorded_environment(environ)
    assert kept == {
        "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0,1",
        "ZEROKIT_STACK": "cpu", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }  # fmt: skip


def test_infinity_is_written_as_a_string_so_the_record_is_strict_json():
    assert jsonable({"steps_per_print": float("inf"), "x": [1.5, float("nan")]}) == {
        "steps_per_print": "inf",
        "x": [1.5, "nan"],
    }


def test_a_resumed_run_names_its_checkpoint_then_that_checkpoints_own_chain(tmp_path: Path):
    older = tmp_path / "a" / "checkpoint-4"
    newer = tmp_path / "b" / "checkpoint-8"
    older.mkdir(parents=True)
    newer.mkdir(parents=True)
    write_record(older / RECORD_NAME, {"started_at": "t0", "zerokit": {"commit": "c0"}, "resumed_from": []})
    chain_of_newer = resume_chain(older)
    write_record(newer / RECORD_NAME, {"started_at": "t1", "zerokit": {"commit": "c1"}, "resumed_from": chain_of_newer})
    chain = resume_chain(newer)
    assert [(link["checkpoint"], link["step"], link["commit"]) for link in chain] == [
        (str(newer.resolve()), 8, "c1"),
        (str(older.resolve()), 4, "c0"),
    ]
    assert resume_chain(None) == []
    bare = tmp_path / "checkpoint-2"
    bare.mkdir()
    assert resume_chain(bare) == [{"checkpoint": str(bare.resolve()), "step": 2, "record": None}]


def test_the_folder_keeps_the_last_runs_records_until_this_run_has_stepped_then_its_history(tmp_path: Path):
    last = {"started_at": "t1", "ended_at": "t2", "final_step": 4, "argv": ["train"], "environment": {},
            "earlier_runs": [{"started_at": "t0"}]}  # fmt: skip
    write_record(tmp_path / RECORD_NAME, last)
    ownership.finish(tmp_path, ownership.begin(tmp_path, "train", replace=False))
    before = {name: (tmp_path / name).read_bytes() for name in (RECORD_NAME, ownership.RECORD_NAME)}
    claim = ownership.begin(tmp_path, "train", replace=False)  # a resume
    recorder = RunRecorder(TrainFlags(output_dir=tmp_path), resume=None, rank=0, layout={"dp_size": 1}, claim=claim)
    args = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=1, deepspeed=None, bf16=True)
    recorder.on_init_end(args, None, None)
    recorder.on_train_begin(args, None, None)  # a load that fails comes after this
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    recorder.on_step_end(args, SimpleNamespace(global_step=5), None)
    record = json.loads((tmp_path / RECORD_NAME).read_text())
    assert record["precision"] == "bf16" and record["started_at"] != "t1"
    assert record["earlier_runs"] == [
        {"started_at": "t1", "ended_at": "t2", "final_step": 4, "argv": ["train"], "zerokit": None,
         "parallelism": None, "precision": None},
        {"started_at": "t0"},
    ]  # fmt: skip
    assert not ownership.read_record(tmp_path).finished  # what it writes from now on is its own


def test_the_record_added_to_a_published_checkpoint_is_covered_by_its_damage_check(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint-3"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    record_sizes(checkpoint)
    write_record(checkpoint / RECORD_NAME, {"format": "zerokit-run/1"})
    add_to_sizes(checkpoint, RECORD_NAME)
    assert RECORD_NAME in json.loads((checkpoint / SIZES_NAME).read_text())
    assert damage(checkpoint) is None
    (checkpoint / RECORD_NAME).write_text("{")
    assert RECORD_NAME in (damage(checkpoint) or "")


def facts(**changes) -> dict:
    """An environment's facts as zerokit.image.provenance gathers them, with changes."""
    base = {
        "image": {"kind": "host", "python_prefix": "/opt/venv"},
        "stack": "cpu",
        "lock": {"file": "containers/lock/cpu.txt", "sha256": "aaa"},
        "zerokit": {"version": "0.1.0", "commit": "c1", "dirty": False},
        "versions": {"torch": "2.13.0+cpu", "deepspeed": "0.19.8", "cuda": None},
        "prebuilt_ops": ["cpu_adam", "fused_adam"],
        "environment": {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": "/tmp/a"},
    }
    return {**base, **changes}


def a_record(tmp_path: Path, config: dict) -> dict:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return {
        "format": "zerokit-run/1",
        "cwd": str(tmp_path),
        **facts(),
        "deepspeed": deepspeed_section(str(path), DeepSpeedSettings.read(path), str(path)),
    }


CONFIG = {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}, "train_batch_size": "auto"}


def test_identical_environments_have_no_differences(tmp_path: Path):
    result = compare(a_record(tmp_path, CONFIG), {}, now=facts())
    assert result.differences == []
    assert any('2 "auto" values' in note for note in result.notes)


def test_each_difference_is_named_on_its_own_line(tmp_path: Path):
    record = a_record(tmp_path, CONFIG)
    (tmp_path / "ds.json").write_text(
        json.dumps({**CONFIG, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})
    )
    now = facts(
        lock={"file": "containers/lock/cpu.txt", "sha256": "bbb"},
        versions={"torch": "2.13.0+cpu", "deepspeed": "0.19.9", "cuda": None},
        prebuilt_ops=["cpu_adam"],
        environment={"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring", "TORCH_EXTENSIONS_DIR": "/elsewhere"},
    )
    result = compare(record, {}, now=now)
    assert sorted(result.differences) == sorted(
        [
            "lock sha256: aaa in the record, bbb now",
            "version deepspeed: 0.19.8 in the record, 0.19.9 now",
            'prebuilt ops: ["cpu_adam", "fused_adam"] in the record, ["cpu_adam"] now',
            "environment NCCL_DEBUG: WARN in the record, INFO now",
            "environment NCCL_ALGO: (none) in the record, Ring now",
            f"deepspeed config zero_optimization.stage ({tmp_path / 'ds.json'}): 3 in the record, 2 now",
        ]
    )
    # OMP_NUM_THREADS is set by the launcher for each run: unset here, it is a note, not a difference.
    assert any("OMP_NUM_THREADS" in note for note in result.notes)


def test_a_launcher_variable_set_now_to_another_value_is_a_difference(tmp_path: Path):
    now = facts(environment={"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "8"})
    result = compare(a_record(tmp_path, CONFIG), {}, now=now)
    assert result.differences == ["environment OMP_NUM_THREADS: 1 in the record, 8 now"]


def test_a_config_that_cannot_be_found_now_is_a_difference(tmp_path: Path):
    record = a_record(tmp_path, CONFIG)
    (tmp_path / "ds.json").unlink()
    (line,) = compare(record, {}, now=facts()).differences
    assert "is not found now" in line


def test_something_that_is_not_a_run_record_is_refused_in_one_line(tmp_path: Path):
    with pytest.raises(UserError, match="cannot read it"):
        read_run_record(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(UserError, match="not a zerokit run record"):
        read_run_record(tmp_path / "x.json")


def test_an_images_short_commit_is_the_same_commit_as_the_checkouts(tmp_path: Path):
    record = {**a_record(tmp_path, CONFIG), "zerokit": {"version": "0.1.0", "commit": "c1" + "0" * 38}}
    now = facts(zerokit={"version": "0.1.0", "commit": "c1" + "0" * 10, "dirty": None})
    assert compare(record, {}, now=now).differences == []
    now = facts(zerokit={"version": "0.1.0", "commit": "c2" + "0" * 10, "dirty": None})
    assert [line.split(":")[0] for line in compare(record, {}, now=now).differences] == ["zerokit commit"]


def test_the_config_given_as_a_long_base64_string_is_read_not_opened():
    """--deterministic on CPU hands HF the config as base64 JSON, longer than a file name may be (ENAMETOOLONG)."""
    import base64
    import json

    from zerokit.train.callbacks.run_record import given_config

    config = {"zero_optimization": {"stage": 3}, "padding": "x" * 400, "torch_adam": True}
    encoded = base64.urlsafe_b64encode(json.dumps(config).encode()).decode()
    assert len(encoded) > 255 and given_config(encoded) == config


def test_a_secret_flags_value_is_never_recorded():
    argv = ["train", "--hub_token", "hf_x", "--api-key=k1", "--max_steps", "6", "--db_password", "p", "--push_to_hub"]
    assert redacted_argv(argv) == [
        "train", "--hub_token", "<redacted>", "--api-key=<redacted>", "--max_steps", "6", "--db_password",
        "<redacted>", "--push_to_hub",
    ]  # fmt: skip


def test_a_sif_built_from_a_registry_digest_records_it_as_its_source(tmp_path: Path):
    labels = tmp_path / "labels.json"
    deffile = "org.label-schema.usage.singularity.deffile"
    pinned = "127.0.0.1:5000/zerokit@sha256:" + "ab" * 32
    labels.write_text(json.dumps({f"{deffile}.bootstrap": "docker", f"{deffile}.from": pinned}))
    assert sif_source(labels) == f"docker://{pinned}"
    labels.write_text(json.dumps({f"{deffile}.bootstrap": "docker-daemon", f"{deffile}.from": "zerokit:cpu"}))
    assert sif_source(labels) == "docker-daemon:zerokit:cpu"
    assert sif_source(tmp_path / "no-sif") is None
