"""The job scripts and launch with CONTAINER=apptainer on the 2-node namespace cluster: every rank runs in
train.sif under a real Apptainer (tests/apptainer), and 2 nodes agree with 1 node.

The nodes' host environment has apptainer and nothing of zerokit: `launch` and `train` exist only in the image.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from tests.apptainer.runtime import REPO, Apptainer
from tests.cluster.netcluster import Cluster
from tests.cluster.test_launch_cluster import (
    assert_killed_node_ends_the_job,
    assert_trained,
    cpu_job_script,
    ranks_seen,
    sbatch,
    train_args,
)
from tests.conftest import isolated_env, logged_losses, run_zerokit
from tests.e2e.test_pipeline import llama_argv
from tests.e2e.test_tensor_parallel import TINY_LLAMA
from tests.unit.fake_nccl_plugin import NEWER_GLIBC_VERSION, build, needs_gcc
from zerokit.image.container import PASS_JOB_ENV
from zerokit.image.plugin_binds import DEPS_MOUNT, PLUGIN_MOUNT


def sif_env(tmp: Path, apptainer: Apptainer, sif: Path, **extra: str) -> dict[str, str]:
    """A user's host environment: apptainer on PATH, the job scripts' settings, private caches."""
    return {
        "PATH": f"{apptainer.directory}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CONTAINER": "apptainer",
        "IMAGE": str(sif),
        "ZEROKIT_DIR": str(REPO),
        "HF_HOME": str(tmp / "hf-home"),
        "TORCH_EXTENSIONS_DIR": str(tmp / "torch-extensions"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
        **extra,
    }


def assert_in_image_without_jit(tmp: Path, log: str) -> None:
    assert "Building extension" not in log
    extensions = tmp / "torch-extensions"
    assert not extensions.exists() or list(extensions.rglob("*.so")) == []


@pytest.fixture(scope="module")
def sbatch_per_rank(cluster: Cluster, apptainer: Apptainer, sif: Path) -> tuple[Path, int, str]:
    tmp = cluster.shared_dir / "sif-sbatch"
    tmp.mkdir()
    env = sif_env(tmp, apptainer, sif, TRAIN_ARGS=train_args(tmp / "run"))
    code, log = sbatch(cluster, cpu_job_script("scripts/slurm/train.sbatch", tmp), tmp, env, "--ntasks-per-node=1")
    return tmp, code, log


def test_sbatch_starts_each_rank_in_the_sif(sbatch_per_rank):
    tmp, code, log = sbatch_per_rank
    assert code == 0, log[-4000:]
    assert ranks_seen(log) == {0: "node1", 1: "node2"}
    assert_trained(tmp / "run")
    assert_in_image_without_jit(tmp, log)


def generate_job(tmp: Path) -> str:
    """A folder with rows for a generate job script; its GENERATE_ARGS but for the output."""
    tmp.mkdir()
    rows = tmp / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"what is {n} plus 1", "n": n}) + "\n" for n in range(10)))
    return f'--jsonl {rows} --template "Q: {{question}}\\nA:" --max-new-tokens 6 --batch-size 2'


def test_generate_job_script_shares_the_rows_over_both_nodes(cluster, apptainer: Apptainer, sif: Path, sbatch_per_rank):
    """scripts/slurm/generate.sbatch in the SIF on the model the train job wrote: one rank per node, each row
    once, in input order, with its fields, and the same text as one process on the host gives."""
    model = sbatch_per_rank[0] / "run"
    tmp = cluster.shared_dir / "sif-generate"
    args = generate_job(tmp)
    env = sif_env(tmp, apptainer, sif, MODEL=str(model), RANKS_PER_NODE="1",
                  GENERATE_ARGS=f"{args} --output {tmp / 'answers.jsonl'} --report {tmp / 'report.json'}")  # fmt: skip
    script = cpu_job_script("scripts/slurm/generate.sbatch", tmp)
    code, log = sbatch(cluster, script, tmp, env, "--job-name=zerokit-generate")
    assert code == 0, log[-4000:]
    assert ranks_seen(log) == {0: "node1", 1: "node2"}
    assert_in_image_without_jit(tmp, log)
    one = run_zerokit(["generate", str(model), *shlex.split(args), "--output", str(tmp / "one.jsonl")],
                      isolated_env(tmp / "host"))  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    answers = [json.loads(line) for line in (tmp / "answers.jsonl").read_text().splitlines()]
    assert [row["n"] for row in answers] == list(range(10))
    assert (tmp / "answers.jsonl").read_text() == (tmp / "one.jsonl").read_text()
    assert json.loads((tmp / "report.json").read_text())["ranks"] == 2


@pytest.fixture(scope="module")
def one_node_in_the_sif(cluster: Cluster, apptainer: Apptainer, sif: Path) -> list[float]:
    """The losses of the same run on one node, 2 local ranks in the SIF: what the 2-node runs must match."""
    one = cluster.shared_dir / "sif-one-node"
    one.mkdir()
    argv = ["apptainer", "exec", str(sif), "train", "--nproc-per-node", "2", *train_args(one / "run").split()]
    result = cluster.run("node1", argv, env=sif_env(one, apptainer, sif), cwd=one, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return logged_losses(one / "run")


def test_two_nodes_in_the_sif_match_one_node(sbatch_per_rank, one_node_in_the_sif):
    tmp, code, _ = sbatch_per_rank
    assert code == 0
    assert one_node_in_the_sif == pytest.approx(logged_losses(tmp / "run"), abs=1e-4)


def test_pdsh_from_inside_the_sif_reenters_it_on_the_other_node(
    cluster: Cluster, apptainer: Apptainer, sif: Path, one_node_in_the_sif
):
    """`launch --launcher pdsh` in the SIF on node1 ssh-es to node2, whose bare ssh PATH has no apptainer and
    no zerokit: the remote command finds apptainer on the PATH that Apptainer kept (USER_PATH) and runs
    the same SIF there. ssh inside the image reads the image's /etc/ssh: a user's settings and keys are in
    ~/.ssh, which Apptainer binds; this harness's are in one ssh_config for all nodes, bound over the image's."""
    tmp = cluster.shared_dir / "sif-pdsh"
    tmp.mkdir()
    (tmp / "hosts").write_text("node1\nnode2\n")
    env = sif_env(tmp, apptainer, sif, APPTAINER_BIND=f"{cluster.run_dir / 'ssh' / 'ssh_config'}:/etc/ssh/ssh_config")
    argv = ["apptainer", "exec", str(sif), "launch", "--launcher", "pdsh", "--hostfile", str(tmp / "hosts"),
            "--nproc-per-node", "1", "--", "train", *train_args(tmp / "run").split()]  # fmt: skip
    result = cluster.run("node1", argv, env=env, cwd=tmp, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert set(ranks_seen(log).items()) == {(0, "node1"), (1, "node2")}
    assert_trained(tmp / "run")
    assert_in_image_without_jit(tmp, log)
    assert one_node_in_the_sif == pytest.approx(logged_losses(tmp / "run"), abs=1e-4)


def test_mpirun_from_inside_the_sif_reenters_it_on_the_other_node(
    cluster: Cluster, apptainer: Apptainer, sif: Path, one_node_in_the_sif
):
    """`launch --launcher mpirun` in the SIF: the image's OpenMPI starts orted on node2 over the image's ssh,
    which re-enters the SIF there (zerokit.launch.remote_shell); the ranks then start in the image as they are."""
    tmp = cluster.shared_dir / "sif-mpirun-inside"
    tmp.mkdir()
    (tmp / "hosts").write_text("node1\nnode2\n")
    env = sif_env(
        tmp,
        apptainer,
        sif,
        APPTAINER_BIND=f"{cluster.run_dir / 'ssh' / 'ssh_config'}:/etc/ssh/ssh_config",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    argv = ["apptainer", "exec", str(sif), "launch", "--launcher", "mpirun", "--hostfile", str(tmp / "hosts"),
            "--nproc-per-node", "1", "--", "train", *train_args(tmp / "run").split()]  # fmt: skip
    result = cluster.run("node1", argv, env=env, cwd=tmp, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert set(ranks_seen(log).items()) == {(0, "node1"), (1, "node2")}
    assert_trained(tmp / "run")
    assert one_node_in_the_sif == pytest.approx(logged_losses(tmp / "run"), abs=1e-4)


def test_killing_one_nodes_rank_in_the_sif_ends_the_job_without_a_hang(
    cluster: Cluster, apptainer: Apptainer, sif: Path
):
    """srun starts each rank in the SIF; SIGKILL of node2's rank ends the job non-zero in under 2 minutes."""
    tmp = cluster.shared_dir / "sif-failure"
    tmp.mkdir()
    assert_killed_node_ends_the_job(cluster, ["apptainer", "exec", str(sif)], tmp, sif_env(tmp, apptainer, sif))


def tp_train_args(output: Path, tp: int) -> str:
    """A tiny Llama (AutoTP splits it) as tests/e2e/test_tensor_parallel.py trains it: global batch 8 per
    data-parallel group, 20 steps, every loss logged."""
    return (
        f"--config zero2 --tp-size {tp} --model-type llama --config-overrides {TINY_LLAMA} --block-size 64 "
        f"--max_steps 20 --per_device_train_batch_size 8 --learning_rate 3e-3 --logging_steps 1 --seed 7 "
        f"--save_strategy no --output-dir {output}"
    )


def test_sbatch_per_node_runs_tensor_parallel_inside_each_node_in_the_sif(cluster: Cluster, apptainer: Apptainer,
                                                                          sif: Path):  # fmt: skip
    """train-per-node.sbatch, 2 nodes x 2 ranks, --tp-size 2: a tensor-parallel group in each node (ranks 0-1,
    2-3), data parallel across the nodes; the losses of tensor parallel 1 x data parallel 2 on one node."""
    tmp = cluster.shared_dir / "sif-per-node"
    tmp.mkdir()
    env = sif_env(tmp, apptainer, sif, RANKS_PER_NODE="2", TRAIN_ARGS=tp_train_args(tmp / "run", 2))
    script = cpu_job_script("scripts/slurm/train-per-node.sbatch", tmp)
    code, log = sbatch(cluster, script, tmp, env, "--ntasks-per-node=1")
    assert code == 0, log[-4000:]
    assert ranks_seen(log) == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert "4 ranks = tensor parallel 2 x data parallel 2" in log
    assert json.loads((tmp / "run" / "zerokit-run.json").read_text())["parallelism"] == {"tp_size": 2, "dp_size": 2}
    one_node = ["apptainer", "exec", str(sif), "train", "--nproc-per-node", "2", *tp_train_args(tmp / "dp", 1).split()]
    result = cluster.run("node1", one_node, env=env, cwd=tmp, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    expected, got = logged_losses(tmp / "dp"), logged_losses(tmp / "run")
    assert len(got) == len(expected) == 20 and got[-1] < 0.8 * got[0]
    assert got == pytest.approx(expected, rel=1e-4)


def test_sbatch_runs_pipeline_stages_on_two_nodes_in_the_sif(cluster: Cluster, apptainer: Apptainer, sif: Path):
    """train.sbatch, one rank per node, --pp-size 2: stage 0 on node1, stage 1 on node2, so every micro-batch's
    activations and their gradients cross the nodes; the losses of the whole model in one stage on one rank."""
    tmp = cluster.shared_dir / "sif-pipeline"
    tmp.mkdir()

    def args(output: Path, pp: int) -> list[str]:  # tests/e2e/test_pipeline.py's run, each rank started apart
        return llama_argv(output, 1, pp, "--save_strategy", "no")[1:]

    env = sif_env(tmp, apptainer, sif, TRAIN_ARGS=shlex.join(args(tmp / "run", 2)))
    code, log = sbatch(cluster, cpu_job_script("scripts/slurm/train.sbatch", tmp), tmp, env, "--ntasks-per-node=1")
    assert code == 0, log[-4000:]
    assert ranks_seen(log) == {0: "node1", 1: "node2"}
    assert "2 ranks = pipeline 2 stages x data parallel 1" in log
    result = cluster.run("node1", ["apptainer", "exec", str(sif), "train", *args(tmp / "one", 1)], env=env, cwd=tmp,
                         timeout=600)  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    expected, got = logged_losses(tmp / "one"), logged_losses(tmp / "run")
    assert len(got) == len(expected) == 20 and got[-1] < 0.8 * got[0]
    assert got == pytest.approx(expected, rel=1e-4)


def test_host_mpirun_runs_each_rank_in_the_sif(cluster: Cluster, apptainer: Apptainer, sif: Path):
    """The hybrid model: launch in the SIF writes the mpirun command, the host's mpirun starts the ranks."""
    tmp = cluster.shared_dir / "sif-mpirun"
    tmp.mkdir()
    (tmp / "hosts").write_text("node1\nnode2\n")
    env = sif_env(
        tmp,
        apptainer,
        sif,
        HOSTFILE=str(tmp / "hosts"),
        RANKS_PER_NODE="1",
        TRAIN_ARGS=train_args(tmp / "run"),
        OMPI_MCA_plm_rsh_agent=str(cluster.rsh_agent),
        OMPI_MCA_pml="ob1",
        OMPI_MCA_btl="tcp,self",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    result = cluster.run("node1", [str(REPO / "scripts/mpirun/train.sh")], env=env, cwd=tmp, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert f"apptainer exec --nv {sif} /opt/venv/bin/python -m zerokit launch" in log  # each rank re-enters
    assert "--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0" in log  # the interface found on the node
    assert ranks_seen(log) == {0: "node1", 1: "node2"}
    assert_trained(tmp / "run")


def test_sge_job_script_with_the_sif_under_qsub(sge_cluster, apptainer: Apptainer, sif: Path):
    cluster = sge_cluster.cluster
    tmp = cluster.shared_dir / "sif-sge"
    tmp.mkdir()
    text = (REPO / "scripts/sge/train.sh").read_text()
    script = tmp / "train.sh"
    script.write_text("\n".join(line for line in text.splitlines() if "rt_F" not in line) + "\n")
    env = sif_env(tmp, apptainer, sif, MODULES="", RANKS_PER_NODE="1", TRAIN_ARGS=train_args(tmp / "run"))
    env["PATH"] = f"{env['PATH']}:{os.environ['PATH']}"  # SGE's own tools
    argv = ["qsub", "-sync", "y", "-V", "-pe", sge_cluster.pe, "2", "-o", str(tmp / "job.log"), str(script)]
    result = sge_cluster.run("node1", argv, env=env, cwd=tmp, timeout=600)
    log = result.stdout + result.stderr + (tmp / "job.log").read_text()
    assert result.returncode == 0, log[-4000:]
    assert sorted(ranks_seen(log)) == [0, 1] and set(ranks_seen(log).values()) == {"node1", "node2"}
    assert ", sge), main " in log  # launch found the scheduler from the PE's variables
    assert_trained(tmp / "run")


def test_sge_generate_job_script_under_qsub(sge_cluster, apptainer: Apptainer, sif: Path, sbatch_per_rank):
    """scripts/sge/generate.sh (scripts/pbs/generate.pbs is the same but for the host file): through the host's
    mpirun from the first node, the template's quotes kept on the way through launch --print-command."""
    cluster = sge_cluster.cluster
    tmp = cluster.shared_dir / "sif-sge-generate"
    args = generate_job(tmp)
    text = (REPO / "scripts/sge/generate.sh").read_text()
    script = tmp / "generate.sh"
    script.write_text("\n".join(line for line in text.splitlines() if "rt_F" not in line) + "\n")
    env = sif_env(tmp, apptainer, sif, MODULES="", RANKS_PER_NODE="1", MODEL=str(sbatch_per_rank[0] / "run"),
                  GENERATE_ARGS=f"{args} --output {tmp / 'answers.jsonl'}")  # fmt: skip
    env["PATH"] = f"{env['PATH']}:{os.environ['PATH']}"  # SGE's own tools
    argv = ["qsub", "-sync", "y", "-V", "-pe", sge_cluster.pe, "2", "-o", str(tmp / "job.log"), str(script)]
    result = sge_cluster.run("node1", argv, env=env, cwd=tmp, timeout=600)
    log = result.stdout + result.stderr + (tmp / "job.log").read_text()
    assert result.returncode == 0, log[-4000:]
    assert set(ranks_seen(log).values()) == {"node1", "node2"}
    answers = [json.loads(line) for line in (tmp / "answers.jsonl").read_text().splitlines()]
    assert [row["n"] for row in answers] == list(range(10))
    prompts = [row["prompt"] for row in answers]
    assert all(p.startswith("Q: what is ") and p.endswith("\nA:") for p in prompts), prompts[0]


def test_cleanenv_under_srun_never_trains_as_lone_ranks(cluster: Cluster, apptainer: Apptainer, sif: Path):
    """`srun -n 2 apptainer exec --cleanenv train.sif train`: --cleanenv drops SLURM_*, so each task would look
    like a lone rank 0 of 1 writing the same folder. Inside the SIF the job's variables are in no ancestor's
    environment (srun sets them only on the task, which execs apptainer); what shows is the ancestry,
    slurmstepd then Apptainer's starter (zerokit.image.container.hidden_job). Each task refuses in one line naming
    --cleanenv and how to pass the variables; the job ends non-zero and writes no model."""
    tmp = cluster.shared_dir / "sif-cleanenv"
    tmp.mkdir()
    output = tmp / "run"
    srun = ["srun", "--nodes=1", "--ntasks=2", "--cpus-per-task=1", "apptainer", "exec", "--cleanenv", str(sif),
            "train", *train_args(output).split()]  # fmt: skip
    result = cluster.run("node1", srun, env=sif_env(tmp, apptainer, sif), cwd=tmp, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and all(f"--cleanenv {PASS_JOB_ENV} IMAGE" in line for line in errors), log[-3000:]
    assert not (output / "model.safetensors").exists()


def test_the_fix_the_cleanenv_error_names_trains_the_job(
    cluster: Cluster, apptainer: Apptainer, sif: Path, one_node_in_the_sif
):
    """The error's way to keep --cleanenv: each task passes the job's variables with --env-file. Both ranks
    then train together, and agree with the 2-rank run."""
    tmp = cluster.shared_dir / "sif-cleanenv-fixed"
    tmp.mkdir()
    task = f"apptainer exec --cleanenv {PASS_JOB_ENV} {sif} train {train_args(tmp / 'run')}"
    srun = ["srun", "--nodes=1", "--ntasks=2", "--cpus-per-task=1", "bash", "-c", task]
    result = cluster.run("node1", srun, env=sif_env(tmp, apptainer, sif), cwd=tmp, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert_trained(tmp / "run")
    assert one_node_in_the_sif == pytest.approx(logged_losses(tmp / "run"), abs=1e-4)


# A rank's load of the plugin as NCCL's (dlopen of NCCL_NET_PLUGIN with the rank's LD_LIBRARY_PATH), then its init,
# which calls into the fabric library (42): what it loaded, from where, and what the job bound beside it.
PLUGIN_PROBE = f"""\
import ctypes, os
class Net(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", ctypes.CFUNCTYPE(ctypes.c_int))]
path = os.environ["NCCL_NET_PLUGIN"]
net = Net.in_dll(ctypes.CDLL(path), "ncclNetPlugin_v8")
fabric = next(line.split()[-1] for line in open("/proc/self/maps") if "libfakefabric" in line)
print("probe: rank", os.environ["RANK"], path, net.name.decode(), "init", net.init(), "fabric", fabric,
      "NCCL_NET=" + os.environ["NCCL_NET"], "bound", *sorted(os.listdir("{DEPS_MOUNT}")), flush=True)
"""
PLUGIN_SRUN = ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"]


@needs_gcc
def test_the_nccl_plugin_is_bound_into_the_sif_and_checked_before_any_rank_starts(
    cluster: Cluster, apptainer: Apptainer, sif: Path
):
    """The fake NCCL net plugin (tests/unit/fake_nccl_plugin.py) on both nodes, one rank each. Bound by the job
    scripts' words (ZEROKIT_NCCL_PLUGIN on the host, whose ldd finds the fabric library), launch's check in the
    SIF passes and each rank loads the plugin and its fabric library from the binds. Its folder bound by hand
    with `launch --nccl-plugin`, launch refuses on each node in one line, and no rank starts: without the fabric
    library, and for a plugin needing a newer glibc than the image's."""
    tmp = cluster.shared_dir / "sif-nccl-plugin"
    fake = build(tmp / "fake")
    ranks = ["--nproc-per-node", "1", "--", "python", "-c", PLUGIN_PROBE]
    job = (
        'source "$ZEROKIT_DIR/scripts/container.sh" && LD_LIBRARY_PATH=$FABRIC container_words "$PWD" && '
        f'exec {shlex.join(PLUGIN_SRUN)} "${{run[@]}}" launch --nccl-net-strict "$@"'
    )
    env = sif_env(tmp, apptainer, sif, ZEROKIT_NCCL_PLUGIN=str(fake.plugin.parent), FABRIC=str(fake.fabric))
    result = cluster.run("node1", ["bash", "-c", job, "job", *ranks], env=env, cwd=tmp, timeout=300)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert ranks_seen(log) == {0: "node1", 1: "node2"}
    plugin = f"{PLUGIN_MOUNT}/{fake.plugin.name}"
    loaded = f"{plugin} FakeFabric init 42 fabric {DEPS_MOUNT}/libfakefabric.so.1 NCCL_NET=FakeFabric bound"
    assert sorted(line for line in log.splitlines() if line.startswith("probe:")) == [
        f"probe: rank {rank} {loaded} libfakefabric.so.1" for rank in (0, 1)
    ], log[-4000:]

    for folder, why in (
        (fake.plugin.parent, "needs libfakefabric.so.1, which is not found in the image: set ZEROKIT_NCCL_PLUGIN "),
        (fake.newer_glibc.parent, f"needs {NEWER_GLIBC_VERSION} of libc.so.6, and the image's (/"),
    ):
        container = ["apptainer", "exec", "--bind", f"{folder}:{PLUGIN_MOUNT}", str(sif)]
        argv = [*PLUGIN_SRUN, *container, "launch", "--nccl-plugin", PLUGIN_MOUNT, *ranks]
        result = cluster.run("node1", argv, env=sif_env(tmp, apptainer, sif), cwd=tmp, timeout=300)
        log = result.stdout + result.stderr
        errors = [line for line in log.splitlines() if line.startswith("error:")]
        plugin = f"{PLUGIN_MOUNT}/{next(folder.glob('libnccl-net*.so')).name}"
        assert result.returncode != 0 and len(errors) == 2, log[-4000:]  # one line from each node's launch
        assert all(line.startswith(f"error: NCCL net plugin {plugin} {why}") for line in errors), log[-4000:]
        assert "launch: rank" not in log and "probe:" not in log
