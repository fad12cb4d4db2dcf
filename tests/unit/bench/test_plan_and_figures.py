"""bench's plan (which commands run) and its figures (efficiency, start-up and overhead ratios)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.bench.plan import BenchConfig, PlainInputs, plan_runs
from zerokit.bench.report import overhead_summary, scaling_rows, startup_summary
from zerokit.bench.runner import RunResult


def config(tmp_path: Path, **changes) -> BenchConfig:
    values = dict(
        output=tmp_path / "bench",
        ranks=(1, 2),
        nodes=(1,),
        config=Path("configs/zero3.json"),
        steps=20,
        warmup_steps=2,
        eval_steps=10,
        batch_size=4,
        repeats=2,
        python="/env/bin/python",
        jit_python="/jit/bin/python",
        plain_script=Path("tests/bench/plain_hf_trainer.py"),
        hosts=("node1", "node2"),
        launcher="pdsh",
        skip=frozenset(),
        model=None,
        dataset=None,
        block_size=None,
        train_args=("--bf16", "true"),
        on_gpu=False,
    )
    return BenchConfig(**{**values, **changes})


PLAIN = PlainInputs(("--config_name", "cfg"), "train.txt", "validation.txt", 64)


def test_plan_scales_then_jit_then_alternates_zerokit_and_plain(tmp_path: Path):
    runs = plan_runs(config(tmp_path, nodes=(1, 2)), PLAIN)
    assert [r.name for r in runs] == [
        "scaling-1n-1r", "scaling-1n-2r", "scaling-2n-1r", "scaling-2n-2r", "startup-jit-1n-2r",
        "overhead-zerokit-1", "overhead-plain-1", "overhead-zerokit-2", "overhead-plain-2",
    ]  # fmt: skip
    by_name = {r.name: r for r in runs}
    two_nodes = by_name["scaling-2n-2r"]
    assert two_nodes.world_size == 4
    launch = ("/env/bin/python", "-m", "zerokit", "launch", "--nproc-per-node", "2", "--launcher", "pdsh")
    assert two_nodes.argv[:8] == launch
    assert "--hostfile" in two_nodes.argv and "--hostfile" not in by_name["scaling-1n-2r"].argv
    assert two_nodes.argv[-2:] == ("--bf16", "true")  # flags after -- reach train


def test_jit_run_uses_the_jit_python_a_fresh_extensions_folder_and_no_preflight(tmp_path: Path):
    jit = next(r for r in plan_runs(config(tmp_path), PLAIN) if r.group == "startup")
    assert jit.argv[0] == "/jit/bin/python" and "--no-preflight" in jit.argv
    assert jit.env["TORCH_EXTENSIONS_DIR"] == str(jit.folder / "torch-extensions")
    prebuilt = [r for r in plan_runs(config(tmp_path), PLAIN) if r.variant == "zerokit"]
    assert all("TORCH_EXTENSIONS_DIR" not in r.env and "--no-preflight" not in r.argv for r in prebuilt)


def test_plain_run_is_torchrun_with_the_same_config_steps_and_threads_per_rank(tmp_path: Path):
    plain = next(r for r in plan_runs(config(tmp_path), PLAIN) if r.variant == "plain")
    argv = list(plain.argv)
    assert argv[1:7] == ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    assert argv[argv.index("--deepspeed") + 1] == "configs/zero3.json" and "--use_cpu" in argv
    assert argv[argv.index("--max_steps") + 1] == "20" and argv[argv.index("--block_size") + 1] == "64"
    assert "OMP_NUM_THREADS" in plain.env


def test_skips_leave_out_their_runs(tmp_path: Path):
    runs = plan_runs(config(tmp_path, skip=frozenset({"overhead"}), jit_python=None), PLAIN)
    assert {r.group for r in runs} == {"scaling"}
    only_two_nodes = plan_runs(config(tmp_path, nodes=(2,)), PLAIN)  # JIT start-up compares with a 1-node run
    assert "startup" not in {r.group for r in only_two_nodes} and "overhead" in {r.group for r in only_two_nodes}


def result(name: str, group: str, variant: str, world: int, samples: float, first: float, nodes: int = 1) -> RunResult:
    return RunResult(
        name=name, group=group, variant=variant, nodes=nodes, world_size=world, time_to_first_step=first,
        steps_per_second=samples / 10, samples_per_second=samples, tokens_per_second=samples * 64,
        peak_memory_bytes=[2**20] * world, hosts=["n1"] * world, memory_kind="cpu-rss", evals=[(10, 3.0)],
        wall_seconds=30.0,
        compiled_ops=["fused_adam"] if variant == "jit" else [],
    )  # fmt: skip


def test_figures_efficiency_startup_and_overhead_ratios():
    results = [
        result("s1", "scaling", "zerokit", 1, 100.0, 10.0),
        result("s2", "scaling", "zerokit", 2, 150.0, 12.0),
        result("j", "startup", "jit", 2, 150.0, 60.0),
        result("z1", "overhead", "zerokit", 2, 140.0, 12.0),
        result("p1", "overhead", "plain", 2, 160.0, 8.0),
        result("z2", "overhead", "zerokit", 2, 150.0, 13.0),
        result("p2", "overhead", "plain", 2, 140.0, 10.0),
        result("z3", "overhead", "zerokit", 2, 999.0, 11.0),
        result("p3", "overhead", "plain", 2, 150.0, 9.0),
    ]
    rows = scaling_rows(results)
    assert [(r["ranks"], r["efficiency"]) for r in rows] == [(1, 1.0), (2, 0.75)]
    startup = startup_summary(results)
    assert (startup["prebuilt_s"], startup["jit_s"], startup["saved_s"]) == (12.0, 60.0, 48.0)
    overhead = overhead_summary(results)
    assert overhead["zerokit"]["median_samples_per_s"] == 150.0  # a median: the outlier 999 does not move it
    assert overhead["throughput_ratio"] == pytest.approx(150.0 / 150.0)
    assert overhead["startup_ratio"] == pytest.approx(12.0 / 9.0)


def test_bad_input_is_refused_before_anything_runs(tmp_path: Path, zk_env):
    existing = tmp_path / "report"
    existing.mkdir()
    (existing / "report.md").write_text("keep me")
    result_ = run_zerokit(["bench", "--output", str(existing)], zk_env)
    assert result_.returncode == 2 and "exists: pass --overwrite" in result_.stderr
    assert (existing / "report.md").read_text() == "keep me"

    result_ = run_zerokit(["bench", "--output", str(tmp_path / "new"), "--nodes", "1,2"], zk_env)
    assert result_.returncode == 2 and "--nodes 2 needs --hostfile" in result_.stderr
    result_ = run_zerokit(["bench", "--output", str(tmp_path / "new"), "--steps", "5", "--warmup-steps", "5"], zk_env)
    assert result_.returncode == 2 and "leaves nothing to time" in result_.stderr
    result_ = run_zerokit(["bench", "--output", str(tmp_path / "new"), "--ranks", "0"], zk_env)
    assert result_.returncode == 2 and "at least 1" in result_.stderr
    assert not (tmp_path / "new").exists()
