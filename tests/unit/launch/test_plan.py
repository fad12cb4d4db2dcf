"""launch's plans, asserted field by field, under each scheduler's variables (as their docs give them)."""

from __future__ import annotations

import pytest

from zerokit.cluster import detect_environment
from zerokit.foundations.errors import UserError
from zerokit.launch.config import parse
from zerokit.launch.plan import plan

PY = "/venv/bin/python"


def make_plan(argv: list[str], environ: dict[str, str], cpu_count: int = 8, route: str = "ib0"):
    config = parse(argv, environ, PY)
    return plan(config, detect_environment(environ), environ, cpu_count, lambda address: route, lambda: 41000)


def test_alone_with_two_ranks_spawns_them_on_loopback():
    p = make_plan(["--nproc-per-node", "2", "train", "--config", "zero3"], {})
    assert (p.mode, p.environment, p.nnodes, p.world_size, p.main_address, p.main_port, p.ifname) == (
        "spawn",
        "local",
        1,
        2,
        "127.0.0.1",
        41000,
        None,
    )
    assert [c.argv for c in p.commands] == [(PY, "-m", "zerokit", "train", "--config", "zero3")] * 2
    assert [c.env for c in p.commands] == [
        {
            "OMP_NUM_THREADS": "4",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "LOCAL_SIZE": "2",
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "41000",
            "RANK": str(r),
            "LOCAL_RANK": str(r),
        }
        for r in range(2)
    ]


def test_alone_the_torch_variables_name_the_main_address_and_port():
    p = make_plan(["--nproc-per-node", "2", "train"], {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29999"})
    assert (p.environment, p.main_address, p.main_port) == ("local", "10.0.0.5", 29999)
    assert {(c.env["MASTER_ADDR"], c.env["MASTER_PORT"]) for c in p.commands} == {("10.0.0.5", "29999")}


def test_user_thread_count_wins_and_never_zero_threads():
    assert make_plan(["train"], {"OMP_NUM_THREADS": "3"}).env["OMP_NUM_THREADS"] == "3"
    assert make_plan(["--nproc-per-node", "4", "train"], {}, cpu_count=2).env["OMP_NUM_THREADS"] == "1"


SLURM_RANK_3 = {  # srun -N2 --ntasks-per-node=2, task 3 (on the second node), job 4242
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
}


def test_srun_per_rank_sets_torch_variables_nic_and_job_port():
    p = make_plan(["train"], SLURM_RANK_3)
    assert (p.mode, p.environment, p.hosts, p.nnodes, p.node_rank, p.world_size) == (
        "exec",
        "slurm",
        ("gpu07", "gpu08"),
        2,
        1,
        4,
    )
    assert (p.main_address, p.main_port, p.ifname) == ("gpu07", 20000 + 4242, "ib0")
    (command,) = p.commands
    assert command.env == {
        "NCCL_SOCKET_IFNAME": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "OMP_NUM_THREADS": "4",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "LOCAL_SIZE": "2",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "gpu07",
        "MASTER_PORT": "24242",
    }


def test_srun_one_task_per_node_with_nproc_spawns_the_node_ranks():
    environ = {
        **SLURM_RANK_3,
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_TASKS_PER_NODE": "1(x2)",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    }
    p = make_plan(["--nproc-per-node", "2", "--", "python", "run_clm.py"], environ)
    assert (p.mode, p.nnodes, p.node_rank, p.world_size, p.main_address) == ("spawn", 2, 1, 4, "gpu07")
    assert [(c.env["RANK"], c.env["LOCAL_RANK"]) for c in p.commands] == [("2", "0"), ("3", "1")]
    assert p.commands[0].argv == ("/venv/bin/python", "-m", "zerokit.launch.rank.user_script", "run_clm.py")


def test_nproc_with_several_tasks_per_node_names_the_fix():
    with pytest.raises(UserError, match=r"started 2 tasks on this node: start one task per node"):
        make_plan(["--nproc-per-node", "2", "train"], SLURM_RANK_3)


def test_explicit_address_port_and_interface_win():
    p = make_plan(["--master-addr", "10.0.0.5", "--master-port", "29999", "--ifname", "eno1", "train"], SLURM_RANK_3)
    assert (p.main_address, p.main_port, p.ifname) == ("10.0.0.5", 29999, "eno1")
    assert p.commands[0].env["GLOO_SOCKET_IFNAME"] == "eno1"


def test_openmpi_without_address_names_mpirun_x():
    environ = {
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
    }
    with pytest.raises(UserError, match="MASTER_ADDR"):
        make_plan(["train"], environ)
    p = make_plan(["train"], {**environ, "MASTER_ADDR": "node1"})
    assert (p.environment, p.world_size, p.main_address, p.main_port) == ("openmpi", 2, "node1", 29500)


def test_pbs_with_openmpi_takes_hosts_from_the_nodefile(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("cn01\ncn01\ncn02\ncn02\n")  # PBS lists a host once per slot
    environ = {
        "PBS_JOBID": "1234.pbs01",
        "PBS_NODEFILE": str(nodefile),
        "OMPI_COMM_WORLD_RANK": "2",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    p = make_plan(["train"], environ)
    assert (p.environment, p.hosts, p.main_address, p.main_port, p.node_rank) == (
        "pbs",
        ("cn01", "cn02"),
        "cn01",
        20000 + 123401 % 12000,
        1,
    )  # digits of the job id


def test_sge_abci_with_mpich_hydra(tmp_path):
    pe_hostfile = tmp_path / "pe_hostfile"
    pe_hostfile.write_text("g0001 4 gpu@g0001 UNDEFINED\ng0002 4 gpu@g0002 UNDEFINED\n")
    environ = {
        "JOB_ID": "777",
        "PE_HOSTFILE": str(pe_hostfile),
        "NSLOTS": "8",
        "PMI_RANK": "5",
        "PMI_SIZE": "8",
        "MPI_LOCALRANKID": "1",
        "MPI_LOCALNRANKS": "4",
    }
    p = make_plan(["train"], environ)
    assert (p.environment, p.hosts, p.main_address, p.main_port, p.node_rank, p.world_size) == (
        "sge",
        ("g0001", "g0002"),
        "g0001",
        20777,
        1,
        8,
    )
    assert p.commands[0].env["RANK"] == "5" and p.commands[0].env["LOCAL_RANK"] == "1"


def test_lsf_jsrun_drops_the_launch_node(tmp_path):
    hostfile = tmp_path / "djob"
    hostfile.write_text("batch1\nnode1\nnode1\nnode2\nnode2\n")
    environ = {
        "LSB_JOBID": "88",
        "LSB_DJOB_HOSTFILE": str(hostfile),
        "JSM_NAMESPACE_RANK": "0",
        "JSM_NAMESPACE_SIZE": "4",
        "JSM_NAMESPACE_LOCAL_RANK": "0",
        "JSM_NAMESPACE_LOCAL_SIZE": "2",
    }
    p = make_plan(["train"], environ)
    assert (p.environment, p.hosts, p.main_address, p.main_port) == ("lsf", ("node1", "node2"), "node1", 20088)


def test_pmix_alone_cannot_tell_the_world_size():
    with pytest.raises(UserError):
        make_plan(["train"], {"PMIX_RANK": "0"})


def test_pdsh_head_node_starts_one_launch_per_host(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    environ = {"PATH": "/venv/bin:/usr/bin", "HF_HOME": "/data/hf", "HF_TOKEN": "hf_secret", "HOME": "/root",
               "TORCHINDUCTOR_CACHE_DIR": "/data/inductor"}  # fmt: skip
    p = make_plan(["--launcher", "pdsh", "--hostfile", str(hostfile), "--nproc-per-node", "2", "train"], environ)
    assert (p.mode, p.environment, p.hosts, p.world_size, p.main_address, p.main_port) == (
        "remote",
        "pdsh",
        ("node1", "node2"),
        4,
        "node1",
        29500,
    )
    (command,) = p.commands
    assert command.argv[:9] == ("pdsh", "-S", "-R", "exec", "-f", "2", "-w", "node1,node2", "ssh")
    assert command.argv[9:16] == ("-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o",
                                  "ServerAliveCountMax=3", "%h")  # fmt: skip
    line = command.argv[16]
    remote = "/venv/bin/python -m zerokit launch --hosts node1,node2 --node-host %h --stop-when-stdin-closes "
    assert f"env HF_HOME=/data/hf PATH=/venv/bin:/usr/bin TORCHINDUCTOR_CACHE_DIR=/data/inductor {remote}" in line
    assert line.endswith(
        "--nproc-per-node 2 --master-addr node1 --master-port 29500 -- /venv/bin/python -m zerokit train"
    )
    assert "hf_secret" not in line and "HOME=/root" not in line


def test_pdsh_inside_apptainer_reenters_the_same_image_found_on_the_hosts_path(tmp_path):
    """ssh's bare PATH may lack apptainer (a module, /opt): the remote gets the host's, which Apptainer kept."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    environ = {
        "APPTAINER_CONTAINER": "/shared/train.sif",
        "PATH": "/opt/venv/bin:/usr/bin",
        "USER_PATH": "/opt/apptainer/bin:/usr/bin",
    }
    p = make_plan(["--launcher", "pdsh", "--hostfile", str(hostfile), "train"], environ)
    assert (
        "env PATH=/opt/apptainer/bin:/usr/bin apptainer exec --nv /shared/train.sif /venv/bin/python -m zerokit "
        "launch --hosts node1,node2" in p.commands[0].argv[-1]
    )
    assert "/opt/venv/bin" not in p.commands[0].argv[-1]


def test_mpirun_inside_apptainer_starts_the_ranks_as_they_are(tmp_path):
    """OpenMPI's daemons re-enter the image over the image's ssh (zerokit.launch.remote_shell): a rank
    wrapped in `apptainer exec` again would look for apptainer inside the image, with the host's PATH."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    environ = {"APPTAINER_CONTAINER": "/shared/train.sif", "PATH": "/opt/venv/bin:/usr/bin", "USER_PATH": "/usr/bin"}
    argv = make_plan(["--launcher", "mpirun", "--hostfile", str(hostfile), "train"], environ).commands[0].argv
    assert "apptainer" not in argv and not any(word.startswith("PATH=") for word in argv)
    assert argv[-11:-7] == (PY, "-m", "zerokit", "launch")
    printed = make_plan(["--launcher", "mpirun", "--hostfile", str(hostfile), "--print-command", "train"], environ)
    assert "apptainer" in printed.commands[0].argv  # the host's mpirun runs it (scripts/mpirun/train.sh)


def test_each_node_of_a_pdsh_launch_finds_its_rank():
    argv = [
        "--hosts",
        "node1,node2",
        "--node-host",
        "node2",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "node1",
        "--master-port",
        "29500",
        "--",
        "python",
        "x.py",
    ]
    p = make_plan(argv, {})
    assert (p.mode, p.environment, p.node_rank, p.world_size, p.ifname) == ("spawn", "pdsh", 1, 4, "ib0")
    assert [c.env["RANK"] for c in p.commands] == ["2", "3"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--", "python", "x.py"],  # alone
        ["--hosts", "node1,node2", "--node-host", "node2", "--nproc-per-node", "1", "--", "python", "x.py"],  # pdsh
    ],
)
def test_a_node_of_one_rank_is_supervised_as_a_node_of_several(argv):
    """launch started the rank, so launch watches it: a signal killing it is named (issue 32), never exec."""
    p = make_plan(argv, {})
    assert (p.mode, p.nproc_per_node, len(p.commands)) == ("spawn", 1, 1)
    assert p.commands[0].env["LOCAL_RANK"] == "0"


def test_mpirun_head_node_maps_ranks_per_node_on_the_interface(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    p = make_plan(
        ["--launcher", "mpirun", "--hostfile", str(hostfile), "--nproc-per-node", "2", "train"],
        {"OMP_NUM_THREADS": "1"},
        route="eth1",
    )
    argv = p.commands[0].argv
    assert argv[:8] == ("mpirun", "-np", "4", "--host", "node1:2,node2:2", "--map-by", "ppr:2:node", "--mca")
    assert argv[8:10] == ("btl_tcp_if_include", "eth1")
    assert argv[11:13] == ("oob_tcp_if_include", "eth1")
    assert argv[-11:] == (PY, "-m", "zerokit", "launch", "--ifname", "eth1", "--", PY, "-m", "zerokit", "train")
    assert "-x" in argv and "MASTER_ADDR=node1" in argv and "OMP_NUM_THREADS=1" in argv


def test_mpiexec_head_node_is_mpich_and_intel_mpis_hydra(tmp_path):
    """Added as one entry of zerokit.launch.head.HEAD_LAUNCHERS: Hydra's -hosts/-ppn/-genv/-iface."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    p = make_plan(
        [
            "--launcher",
            "mpiexec",
            "--hostfile",
            str(hostfile),
            "--nproc-per-node",
            "2",
            "--master-port",
            "29501",
            "train",
        ],
        {"OMP_NUM_THREADS": "1", "HF_TOKEN": "hf_secret"},
        route="ib0",
    )
    argv = p.commands[0].argv
    assert (p.mode, p.environment, p.world_size) == ("remote", "mpiexec", 4)
    assert argv[:11] == ("mpiexec", "-n", "4", "-ppn", "2", "-hosts", "node1,node2", "-iface", "ib0", "-wdir", argv[10])
    genv = {argv[i + 1]: argv[i + 2] for i, word in enumerate(argv) if word == "-genv"}
    assert genv["MASTER_ADDR"] == "node1" and genv["MASTER_PORT"] == "29501" and genv["OMP_NUM_THREADS"] == "1"
    assert "HF_TOKEN" not in genv  # tokens never go on a command line
    assert argv[-11:] == (PY, "-m", "zerokit", "launch", "--ifname", "ib0", "--", PY, "-m", "zerokit", "train")


def test_each_rank_that_mpiexec_starts_finds_itself_as_mpich():
    """What Hydra sets in each rank (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, ...) plus the -genv variables."""
    environ = {
        "PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
        "PMI_FD": "5", "MASTER_ADDR": "node1", "MASTER_PORT": "29501",
    }  # fmt: skip
    p = make_plan(["--ifname", "ib0", "--", "python", "x.py"], environ)
    env = p.commands[0].env
    assert (p.mode, p.environment) == ("exec", "mpich")
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("3", "1", "4", "node1")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--launcher", "pdsh", "train"], "needs --hostfile"),
        (["--launcher", "mpiexec", "train"], "needs --hostfile"),
        (["--nproc-per-node", "0", "train"], "at least 1"),
        ([], "launch needs a command"),
        (["--hosts", "a,b", "train"], "go together"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(argv, message):
    with pytest.raises(UserError, match=message):
        make_plan(argv, {})


def test_the_dry_run_shows_no_secret_flags_value():
    from zerokit.launch.cli import describe

    p = make_plan(["--nproc-per-node", "2", "train", "--hub_token", "hf_planted", "--max_steps", "4"], {})
    shown = describe(p)
    assert "hf_planted" not in shown and "--hub_token <redacted> --max_steps 4" in shown
    assert "hf_planted" in p.commands[0].argv  # the ranks still get it
