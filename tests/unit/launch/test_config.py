"""launch's settings: each from its flag, else its ZEROKIT_ variable (else the torch one), checked alike."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import UserError
from zerokit.launch.config import parse
from zerokit.launch.watch.stall import DEFAULT_STALL_TIMEOUT
from zerokit.launch.watch.supervisor import DEFAULT_STOP_GRACE


def config(argv: list[str], environ: dict[str, str] | None = None):
    return parse([*argv, "train"], environ or {}, "/venv/bin/python")


def test_stop_grace_from_the_flag_the_variable_or_the_default():
    assert DEFAULT_STOP_GRACE < 30  # under Slurm's default KillWait
    assert config([]).stop_grace == DEFAULT_STOP_GRACE
    assert config([], {"ZEROKIT_STOP_GRACE": "2.5"}).stop_grace == 2.5
    assert config(["--stop-grace", "0"], {"ZEROKIT_STOP_GRACE": "2.5"}).stop_grace == 0


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_a_stop_grace_that_is_no_duration_is_refused(value):
    with pytest.raises(UserError, match=r"--stop-grace \(ZEROKIT_STOP_GRACE\)=.* is not a number of seconds"):
        config(["--stop-grace", value])


def test_stall_timeout_from_the_flag_the_variable_or_the_default():
    assert DEFAULT_STALL_TIMEOUT == 15 * 60
    assert config([]).stall_timeout == DEFAULT_STALL_TIMEOUT
    assert config([], {"ZEROKIT_STALL_TIMEOUT": "60"}).stall_timeout == 60
    assert config(["--stall-timeout", "0"], {"ZEROKIT_STALL_TIMEOUT": "60"}).stall_timeout == 0
    with pytest.raises(UserError, match=r"--stall-timeout \(ZEROKIT_STALL_TIMEOUT\)='soon' is not a number of seconds"):
        config([], {"ZEROKIT_STALL_TIMEOUT": "soon"})


def test_master_address_and_port_from_the_torch_variables_unless_given():
    environ = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29999"}
    assert (config([], environ).master_addr, config([], environ).master_port) == ("10.0.0.5", 29999)
    zerokit = {**environ, "ZEROKIT_MASTER_ADDR": "10.0.0.6", "ZEROKIT_MASTER_PORT": "29998"}
    assert (config([], zerokit).master_addr, config([], zerokit).master_port) == ("10.0.0.6", 29998)
    flags = config(["--master-addr", "10.0.0.7", "--master-port", "29997"], zerokit)
    assert (flags.master_addr, flags.master_port) == ("10.0.0.7", 29997)
    assert (config([]).master_addr, config([]).master_port) == (None, None)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"MASTER_PORT": "http"}, r"MASTER_PORT\)='http' is not a whole number"),
        ({"MASTER_PORT": "0"}, "is not a TCP port"),
        ({"ZEROKIT_MASTER_PORT": "70000"}, "is not a TCP port"),
        ({"ZEROKIT_NPROC_PER_NODE": "two"}, r"--nproc-per-node \(ZEROKIT_NPROC_PER_NODE\)='two' is not a whole number"),
        ({"ZEROKIT_LAUNCHER": "slrum"}, "ZEROKIT_LAUNCHER='slrum' is not a launcher: use one of auto, pdsh, mpirun"),
    ],
)
def test_a_bad_value_from_the_environment_is_refused_naming_its_variable(environ, message):
    with pytest.raises(UserError, match=message):
        config([], environ)


def test_a_flag_prefix_is_not_taken_for_the_flag():
    with pytest.raises(SystemExit):
        config(["--nproc", "2"])


def test_a_scheduler_named_as_launcher_is_required_not_a_head_node_launch():
    assert config(["--launcher", "slurm"]).scheduler == "slurm"
    assert config([], {"ZEROKIT_LAUNCHER": "openmpi"}).scheduler == "openmpi"
    assert config([]).scheduler is None


def test_a_hostfile_that_cannot_be_read_is_named(tmp_path):
    with pytest.raises(UserError, match=f"cannot read hostfile {tmp_path} .*: pass a readable file"):
        config(["--launcher", "pdsh", "--hostfile", str(tmp_path)])
    missing = tmp_path / "hosts"
    with pytest.raises(UserError, match=f"cannot read hostfile {missing} \\(No such file or directory\\)"):
        config(["--launcher", "pdsh", "--hostfile", str(missing)])


@pytest.mark.parametrize("content", ["", "\n  \n", "# none yet\n"])
def test_a_hostfile_without_hosts_is_named_as_empty(tmp_path, content):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(content)
    with pytest.raises(UserError, match=f"hostfile {hostfile} lists no hosts: write one host per line"):
        config(["--launcher", "pdsh", "--hostfile", str(hostfile)])


def hostfile_config(tmp_path, text: str, *flags: str):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(text)
    return config([*flags, "--launcher", "pdsh", "--hostfile", str(hostfile)])


def test_a_deepspeed_users_hostfile_gives_its_slots_as_the_ranks_of_each_node(tmp_path):
    """`node slots=8`, DeepSpeed's and OpenMPI's way, and `node:8`, MPICH's: 8 ranks a node (slots were ignored:
    one rank a node); bare lines leave it to --nproc-per-node (default 1)."""
    deepspeed = hostfile_config(tmp_path, "# the partition\nnode1 slots=8\nnode2  slots = 8  # spare GPUs\n")
    assert (deepspeed.hosts_from_file, deepspeed.nproc_per_node) == (("node1", "node2"), 8)
    assert hostfile_config(tmp_path, "node1:8\n10.0.0.2:8\n").nproc_per_node == 8
    assert hostfile_config(tmp_path, "node1 slots=4 max_slots=8\n").nproc_per_node == 4
    assert hostfile_config(tmp_path, "node1\nnode2\n", "--nproc-per-node", "8").nproc_per_node == 8
    bare = hostfile_config(tmp_path, "node1\nnode1\nnode2\n")  # $PBS_NODEFILE's way: a host once per core
    assert (bare.hosts_from_file, bare.nproc_per_node) == (("node1", "node2"), None)
    sge = hostfile_config(
        tmp_path, "node1 4 all.q@node1 UNDEFINED\nnode2 4 all.q@node2 UNDEFINED\n", "--nproc-per-node", "2"
    )
    assert (sge.hosts_from_file, sge.nproc_per_node) == (("node1", "node2"), 2)  # $PE_HOSTFILE: CPU slots, not ranks


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        (
            "this is not a host line = = =\n",
            (),
            "hostfile .* line 1 is not a host line: 'this is not a host line = = ='",
        ),
        ("node1\nnode2 slots=four\n", (), "line 2 is not a host line: 'node2 slots=four'; write one host per line"),
        ("node1 slots=0\n", (), "line 1: node1 has 0 slots; give it 1 or more"),
        ("node1 slots=8\nnode1 slots=8\n", (), "line 2 lists node1 again \\(line 1\\): list each host once"),
        (
            "node1 slots=8\nnode2 slots=4\n",
            (),
            "declares different slots per host \\(node1 8, node2 4\\): launch starts",
        ),
        ("node1 slots=8\nnode2\n", (), "different slots per host \\(node1 8, node2 none\\)"),
        ("node1 slots=8\n", ("--nproc-per-node", "4"), "--nproc-per-node 4, but hostfile .* gives node1 slots=8: make"),
    ],
)
def test_a_hostfile_line_that_is_not_a_host_or_slots_that_disagree_are_refused(tmp_path, text, flags, message):
    with pytest.raises(UserError, match=message):
        hostfile_config(tmp_path, text, *flags)


@pytest.mark.parametrize("launcher", [[], ["--launcher", "slurm"]])
def test_a_hostfile_without_a_head_node_launcher_is_refused_not_ignored(tmp_path, launcher):
    """It ran one local rank and ignored the hosts without a word."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    with pytest.raises(UserError, match=r"--hostfile .* lists the hosts of a head-node launch, .*add --launcher pdsh"):
        config([*launcher, "--hostfile", str(hostfile)])


@pytest.mark.parametrize("launcher", ["pdsh", "mpirun"])
def test_a_deepspeed_hostfile_starts_its_slots_on_every_node(tmp_path, launcher):
    """The plan the head node runs: 8 ranks on each of the 2 nodes, as `deepspeed --hostfile` would start."""
    from tests.unit.launch.test_plan import make_plan

    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=8\nnode2 slots=8\n")
    plan = make_plan(["--launcher", launcher, "--hostfile", str(hostfile), "train"], {})
    assert plan.world_size == 16
    words = " ".join(" ".join(command.argv) for command in plan.commands)
    assert ("--map-by ppr:8:node" if launcher == "mpirun" else "--nproc-per-node 8") in words
