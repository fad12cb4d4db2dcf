"""The site stack's pure parts: the arch list DeepSpeed can build, a CUDA site resolved to the cuda ops and the
site's toolkit, a torch that changed named, a lock or a package set that would replace the site's torch refused.
The site venv itself, its ops and its training: tests/e2e/test_site_stack.py."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from zerokit.image import built_ops, ops_gate, site_torch
from zerokit.image.site_torch import SiteTorch, SiteTorchError, changes, check_lock, deepspeed_arch_list
from zerokit.image.stack import load_stack

REPO = Path(__file__).resolve().parents[2]

# A CUDA site as probe() would record it: the version of the torch this project's GPU machines have (2.11+cu130);
# its arch flags are a plausible CUDA 13 build's (sm_90a among them), not read from one.
CUDA_SITE = SiteTorch(
    python="3.12",
    torch="2.11.0+cu130",
    location="/usr/local/lib/python3.12/dist-packages",
    digest="0123456789abcdef",
    cuda="13.0",
    cudnn="91300",
    nccl="2.27.7",
    arch_flags=("sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120", "compute_120"),
)


@pytest.mark.parametrize(
    ("entries", "arch_list", "changed"),
    [
        (["sm_80", "sm_90a", "compute_90"], "8.0;9.0+PTX", ["sm_90a"]),
        (["9.0a", "10.0f", "8.0+PTX"], "8.0+PTX;9.0;10.0", ["9.0a", "10.0f"]),
        (["sm_100", "sm_75", "sm_120"], "7.5;10.0;12.0", []),
    ],
)
def test_arch_list_is_one_deepspeed_builds_and_says_what_it_changed(entries, arch_list, changed):
    built, notes = deepspeed_arch_list(entries)
    assert built == arch_list
    assert [note.split()[0] for note in notes] == changed
    assert all("DeepSpeed 0.19.8 cannot build arch-specific" in note for note in notes)


def test_an_arch_it_cannot_read_is_refused_naming_the_forms():
    with pytest.raises(SiteTorchError, match=r"cannot read CUDA architecture 'hopper': write it as 9.0, 9.0\+PTX"):
        deepspeed_arch_list(["hopper"])


def test_a_cuda_site_builds_the_cuda_ops_for_torchs_archs_with_the_sites_nvcc(monkeypatch):
    monkeypatch.setattr(site_torch, "recorded", lambda: CUDA_SITE)
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    stack = load_stack("site")
    assert (stack.accelerator, stack.cuda, stack.python, stack.cuda_home) == ("cuda", "13.0", "3.12", "system")
    assert stack.version("torch") == "2.11.0+cu130"
    assert stack.ds_ops == load_stack("cuda13").ds_ops
    env = stack.ds_build_env()
    assert env["DS_ACCELERATOR"] == "cuda"
    assert env["TORCH_CUDA_ARCH_LIST"] == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert stack.notes == (site_torch.deepspeed_arch_list(["sm_90a"])[1][0],)
    assert "torch-digest=0123456789abcdef" in stack.ds_wheel_inputs()
    # Only this machine's GPU (what make gpu-proof does to compile in minutes), in torch's own spelling.
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    assert load_stack("site").ds_build_env()["TORCH_CUDA_ARCH_LIST"] == "9.0"


def test_the_gate_records_the_arch_list_the_ops_were_built_with_and_a_later_gate_keeps_it(monkeypatch, tmp_path):
    """make venv STACK=site with TORCH_CUDA_ARCH_LIST=9.0a (the GPU proof's): the record says 9.0, read back equal;
    the gate run again without the variable (the stack now names torch's list) leaves it; a new install rewrites it."""
    monkeypatch.setattr(site_torch, "recorded", lambda: CUDA_SITE)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    built_for_the_gpu = load_stack("site")
    assert ops_gate.record_build(built_for_the_gpu, tmp_path).startswith("recorded in ")
    written = built_ops.of_stack(built_for_the_gpu)
    assert built_ops.recorded(tmp_path) == written
    assert (written.stack, written.accelerator, written.torch_cuda_arch_list) == ("site", "cuda", "9.0")
    assert written.ops == tuple(sorted(load_stack("cuda13").ds_ops))
    text = (tmp_path / built_ops.FACTS_NAME).read_text()
    assert list(json.loads(text)) == sorted(json.loads(text))  # keys sorted, nothing of the moment: reproducible

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    later = load_stack("site")
    assert later.torch_cuda_arch_list == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert ops_gate.record_build(later, tmp_path).endswith(": kept")
    assert built_ops.recorded(tmp_path).torch_cuda_arch_list == "9.0"

    monkeypatch.setattr(built_ops, "deepspeed_digest", lambda: "another install")
    ops_gate.record_build(later, tmp_path)
    assert built_ops.recorded(tmp_path).torch_cuda_arch_list == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert built_ops.recorded(tmp_path / "elsewhere") is None


def test_a_cpu_site_builds_the_cpu_stacks_ops():
    stack = load_stack("site")  # this test environment's torch, a CPU build
    assert stack.accelerator == "cpu" and stack.ds_ops == load_stack("cpu").ds_ops
    assert "TORCH_CUDA_ARCH_LIST" not in stack.ds_build_env()


def test_a_torch_swapped_or_changed_is_named():
    assert changes(CUDA_SITE, CUDA_SITE) == []
    (upgraded,) = changes(CUDA_SITE, replace(CUDA_SITE, torch="2.12.0+cu130", digest="f" * 16))
    assert upgraded == "torch 2.12.0+cu130 is installed, the site's was 2.11.0+cu130"
    (rebuilt,) = changes(CUDA_SITE, replace(CUDA_SITE, digest="f" * 16))
    assert rebuilt.startswith("torch 2.11.0+cu130's files changed")
    shadowed = changes(CUDA_SITE, replace(CUDA_SITE, location="/work/venv/lib/python3.12/site-packages"))
    assert shadowed == [
        "torch now comes from /work/venv/lib/python3.12/site-packages, not the site's "
        "/usr/local/lib/python3.12/dist-packages"
    ]


def test_the_site_lock_installs_no_torch_nor_what_only_torch_needs():
    lock = (REPO / "containers/lock/site.txt").read_text()
    check_lock(REPO / "containers/lock/site.txt", CUDA_SITE)  # passes
    never = re.findall(r"^([a-z0-9_.-]+)==\S+ ; .*sys_platform == 'never'", lock, flags=re.M)
    assert {"torch", "sympy", "networkx"} <= set(never)
    assert not [name for name in never if name in ("transformers", "deepspeed", "numpy", "accelerate")]


def test_a_lock_that_would_install_a_torch_is_refused_before_the_install(tmp_path: Path):
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==2.12.0 \\\n    --hash=sha256:00\n")
    with pytest.raises(SiteTorchError, match=r"would install torch 2.12.0 over the site's 2.11.0\+cu130"):
        check_lock(lock, CUDA_SITE)


def test_a_package_that_needs_another_torch_is_named():
    """A site torch older than a pin accepts (accelerate 1.15 needs torch>=2.0): named with the requirement."""
    conflicts = site_torch.torch_requirement_conflicts("1.13.1+cu117")
    assert any(re.fullmatch(r"accelerate 1\.15\.0 needs torch>=\S+", line) for line in conflicts), conflicts
    assert site_torch.torch_requirement_conflicts("2.13.0+cpu") == []


def test_the_site_folders_given_to_the_venv_are_only_package_folders(monkeypatch, tmp_path: Path):
    """As make runs it (cwd the checkout, PYTHONPATH=src): neither lands in the venv's .pth, the packages do."""
    module_folder = tmp_path / "module-site-packages"  # a cluster module's PYTHONPATH
    module_folder.mkdir()
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.path", [str(REPO), str(REPO / "src"), str(module_folder), *sys.path])
    folders = site_torch.site_paths()
    assert str(module_folder) in folders
    assert str(REPO) not in folders and str(REPO / "src") not in folders
    assert any(folder.endswith("site-packages") and "torch" in os.listdir(folder) for folder in folders)
