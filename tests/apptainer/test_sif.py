"""train.sif under a real Apptainer: its metadata and gate, and the README's commands run by a user
who is neither root nor the image's uid 1000, from their own directory."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from tests.apptainer.runtime import REPO, Apptainer, Caller
from tests.conftest import logged_losses

TRAIN = ["--max_steps", "30", "--logging_steps", "10"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_inspect_shows_stack_versions_ops_and_commit(apptainer: Apptainer, sif: Path):
    result = apptainer.run("inspect", "--json", str(sif))
    assert result.returncode == 0, result.stderr
    labels = json.loads(result.stdout)["data"]["attributes"]["labels"]
    assert labels["io.zerokit.stack"] == "cpu"
    assert labels["io.zerokit.torch"] == "2.13.0+cpu"
    assert labels["io.zerokit.deepspeed"] == "0.19.8"
    assert "cpu_adam" in labels["io.zerokit.ds-ops"].split(",")
    assert len(labels["org.opencontainers.image.revision"]) >= 7


def test_apptainer_test_runs_doctor_strictly_and_passes(apptainer: Apptainer, sif: Path):
    result = apptainer.run("test", str(sif))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "0 fail" in result.stdout + result.stderr


def test_run_help_shows_the_commands(apptainer: Apptainer, sif: Path):
    result = apptainer.run("run-help", str(sif))
    assert "apptainer exec --nv train.sif train --config zero3" in result.stdout
    assert "srun apptainer exec --nv train.sif launch train" in result.stdout


def test_an_image_missing_an_op_of_its_stack_fails_its_test(apptainer: Apptainer, sif: Path, tmp_path: Path):
    """The same image with cpu_adam's .so removed: %test (doctor --strict) fails the build, naming the op."""
    definition = tmp_path / "broken.def"
    definition.write_text(
        f"Bootstrap: localimage\nFrom: {sif}\n\n%post\n"
        "    rm -v /opt/venv/lib/python3*/site-packages/deepspeed/ops/adam/cpu_adam_op*.so\n\n"
        "%test\n    doctor --strict\n"
    )
    result = apptainer.run("build", "--sandbox", str(tmp_path / "broken"), str(definition), cwd=tmp_path)
    log = result.stdout + result.stderr
    assert "removed" in log, log[-3000:]  # the op was there to remove
    assert result.returncode != 0, log[-3000:]
    assert "op: cpu_adam" in log and "fail" in log


def caller_train(caller: Caller, sif: Path, command: list[str], tmp: str = "") -> tuple[Path, str]:
    """Run `apptainer COMMAND` as the caller in a directory of theirs; (that directory, the output)."""
    work = caller.workdir()
    shutil.copy(REPO / "configs" / "zero3.json", work / "zero3.json")
    before = digest(sif)
    result = caller.run(["apptainer", *[str(sif) if word == "SIF" else word for word in command]], cwd=work)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert digest(sif) == before  # nothing was written into the image
    return work, log


def assert_trained_as_caller(caller: Caller, output: Path, log: str) -> None:
    losses = logged_losses(output)
    assert len(losses) == 3 and losses[-1] < 0.8 * losses[0], losses
    written = [output, *output.rglob("*")]
    assert {p.stat().st_uid for p in written} == {caller.uid}, "outputs must belong to the caller"
    assert (output / "model.safetensors").is_file()
    assert "Building extension" not in log and "JIT" not in log


def extensions_dir(apptainer: Apptainer, sif: Path) -> Path:
    result = apptainer.run("exec", str(sif), "sh", "-c", "echo $TORCH_EXTENSIONS_DIR")
    return Path(result.stdout.strip())


def test_exec_nv_train_one_rank_with_a_json_config(apptainer: Apptainer, caller: Caller, sif: Path):
    """`apptainer exec --nv train.sif train --config zero3.json` (no GPU here: --nv finds none and goes on)."""
    extensions = extensions_dir(apptainer, sif)
    work, log = caller_train(
        caller, sif, ["exec", "--nv", "SIF", "train", "--config", "zero3.json", "--output-dir", "run", *TRAIN]
    )
    assert_trained_as_caller(caller, work / "run", log)
    assert not extensions.exists() or list(extensions.rglob("*.so")) == []  # nothing JIT-compiled


def test_exec_launch_two_local_ranks(caller: Caller, sif: Path):
    work, log = caller_train(
        caller,
        sif,
        ["exec", "SIF", "launch", "--nproc-per-node", "2", "train", "--config", "zero3", "--output-dir", "run", *TRAIN],
    )
    assert "launch: rank 1 of 2" in log
    assert_trained_as_caller(caller, work / "run", log)


def test_run_is_train_unless_the_first_word_names_an_entrypoint(caller: Caller, sif: Path):
    """%runscript: `apptainer run train.sif ARGS` is `train ARGS` (the two trainings above show train itself)."""
    for words, program in ((["--config", "zero3", "--help"], "train"), (["doctor", "--help"], "doctor")):
        result = caller.run(["apptainer", "run", str(sif), *words], cwd=caller.workdir())
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.startswith(f"usage: {program} "), result.stdout[:300]


def test_caches_are_writable_and_the_image_is_not(caller: Caller, sif: Path):
    work = caller.workdir()
    result = caller.run(["apptainer", "exec", str(sif), "doctor", "--json", "--skip", "hub"], cwd=work)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for variable in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "HF_HOME"):
        assert rows[f"cache: {variable}"]["status"] == "ok", rows[f"cache: {variable}"]
    assert str(caller.home) in rows["cache: HF_HOME"]["detail"]
    touch = caller.run(["apptainer", "exec", str(sif), "touch", "/opt/venv/written"], cwd=work)
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr
