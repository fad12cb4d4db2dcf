"""launch's settings: each from its flag, else its ZEROKIT_ variable (else the torch one), checked alike."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import UserError
from zerokit.launch.config import parse
from zerokit.launch.stall import DEFAULT_STALL_TIMEOUT
from zerokit.launch.supervisor import DEFAULT_STOP_GRACE


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
