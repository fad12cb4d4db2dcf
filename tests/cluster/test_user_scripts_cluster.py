"""Users' own HF scripts (tests/users), unmodified, under `launch` inside train.sif across the 2 namespace nodes:
one job of 2 ranks, loss falling. The helpers here also set up tests/cluster/test_deepspeed_launcher.py's job.
About 1 minute per test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.apptainer.runtime import REPO, Apptainer
from tests.cluster.netcluster import Cluster
from tests.cluster.test_apptainer_cluster import sif_env

LOSS = re.compile(r"'loss': '?([0-9.]+)")


def tutorial_job(cluster: Cluster, name: str) -> tuple[Path, list[str]]:
    """A user's folder on the shared filesystem: the tutorial script, its inputs, a hostfile, .deepspeed_env."""
    from transformers import AutoTokenizer

    from zerokit.sources.embedded import model_config, prepare_embedded
    from zerokit.train.model.loading import fit_to_tokenizer

    tmp = cluster.shared_dir / name
    tmp.mkdir()
    files, tokenizer = prepare_embedded(tmp / "inputs")
    fit_to_tokenizer(model_config(), AutoTokenizer.from_pretrained(tokenizer)).save_pretrained(tmp / "config")
    shutil.copy(REPO / "tests/users/tutorial_trainer.py", tmp)
    (tmp / "hostfile").write_text("node1 slots=1\nnode2 slots=1\n")
    # DeepSpeed's launcher exports these on every node (its documented way to pass variables).
    (tmp / ".deepspeed_env").write_text(
        f"HF_HUB_OFFLINE=1\nHF_HOME={tmp / 'hf-home'}\nOMP_NUM_THREADS=1\nMASTER_ADDR={cluster.ips['node1']}\n"
    )
    script = ["--module", "zerokit.launch.rank.user_script", "tutorial_trainer.py",
              "--model_config", str(tmp / "config"), "--tokenizer", str(tokenizer),
              "--train_file", str(files["train"]), "--max_steps", "12",
              "--output_dir", str(tmp / "out")]  # fmt: skip
    return tmp, script


def start_in_sif(
    cluster: Cluster, apptainer: Apptainer, sif: Path, tmp: Path, argv: list[str]
) -> subprocess.CompletedProcess[str]:
    """`apptainer exec SIF ARGV` on node1 in the job's folder, the harness's ssh_config bound over the image's."""
    bind = f"{cluster.run_dir / 'ssh' / 'ssh_config'}:/etc/ssh/ssh_config"
    env = sif_env(tmp, apptainer, sif, APPTAINER_BIND=bind)
    return cluster.run("node1", ["apptainer", "exec", str(sif), *argv], env=env, cwd=tmp, timeout=600)


def run_in_sif(cluster: Cluster, apptainer: Apptainer, sif: Path, tmp: Path, argv: list[str]) -> str:
    result = start_in_sif(cluster, apptainer, sif, tmp, argv)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    return log


def assert_two_node_job(log: str, tmp: Path) -> None:
    assert "tutorial: rank 0 of world size 2" in log and "tutorial: rank 1 of world size 2" in log, log[-4000:]
    losses = [float(x) for x in LOSS.findall(log)]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    assert (tmp / "out" / "model.safetensors").is_file()


@pytest.mark.parametrize("launcher", ["pdsh"])
def test_launch_runs_a_users_run_clm_on_two_nodes_in_the_sif(
    cluster: Cluster, apptainer: Apptainer, sif: Path, launcher: str
):
    """`launch --launcher pdsh` in the SIF with transformers' run_clm-style script, --deepspeed ZeRO-3, no
    --use_cpu: one job of 2 ranks across node1 and node2."""
    tmp, _ = tutorial_job(cluster, f"clm-{launcher}")
    shutil.copy(REPO / "tests/users/run_clm.py", tmp)
    shutil.copy(REPO / "configs/zero3.json", tmp)
    (tmp / "hosts").write_text("node1\nnode2\n")
    argv = ["launch", "--launcher", launcher, "--hostfile", "hosts", "--nproc-per-node", "1", "--", "python",
            "run_clm.py", "--config_name", str(tmp / "config"), "--tokenizer_name", str(tmp / "inputs/tokenizer"),
            "--train_file", str(tmp / "inputs/corpus/train.txt"), "--block_size", "64", "--do_train",
            "--max_steps", "12", "--logging_steps", "3", "--per_device_train_batch_size", "4",
            "--learning_rate", "5e-3", "--report_to", "none", "--save_strategy", "no", "--output_dir",
            str(tmp / "out"), "--deepspeed", "zero3.json"]  # fmt: skip
    log = run_in_sif(cluster, apptainer, sif, tmp, argv)
    assert "run_clm: rank 0 of world size 2" in log and "run_clm: rank 1 of world size 2" in log, log[-4000:]
    losses = [float(x) for x in LOSS.findall(log)]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    assert (tmp / "out" / "model.safetensors").is_file()
