"""launch names, before any rank starts, a DeepSpeed op the job's config needs that the install has not prebuilt:
a warning, or with --strict-ops a refusal (zerokit.launch.job_ops)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.foundations.errors import UserError
from zerokit.image.ds_install import Prebuilt, read_prebuilt
from zerokit.launch.config import parse
from zerokit.launch.job import read_job
from zerokit.launch.job_ops import check_job_ops, ops_loaded
from zerokit.launch.job_ops import job_ds_config as ds_config_of
from zerokit.launch.plan import plan
from zerokit.sources.ds_configs import bundled

PY = "/venv/bin/python"
TRAIN = (PY, "-m", "zerokit", "train")
SCRIPT = (PY, "-m", "zerokit.launch.rank.user_script", "fit.py")
LION = {
    "optimizer": {"type": "Lion", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 2},
    "train_micro_batch_size_per_gpu": "auto",
}
CPU_IMAGE = Prebuilt("cpu", {"cpu_adam": True, "cpu_lion": True, "fused_adam": True, "async_io": True})


def checked(target: tuple[str, ...], environ: dict[str, str], prebuilt: Prebuilt | None, strict: bool) -> dict:
    """launch's order: the job's ops read once from its config, then compared with the install's."""
    return check_job_ops(ops_loaded(read_job(target, environ), environ, prebuilt), prebuilt, strict)


def job_ds_config(target: tuple[str, ...], environ: dict[str, str]) -> dict | None:
    """The config of the job launch reads from target."""
    return ds_config_of(read_job(target, environ))


def write(folder: Path, config: dict, name: str = "ds.json") -> str:
    path = folder / name
    path.write_text(json.dumps(config))
    return str(path)


def test_train_uses_its_config_flag_then_zerokit_config_then_its_default(tmp_path):
    offload = json.loads(bundled("zero3-offload").read_text())
    assert job_ds_config((*TRAIN, "--config", "zero3-offload", "--max_steps", "3"), {}) == offload
    assert job_ds_config((*TRAIN, "--config=zero3-offload"), {}) == offload
    assert job_ds_config(TRAIN, {"ZEROKIT_CONFIG": "zero3-offload"}) == offload
    bundled_zero2 = json.loads(bundled("zero2").read_text())
    assert job_ds_config(TRAIN, {}) == bundled_zero2
    assert job_ds_config((*TRAIN, "--config", write(tmp_path, LION)), {"ZEROKIT_CONFIG": "zero3"}) == LION
    assert job_ds_config((*TRAIN, "--config", "none"), {}) is None
    with pytest.raises(UserError, match="DeepSpeed config not found: zero9"):  # refused before any rank starts
        job_ds_config((*TRAIN, "--config", "zero9"), {})
    deepcompile = {**json.loads(bundled("zero2").read_text()), "compile": {"deepcompile": True}}  # as train hands it
    assert job_ds_config((*TRAIN, "--compile", "deepcompile"), {}) == deepcompile
    assert job_ds_config(TRAIN, {"ZEROKIT_COMPILE": "deepcompile"}) == deepcompile
    assert job_ds_config((*TRAIN, "--compile=torch"), {"ZEROKIT_COMPILE": "deepcompile"}) == bundled_zero2
    unbatched = write(tmp_path, {"zero_optimization": {"stage": 1}}, "pipeline.json")  # --pp-size's engine batches
    assert job_ds_config((*TRAIN, "--config", unbatched, "--pp-size", "2"), {}) == {"zero_optimization": {"stage": 1}}
    with pytest.raises(UserError, match="sets neither train_micro_batch_size_per_gpu nor train_batch_size"):
        job_ds_config((*TRAIN, "--config", unbatched), {})
    typo = write(tmp_path, {"zero_optimisation": {"stage": 2}}, "typo.json")
    with pytest.raises(UserError, match="unknown key zero_optimisation: did you mean zero_optimization"):
        job_ds_config((*TRAIN, "--config", typo), {})


def test_a_script_names_its_config_with_hfs_or_deepspeeds_flag(tmp_path):
    path = write(tmp_path, LION)
    assert job_ds_config((*SCRIPT, "--deepspeed", path), {}) == LION
    assert job_ds_config((*SCRIPT, f"--deepspeed={path}"), {}) == LION
    assert job_ds_config(("deepspeed", "fit.py", "--deepspeed", "--deepspeed_config", path), {}) == LION
    assert job_ds_config((*SCRIPT, "--deepspeed_config", path, "--lr", "1"), {}) == LION
    assert job_ds_config((*SCRIPT, "--config", path), {}) is None  # --config is train's alone
    assert job_ds_config(SCRIPT, {}) is None


def test_a_config_that_cannot_be_read_says_nothing(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1]")
    for name in ("missing.json", "broken.json", "list.json"):
        assert job_ds_config((*SCRIPT, "--deepspeed", str(tmp_path / name)), {}) is None
    assert checked((*SCRIPT, "--deepspeed", str(tmp_path / "broken.json")), {}, CPU_IMAGE, True) == {}


def test_an_op_not_prebuilt_is_a_warning_by_default(tmp_path, capsys):
    target = (*SCRIPT, "--deepspeed", write(tmp_path, LION))
    assert checked(target, {}, CPU_IMAGE, False) == {
        "fused_lion": "the config's optimizer Lion; DeepSpeed's cpu accelerator has none"
    }
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("launch: warning: DeepSpeed op fused_lion (the config's optimizer Lion")
    assert "is not prebuilt in this install: DeepSpeed will JIT-compile it on every node at start" in line
    assert line.endswith("(--strict-ops refuses to start)")


def test_strict_ops_refuses_in_one_line_naming_every_op(tmp_path):
    lamb = {"optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}
    target = (*SCRIPT, "--deepspeed", write(tmp_path, lamb))
    cuda = Prebuilt("cuda", {"fused_adam": True, "fused_lamb": False, "async_io": False})
    with pytest.raises(UserError) as refusal:
        checked(target, {}, cuda, True)
    message = str(refusal.value)
    assert "\n" not in message
    assert message.startswith(
        "DeepSpeed ops fused_lamb (the config's optimizer Lamb), async_io (zero_optimization.offload_param to nvme) "
        "are not prebuilt"
    )
    assert message.endswith("; not starting (--strict-ops)")


def test_prebuilt_ops_no_deepspeed_or_no_config_pass_quietly(tmp_path, capsys):
    adam = (*SCRIPT, "--deepspeed", write(tmp_path, {"optimizer": {"type": "AdamW"}}))
    assert checked(adam, {}, CPU_IMAGE, True) == {}
    assert checked((*SCRIPT, "--deepspeed", write(tmp_path, LION)), {}, None, True) == {}
    assert checked(("sh", "-c", "true"), {}, CPU_IMAGE, True) == {}
    assert capsys.readouterr().err == ""


def test_ds_accelerator_picks_the_builders(tmp_path):
    """A cuda build run with DS_ACCELERATOR=cpu resolves ops as the CPU accelerator does."""
    target = (*SCRIPT, "--deepspeed", write(tmp_path, LION))
    cuda = Prebuilt("cuda", {"fused_lion": False})
    assert checked(target, {}, cuda, False) == {"fused_lion": "the config's optimizer Lion"}
    (why,) = checked(target, {"DS_ACCELERATOR": "cpu"}, cuda, False).values()
    assert why.endswith("DeepSpeed's cpu accelerator has none")


def test_strict_ops_is_a_flag_and_a_variable_and_reaches_a_head_nodes_hosts(tmp_path):
    assert not parse(["train"], {}, PY).strict_ops
    assert parse(["--strict-ops", "train"], {}, PY).strict_ops
    assert parse(["train"], {"ZEROKIT_STRICT_OPS": "1"}, PY).strict_ops
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    for strict, expected in ((["--strict-ops"], "1"), ([], None)):
        config = parse([*strict, "--launcher", "pdsh", "--hostfile", str(hostfile), "train"], {}, PY)
        p = plan(config, None, {}, 8, lambda address: "ib0", lambda: 41000)
        assert p.env.get("ZEROKIT_STRICT_OPS") == expected


@pytest.fixture
def lion_not_prebuilt() -> None:
    prebuilt = read_prebuilt()
    if prebuilt is None or prebuilt.ops.get("fused_lion"):
        pytest.skip("needs a DeepSpeed install without fused_lion prebuilt (the cpu stack's)")


@pytest.mark.usefixtures("lion_not_prebuilt")
def test_launch_refuses_under_strict_ops_before_any_rank_and_warns_by_default(tmp_path: Path, zk_env):
    config = write(tmp_path, LION)
    marker = tmp_path / "ran"
    command = ["--", "sh", "-c", f"touch {marker}", "sh", "--deepspeed", config]
    refused = run_zerokit(["launch", "--strict-ops", "--nproc-per-node", "1", *command], zk_env, timeout=60)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert line.startswith("error: DeepSpeed op fused_lion (the config's optimizer Lion")
    assert not marker.exists()
    warned = run_zerokit(["launch", "--nproc-per-node", "1", *command], zk_env, timeout=60)
    assert warned.returncode == 0, warned.stderr
    assert "launch: warning: DeepSpeed op fused_lion (the config's optimizer Lion" in warned.stderr
    assert marker.exists()
    marker.unlink()
    unchecked = run_zerokit(["launch", "--strict-ops", "--no-preflight", *command], zk_env, timeout=60)
    assert unchecked.returncode == 0 and "fused_lion" not in unchecked.stderr, unchecked.stderr
    assert marker.exists()
