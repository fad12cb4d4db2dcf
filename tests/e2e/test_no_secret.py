"""No secret in any file a run writes: a token planted on the command line (`--hub_token`) and in the
environment (HF_TOKEN, HUGGING_FACE_HUB_TOKEN) is in no byte of any file under the run's folders (the
output folder, its checkpoints, --timings-dir, the caches) nor in what it printed, and a resumed run
still works. training_args.bin still loads, with the token field redacted.

Two short one-rank ZeRO-2 runs on CPU (4 steps, then resumed to 6): about 40 s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.conftest import isolated_env, run_zerokit

TOKENS = {
    "--hub_token": "hf_plantedOnTheCommandLine4711",
    "HF_TOKEN": "hf_plantedInHfTokenVariable4711",
    "HUGGING_FACE_HUB_TOKEN": "hf_plantedInTheOldVariable4711",
}


def files_holding_a_token(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)} holds {name}'s token"
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
        for name, token in TOKENS.items()
        if token.encode() in path.read_bytes()
    ]


def test_no_file_and_no_line_of_a_run_holds_a_token(tmp_path: Path):
    env = isolated_env(tmp_path)
    env.update(HF_TOKEN=TOKENS["HF_TOKEN"], HUGGING_FACE_HUB_TOKEN=TOKENS["HUGGING_FACE_HUB_TOKEN"])
    output = tmp_path / "run"
    argv = ["train", "--config", "zero2", "--output-dir", str(output), "--timings-dir", str(tmp_path / "timings")]
    argv += ["--per_device_train_batch_size", "8", "--logging_steps", "1", "--save_strategy", "steps"]
    argv += ["--save_steps", "2", "--hub_token", TOKENS["--hub_token"]]
    printed = ""
    for extra in (["--max_steps", "4"], ["--max_steps", "6", "--resume", "auto"]):
        result = run_zerokit([*argv, *extra], env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        printed += result.stdout + result.stderr
    assert "resuming from" in printed and (output / "checkpoint-6").is_dir()

    assert files_holding_a_token(tmp_path) == []
    assert not [name for name, token in TOKENS.items() if token in printed]
    saved = [output / "training_args.bin", *output.glob("checkpoint-*/training_args.bin")]
    assert len(saved) == 4  # the model's, checkpoint-2's, -4's and -6's
    for path in saved:
        assert torch.load(path, weights_only=False).hub_token == "<redacted>"
