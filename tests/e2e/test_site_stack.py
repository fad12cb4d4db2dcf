"""zerokit on a torch it did not install: `make venv STACK=site PYTHON=...` on a "site" Python that holds the
lock's CPU torch in a prefix of its own (as a cluster module or an NGC image holds theirs), then ZeRO-3 on 2
ranks with the ops prebuilt against that torch, doctor --strict, and a torch changed afterwards caught.
The site stack's pure parts (a CUDA site's arch list, refusals): tests/unit/test_site_torch.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, isolated_env, logged_losses
from tests.unit.doctor.conftest import healthy_environ
from zerokit.doctor.versions import locked_versions

# Building the venv compiles DeepSpeed's ops against the site's torch, unless the wheel cache has them: the site's
# torch here is the cpu lock's wheel, so `make venv` (the cpu stack) has put the same wheel there already.
pytestmark = pytest.mark.timeout(1800)
SITE_TQDM = "4.67.1"  # the lock's is 4.70.1


@dataclass(frozen=True)
class Site:
    python: Path  # the site's interpreter, with torch
    venv: Path  # what make venv STACK=site made over it
    build_log: str


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    root = tmp_path_factory.mktemp("site")
    subprocess.run([REPO / "tests/e2e/make-site-python", root / "site-python"], check=True)
    python = root / "site-python" / "bin" / "python"
    # A package the site has at another version than the lock's, which the venv takes from the site (SITE_PROVIDES),
    # as the GPU machine's pyarrow and numpy: make gpu-bundle could not carry the lock's in 64 MiB.
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", f"tqdm=={SITE_TQDM}"], check=True)
    venv = root / "venv-site"
    # DS_WHEEL_DIR as tests/gpu/proof names it beside a venv, so the proof below reuses this one.
    make = ["make", "venv", "STACK=site", f"PYTHON={python}", f"VENV={venv}", f"DS_WHEEL_DIR={venv}-wheels",
            "SITE_PROVIDES=tqdm"]  # fmt: skip
    result = subprocess.run(make, cwd=REPO, capture_output=True, text=True, timeout=1700)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return Site(python, venv, result.stdout + result.stderr)


def venv_python(site: Site, code: str) -> str:
    result = subprocess.run([str(site.venv / "bin/python"), "-c", code], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def test_the_venv_runs_on_the_sites_torch_with_every_op_prebuilt_against_it(site: Site):
    torch_file = venv_python(site, "import torch; print(torch.__file__)")
    assert torch_file.startswith(str(site.python.parent.parent)), torch_file  # not a torch of the venv's own
    assert not list(site.venv.glob("lib/python*/site-packages/torch")), "make venv installed a torch into the venv"
    assert not list(site.venv.glob("lib/python*/site-packages/tqdm")), "SITE_PROVIDES=tqdm, yet the venv has its own"
    assert venv_python(site, "import tqdm; print(tqdm.__version__)") == SITE_TQDM
    assert "site-torch: " in site.build_log and "unchanged; every installed package accepts it" in site.build_log
    assert "torch-digest=" in (site.venv.parent / "venv-site-wheels.inputs").read_text()
    assert len(re.findall(r"^ok   \w+: prebuilt and loads$", site.build_log, flags=re.M)) == 7, site.build_log[-3000:]


def test_a_package_named_in_site_provides_that_the_site_lacks_is_refused_in_one_line(site: Site, tmp_path: Path):
    make_venv = [str(site.python), "-m", "zerokit.image.site_torch", "make-venv", str(tmp_path / "v"), "--lock",
                 str(REPO / "containers/lock/site.txt"), "--site-provides", "numpy"]  # fmt: skip
    result = subprocess.run(make_venv, env={"PYTHONPATH": str(REPO / "src")}, capture_output=True, text=True)
    assert result.returncode == 2 and not (tmp_path / "v").exists()
    assert result.stderr == (
        f"error: SITE_PROVIDES names numpy, which {site.python} does not have: install it there or leave it out "
        "of SITE_PROVIDES so the lock's is installed\n"
    )


def test_zero3_on_two_ranks_trains_without_compiling_and_records_the_sites_torch(site: Site, tmp_path: Path):
    env = isolated_env(tmp_path)
    out = tmp_path / "run"
    train = [str(site.venv / "bin/python"), "-m", "zerokit", "train", "--config", "zero3", "--nproc-per-node", "2"]
    result = subprocess.run(
        [*train, "--output-dir", str(out), "--max_steps", "24", "--logging_steps", "6"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    losses = logged_losses(out)
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses
    assert not any(Path(env["TORCH_EXTENSIONS_DIR"]).glob("**/*.so")), "an op was JIT-compiled"
    record = json.loads((out / "zerokit-run.json").read_text())
    assert record["stack"] == "site"
    assert record["site_torch"]["torch"] == record["versions"]["torch"] == "2.13.0+cpu"
    assert record["site_torch"]["location"].startswith(str(site.python.parent.parent))


def doctor(site: Site, tmp_path: Path) -> tuple[int, dict[str, dict]]:
    result = subprocess.run(
        [str(site.venv / "bin/zerokit"), "doctor", "--strict", "--json"],
        env=healthy_environ(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return result.returncode, {row["name"]: row for row in json.loads(result.stdout)}


def test_doctor_strict_passes_on_the_site_stack_and_catches_a_torch_changed_after(site: Site, tmp_path: Path):
    code, rows = doctor(site, tmp_path)
    assert code == 0, [row for row in rows.values() if row["status"] != "ok"]
    assert rows["site torch"]["status"] == "ok"
    assert rows["version: torch"]["detail"] == "2.13.0+cpu"
    assert rows["op: cpu_adam"]["status"] == "ok"
    assert rows["version: lock"]["detail"].endswith(f"the site's own (SITE_PROVIDES): tqdm {SITE_TQDM} (lock: 4.70.1)")

    # The site's tqdm upgraded since the venv was made: caught like its torch.
    metadata_file = next(
        site.python.parent.parent.glob(f"lib/python*/site-packages/tqdm-{SITE_TQDM}.dist-info/METADATA")
    )
    original_metadata = metadata_file.read_text()
    try:
        metadata_file.write_text(original_metadata.replace(f"Version: {SITE_TQDM}", "Version: 4.67.2"))
        code, rows = doctor(site, tmp_path)
    finally:
        metadata_file.write_text(original_metadata)
    assert code == 1 and rows["site torch"]["detail"] == f"tqdm is 4.67.2 now, the site's was {SITE_TQDM}"

    # Another build of torch put over the site's: one of its libraries is not the one recorded.
    library = next(site.python.parent.parent.glob("lib/python*/site-packages/torch/lib/libtorch_global_deps.so"))
    original = library.read_bytes()
    try:
        library.write_bytes(original + b"\0")
        code, rows = doctor(site, tmp_path)
    finally:
        library.write_bytes(original)
    assert code == 1
    assert rows["site torch"]["status"] == "fail"
    assert rows["site torch"]["detail"].startswith("torch 2.13.0+cpu's files changed")
    assert rows["site torch"]["fix"] == "rebuild: make venv STACK=site PYTHON=<the site's python>"


def test_the_gpu_proof_runs_its_steps_on_cpu_ranks_and_writes_one_report(site: Site, tmp_path: Path):
    """tests/gpu/proof's own logic (steps, logs, the model it benches, the report) where no GPU is: on CPU
    ranks, over this module's site venv. The smoke step is make smoke's, tested with the image."""
    out = tmp_path / "proof"
    proof = [sys.executable, "tests/gpu/proof", "--device", "cpu", "--python", str(site.python)]
    steps, skip = "facts,venv,gpu,ops,doctor,bench,tests,jit", "checkpoint,overhead"
    result = subprocess.run(
        [*proof, "--venv", str(site.venv), "--output", str(out), "--only", steps, "--bench-skip", skip],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    statuses = {step: row["status"] for step, row in report["steps"].items()}
    assert statuses == {**dict.fromkeys(["facts", "venv", "ops", "doctor", "bench", "tests", "jit"], "ok"),
                        "gpu": "skipped"}  # fmt: skip
    assert report["steps"]["facts"]["facts"]["torch"]["torch"] == "2.13.0+cpu"
    assert report["steps"]["tests"]["counts"]["skipped"] > 0  # no GPU here: every gpu test skips, named
    assert report["bench"]["settings"]["preset"] == "tiny"  # the GPU job's every path, at a CPU size
    assert report["bench"]["configs"] == []  # as on the GPU: no configs rows (tests/e2e/test_bench.py has them)
    # --bench-skip: the groups test_bench.py runs on CPU ranks (the overhead's three scripts, the checkpoint's writes)
    assert report["bench"]["checkpoint"] is None and report["bench"]["overhead"] is None
    speed = {row["switch"]: row for row in report["bench"]["speed"]}  # the speed table: CPU ranks' switches
    assert list(speed) == ["eager", "cross-entropy"] and speed["cross-entropy"]["tokens_per_s"] > 0  # one: no "all"
    eager_loss = speed["eager"]["last_loss"]  # the chunked cross-entropy trains the same curve, to rounding
    assert speed["cross-entropy"]["last_loss"] == pytest.approx(eager_loss, rel=1e-4)
    markdown = (out / "report.md").read_text()
    assert markdown.count("prebuilt and loads") == 7 and "## bench" in markdown and "Skipped tests:" in markdown
    # A step that needs the venv, without one: reported as skipped, the others' results kept.
    again = subprocess.run([*proof, "--venv", str(tmp_path / "none"), "--output", str(out), "--only", "doctor"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    rows = json.loads((out / "report.json").read_text())["steps"]
    assert rows["doctor"] == {"status": "skipped", "why": "no site venv (the venv step failed or has not run)"}
    assert rows["bench"]["status"] == "ok"

    # A library JIT-compiled into the run's extensions folder fails the jit step, naming it.
    (out / "torch-extensions" / "fused_adam").mkdir(parents=True)  # as a JIT compile would leave it
    (out / "torch-extensions" / "fused_adam" / "fused_adam.so").write_bytes(b"")
    jit = subprocess.run([*proof, "--venv", str(site.venv), "--output", str(out), "--only", "jit"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert jit.returncode == 1 and "fused_adam.so" in json.loads((out / "report.json").read_text())["steps"]["jit"][
        "detail"]  # fmt: skip


def test_the_gpu_bundle_carries_what_the_machine_lacks_and_refuses_to_outgrow_the_carry(tmp_path: Path):
    """make gpu-bundle's script (needs the package index): with the machine's package list, only the missing
    wheels, DeepSpeed's sdist and the test runner's pins; over the size limit, one line naming the largest."""
    locked = {**locked_versions((REPO / "containers/lock/dev.txt").read_text()), **locked_versions(
        (REPO / "containers/lock/site.txt").read_text())}  # fmt: skip
    machine = tmp_path / "machine.json"  # as `pip list --format json` shows a machine with all of it but one
    machine.write_text(json.dumps([{"name": k, "version": v} for k, v in locked.items() if k != "python-hostlist"]))
    bundle = [sys.executable, "containers/gpu-bundle", "--python", "3.11", "--installed", str(machine)]
    result = subprocess.run([*bundle, str(tmp_path / "b")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    files = sorted(p.name.replace("_", "-") for p in (tmp_path / "b").iterdir())
    assert files == ["bundle.json", "deepspeed-0.19.8.tar.gz", "libaio-dev-0.3.113-4-amd64.deb",
                     "libaio1-0.3.113-4-amd64.deb", "python-hostlist-2.3.0.tar.gz", "requirements.txt",
                     "test-runner.txt"]  # fmt: skip
    assert "pytest==" in (tmp_path / "b" / "test-runner.txt").read_text()
    made = json.loads((tmp_path / "b" / "bundle.json").read_text())
    assert made["python"] == "3.11" and made["assumed"]["transformers"] == locked["transformers"]  # left to it
    assert "python-hostlist" not in made["assumed"] and "deepspeed" not in made["assumed"]

    # The proof checks it first, against the machine it runs on (here this Python): it was made for 3.11 with
    # the lock's transformers assumed; a machine with another makes it refuse in one line and run nothing else.
    made["assumed"]["transformers"] = "0.0.1"
    (tmp_path / "b" / "bundle.json").write_text(json.dumps(made))
    proof = [sys.executable, "tests/gpu/proof", "--device", "cpu", "--python", sys.executable,
             "--wheelhouse", str(tmp_path / "b"), "--output", str(tmp_path / "proof")]  # fmt: skip
    refused = subprocess.run(proof, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    steps = json.loads((tmp_path / "proof" / "report.json").read_text())["steps"]
    detail = steps["bundle"]["detail"]
    assert list(steps) == ["bundle"] and "it left out transformers 0.0.1, which this machine has at " in detail
    small = subprocess.run([*bundle, "--max-mib", "0.1", str(tmp_path / "c")], cwd=REPO, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert small.returncode == 1
    last = small.stderr.strip().splitlines()[-1]  # after pip's own lines
    assert last.startswith("error: the bundle is ") and "over 0 MiB (largest: deepspeed " in last, last
