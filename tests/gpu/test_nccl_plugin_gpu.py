"""The host's NCCL net plugin as NCCL itself sees it (issue 42), on a lent GPU: one rank, NCCL_DEBUG=INFO.

- With the fake plugin named (tests/unit/fake_nccl_plugin.py: it exports ncclNetPlugin_v8, and its init fails
  on purpose), NCCL's log shows it loading that file; it then falls back and the all-reduce still runs.
- Named strictly (NCCL_NET, what `launch --nccl-net-strict` sets), the same plugin fails the job instead.
- With no plugin named, the network NCCL says it uses is the one doctor predicted (zerokit.doctor.transport).

Skipped, with the reason, where torch sees no GPU; run it with `pytest -m gpu` in a CUDA environment.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.fake_nccl_plugin import FakePlugin, build, needs_gcc
from zerokit.doctor.transport import gather, nccl_choice

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    needs_gcc,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]

ONE_RANK_ALL_REDUCE = """
import sys, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print("all_reduce sum", int(x.sum().item()), flush=True)
dist.destroy_process_group()
"""

# What NCCL's INFO log calls each transport doctor may predict.
NCCL_NETWORK = {"sockets": "Socket", "ib": "IB", "roce": "IB"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> FakePlugin:
    return build(tmp_path_factory.mktemp("fake-nccl-plugin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_reduce(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    script = tmp_path / "all_reduce.py"
    script.write_text(ONE_RANK_ALL_REDUCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")} | {"NCCL_DEBUG": "INFO"} | variables
    argv = [sys.executable, str(script), str(free_port())]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)


def test_nccl_loads_the_named_plugin_then_falls_back(tmp_path: Path, fake: FakePlugin):
    library_path = ":".join(filter(None, [str(fake.fabric), os.environ.get("LD_LIBRARY_PATH", "")]))
    result = all_reduce(tmp_path, NCCL_NET_PLUGIN=str(fake.plugin), LD_LIBRARY_PATH=library_path)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "all_reduce sum 1024" in result.stdout
    assert fake.plugin.name in log or "FakeFabric" in log, log[-4000:]


def test_a_strict_net_name_fails_instead_of_falling_back(tmp_path: Path, fake: FakePlugin):
    library_path = ":".join(filter(None, [str(fake.fabric), os.environ.get("LD_LIBRARY_PATH", "")]))
    variables = {"NCCL_NET_PLUGIN": str(fake.plugin), "LD_LIBRARY_PATH": library_path, "NCCL_NET": "FakeFabric"}
    result = all_reduce(tmp_path, **variables)
    assert result.returncode != 0, (result.stdout + result.stderr)[-4000:]
    assert "all_reduce sum" not in result.stdout


def test_without_a_plugin_nccl_uses_the_network_doctor_predicted(tmp_path: Path):
    predicted = nccl_choice(gather({}))
    assert predicted.kind in NCCL_NETWORK, predicted
    result = all_reduce(tmp_path)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert f"Using network {NCCL_NETWORK[predicted.kind]}" in log, (predicted, log[-4000:])
