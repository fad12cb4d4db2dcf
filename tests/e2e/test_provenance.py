"""zerokit-run.json on a real run: every field filled, in the output folder and each checkpoint, the
resume chain; no token planted on the command line or in the environment reaches a file of the run or its output;
`doctor --against` it passes here and names planted differences (another DeepSpeed config value, another lock,
another NCCL setting), one line each. A resume into the run as another model is refused in one line before
anything is written: every byte of the folder, its records too, stays.

Two short 2-rank ZeRO-3 runs on CPU (the second resumes the first), three doctor runs and a refused resume: about
2 min.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, isolated_env, run_zerokit
from zerokit.foundations.files import sha256_file
from zerokit.outputs.checkpoints import SIZES_NAME, damage
from zerokit.outputs.ownership import read_record

# Tokens planted on the command line and in the environment: none may reach a file of the run or its output.
TOKENS = {
    "--hub_token": "hf_plantedOnTheCommandLine4711",
    "HF_TOKEN": "hf_plantedInHfTokenVariable4711",
    "HUGGING_FACE_HUB_TOKEN": "hf_plantedInTheOldVariable4711",
}
SECRET = TOKENS["HF_TOKEN"]
TINY_LLAMA = "hidden_size=64,intermediate_size=128,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2"


def train(output: Path, config: Path, env: dict[str, str], steps: int, *extra: str):
    argv = ["train", "--config", str(config), "--nproc-per-node", "2", "--output-dir", str(output)]
    argv += ["--max_steps", str(steps), "--per_device_train_batch_size", "8", "--save_strategy", "steps"]
    result = run_zerokit([*argv, "--save_steps", "2", *extra], env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout + result.stderr
    assert not [name for name, token in TOKENS.items() if token in printed]  # nor in the logs
    return printed


def doctor(record: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_zerokit(["doctor", "--against", str(record)], env, timeout=120)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """A run of 4 steps resumed to 6, with a copy of zero3.json as its config, the tokens planted in both."""
    tmp = tmp_path_factory.mktemp("provenance")
    env = isolated_env(tmp)  # one environment for the module's shared run, its caches under tmp
    env.update(NCCL_DEBUG="WARN", HF_TOKEN=SECRET, HUGGING_FACE_HUB_TOKEN=TOKENS["HUGGING_FACE_HUB_TOKEN"])
    config = tmp / "ds.json"
    shutil.copy(REPO / "configs" / "zero3.json", config)
    output = tmp / "run"
    planted = ("--hub_token", TOKENS["--hub_token"], "--timings-dir", str(tmp / "timings"))
    printed = train(output, config, env, 4, *planted)
    first = json.loads((output / "zerokit-run.json").read_text())
    printed += train(output, config, env, 6, "--resume", "auto", *planted)
    assert "resuming from" in printed and (output / "checkpoint-6").is_dir()
    return output, config, {**env, "_first_started_at": first["started_at"]}


def test_no_file_of_the_run_holds_a_token(run):
    """Every file under the run's folders (the output, its checkpoints, --timings-dir, the caches); and
    training_args.bin still loads, its token field redacted."""
    output, _, _ = run
    root = output.parent
    holding = [
        f"{path.relative_to(root)} holds {name}'s token"
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
        for name, token in TOKENS.items()
        if token.encode() in path.read_bytes()
    ]
    assert holding == []
    assert any((root / "timings").iterdir())
    saved = [output / "training_args.bin", *output.glob("checkpoint-*/training_args.bin")]
    assert len(saved) == 4  # the model's, checkpoint-2's, -4's and -6's
    for path in saved:
        assert torch.load(path, weights_only=False).hub_token == "<redacted>"


def test_the_record_holds_every_field_with_real_values(run):
    output, config, _ = run
    text = (output / "zerokit-run.json").read_text()
    assert SECRET not in text and "HF_TOKEN" not in text
    assert not [p for p in output.glob("checkpoint-*/zerokit-run.json") if SECRET in p.read_text()]
    record = json.loads(text)
    assert record["argv"][record["argv"].index("--hub_token") + 1] == "<redacted>"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    lock = REPO / "containers" / "lock" / "cpu.txt"
    import deepspeed
    import torch

    assert record["image"] == {"kind": "host", "python_prefix": record["image"]["python_prefix"]}
    assert record["stack"] == "cpu"
    assert record["lock"]["sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert record["zerokit"]["commit"] == head and record["zerokit"]["version"]
    assert record["versions"]["torch"] == torch.__version__
    assert record["versions"]["deepspeed"] == deepspeed.__version__
    assert record["versions"]["cuda"] is None and record["versions"]["nccl"] is None  # a CPU build of torch
    assert {"cpu_adam", "fused_adam"} <= set(record["prebuilt_ops"])
    launcher = record["launcher"]
    assert launcher["world_size"] == 2 and launcher["hosts"] and launcher["scheduler"] and launcher["interface"]
    assert "--max_steps" in record["argv"] and "6" in record["argv"]
    assert record["started_at"] < record["ended_at"] and record["final_step"] == 6
    assert record["precision"] == "fp32"  # a CPU run
    assert record["environment"]["NCCL_DEBUG"] == "WARN"
    ds = record["deepspeed"]
    assert ds["file"] == str(config.resolve()) and ds["still_auto"] == []
    assert ds["resolved"]["train_batch_size"] == 16  # "auto": 8 per rank x 2 ranks
    assert ds["resolved"]["zero_optimization"]["stage"] == 3
    assert "auto" not in json.dumps(ds["resolved"])


def test_each_checkpoint_carries_the_record_and_its_resume_chain(run):
    output, _, env = run
    for step in (4, 6):
        checkpoint = output / f"checkpoint-{step}"
        record = json.loads((checkpoint / "zerokit-run.json").read_text())
        assert record["checkpoint"]["step"] == step
        assert "zerokit-run.json" in json.loads((checkpoint / SIZES_NAME).read_text())
        assert damage(checkpoint) is None
    (link,) = json.loads((output / "checkpoint-6" / "zerokit-run.json").read_text())["resumed_from"]
    assert link["checkpoint"] == str((output / "checkpoint-4").resolve()) and link["step"] == 4
    assert link["run_started_at"] == env["_first_started_at"]
    assert "zerokit-run.json" in read_record(output).owned  # --overwrite removes it with the run's files
    (earlier,) = json.loads((output / "zerokit-run.json").read_text())["earlier_runs"]  # the first run's, kept
    assert earlier["started_at"] == env["_first_started_at"] and earlier["final_step"] == 4


def test_doctor_against_the_record_passes_here_and_names_planted_differences(run, tmp_path: Path):
    output, config, env = run
    env = {k: v for k, v in env.items() if not k.startswith("_")}
    same = doctor(output / "zerokit-run.json", env)
    assert same.returncode == 0, same.stdout + same.stderr[-2000:]
    assert "no differences" in same.stdout

    # Another environment: another DeepSpeed config value, another lock (a ZEROKIT_HOME whose lock
    # differs), another NCCL setting.
    planted = json.loads(config.read_text())
    planted["zero_optimization"]["stage3_max_live_parameters"] = 5
    config.write_text(json.dumps(planted))
    home = tmp_path / "home"
    shutil.copytree(REPO / "containers" / "stacks", home / "containers" / "stacks")
    shutil.copytree(REPO / "configs", home / "configs")
    (home / "containers" / "lock").mkdir()
    lock = (REPO / "containers" / "lock" / "cpu.txt").read_text()
    (home / "containers" / "lock" / "cpu.txt").write_text(lock.replace("rich==", "rich==0.0.0\n# was rich==", 1))
    other = doctor(output / "zerokit-run.json", {**env, "ZEROKIT_HOME": str(home), "NCCL_DEBUG": "INFO"})
    assert other.returncode == 1
    lines = [line for line in other.stdout.splitlines() if line.startswith("differs: ")]
    assert any(
        line.startswith("differs: deepspeed config zero_optimization.stage3_max_live_parameters")
        and line.endswith("1000000000 in the record, 5 now")
        for line in lines
    ), other.stdout
    assert any(line.startswith("differs: lock sha256: ") for line in lines), other.stdout
    assert "differs: environment NCCL_DEBUG: WARN in the record, INFO now" in lines
    assert other.stdout.splitlines()[-1].endswith(f"{len(lines)} differences")


def tree(folder: Path) -> dict[str, str]:
    """Every path under folder, each file's as its sha256 (a folder's as "")."""
    return {str(p.relative_to(folder)): sha256_file(p) if p.is_file() else "" for p in sorted(folder.rglob("*"))}


def test_a_resume_into_another_models_run_is_refused_in_one_line_and_leaves_every_byte(run, tmp_path: Path):
    output, _, env = run
    env = {k: v for k, v in env.items() if not k.startswith("_")}
    folder = shutil.copytree(output, tmp_path / "run", symlinks=True)
    before = tree(folder)
    argv = ["train", "--config", "zero3", "--nproc-per-node", "2", "--output-dir", str(folder), "--resume", "auto",
            "--model-type", "llama", "--config-overrides", TINY_LLAMA, "--max_steps", "8"]  # fmt: skip
    result = run_zerokit(argv, env, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    refused = f"checkpoint {folder / 'checkpoint-6'} holds a gpt2 (GPT2LMHeadModel) model, this run's is a llama "
    assert refused in errors[0]
    assert "another --output-dir" in errors[0] and "--overwrite" in errors[0]
    assert tree(folder) == before  # its records (zerokit-run.json, .zerokit-output.json) too
