"""bench's plan (which commands run) and its figures (efficiency, start-up and overhead ratios)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.bench.flops import flops_per_token, mfu, peak_tflops, precision_of
from zerokit.bench.plan import BenchConfig, DataInputs, PlainInputs, plan_runs
from zerokit.bench.report import (
    config_rows,
    data_summary,
    overhead_section,
    overhead_summary,
    scaling_rows,
    startup_summary,
)
from zerokit.bench.runner import RunResult
from zerokit.foundations.errors import UserError
from zerokit.train.callbacks.preemption import BENCH_WITHOUT_VARIABLE


def config(tmp_path: Path, **changes) -> BenchConfig:
    values = dict(
        output=tmp_path / "bench",
        ranks=(1, 2),
        nodes=(1,),
        config=Path("configs/zero3.json"),
        configs=("zero2", "zero3", "none"),
        steps=20,
        warmup_steps=2,
        eval_steps=10,
        batch_size=4,
        repeats=2,
        python="/env/bin/python",
        jit_python="/jit/bin/python",
        plain_script=Path("src/zerokit/bench/plain_hf_trainer.py"),
        hosts=("node1", "node2"),
        launcher="pdsh",
        skip=frozenset(),
        model=None,
        dataset=None,
        block_size=None,
        train_args=("--bf16", "true"),
        on_gpu=False,
        raw_script=Path("src/zerokit/bench/raw_deepspeed_loop.py"),
    )
    return BenchConfig(**{**values, **changes})


PLAIN = PlainInputs(("--config_name", "cfg"), "train.txt", "validation.txt", 64)


DATA = DataInputs({1: "c1.txt", 10: "c10.txt"}, {1: "p1", 10: "p10"}, 64)


def test_plan_scales_then_configs_jit_data_then_rounds_of_zerokit_plain_and_no_preemption(tmp_path: Path):
    runs = plan_runs(config(tmp_path, nodes=(1, 2)), PLAIN, DATA)
    assert [r.name for r in runs] == [
        "scaling-1n-1r", "scaling-1n-2r", "scaling-2n-1r", "scaling-2n-2r", "configs-zero2", "configs-none",
        "startup-jit-1n-2r", "checkpoint-2r-sync", "checkpoint-2r-background", "checkpoint-2r-memory",
        "data-raw-1x-1", "data-prepared-1x-1", "data-raw-10x-1", "data-prepared-10x-1",
        "data-raw-1x-2", "data-prepared-1x-2", "data-raw-10x-2", "data-prepared-10x-2",
        "overhead-zerokit-1", "overhead-plain-1", "overhead-plain-no-deepspeed-1", "overhead-raw-1",
        "overhead-no-preemption-1",
        "overhead-zerokit-2", "overhead-plain-2", "overhead-plain-no-deepspeed-2", "overhead-raw-2",
        "overhead-no-preemption-2",
    ]  # fmt: skip
    by_name = {r.name: r for r in runs}
    two_nodes = by_name["scaling-2n-2r"]
    assert two_nodes.world_size == 4
    launch = ("/env/bin/python", "-m", "zerokit", "launch", "--nproc-per-node", "2", "--launcher", "pdsh")
    assert two_nodes.argv[:8] == launch
    assert "--hostfile" in two_nodes.argv and "--hostfile" not in by_name["scaling-1n-2r"].argv
    assert two_nodes.argv[-2:] == ("--bf16", "true")  # flags after -- reach train


def test_configs_data_and_no_preemption_runs_differ_from_the_others_in_one_thing_each(tmp_path: Path):
    by_name = {r.name: r for r in plan_runs(config(tmp_path), PLAIN, DATA)}
    argv = by_name["configs-none"].argv
    assert argv[argv.index("--config") + 1] == "none" and by_name["configs-none"].variant == "none"
    raw, prepared = by_name["data-raw-10x-1"], by_name["data-prepared-10x-1"]
    assert raw.argv[raw.argv.index("--dataset") + 1] == "c10.txt" and "--block-size" in raw.argv
    assert prepared.argv[prepared.argv.index("--dataset") + 1] == "p10" and "--block-size" not in prepared.argv
    assert raw.argv[-4:] == ("--max_steps", "5", "--eval_strategy", "no")  # time to first step only
    assert raw.env["HF_DATASETS_CACHE"].startswith(str(raw.folder))  # raw text is tokenized afresh
    assert by_name["overhead-no-preemption-1"].env[BENCH_WITHOUT_VARIABLE] == "1"
    without, with_ = (" ".join(by_name[n].argv) for n in ("overhead-no-preemption-1", "overhead-zerokit-1"))
    assert without.replace("overhead-no-preemption-1", "overhead-zerokit-1") == with_  # only its folders differ
    assert BENCH_WITHOUT_VARIABLE not in by_name["overhead-zerokit-1"].env
    skipped = plan_runs(config(tmp_path, skip=frozenset({"configs", "data", "checkpoint", "preemption"})), PLAIN, DATA)
    assert {r.group for r in skipped} == {"scaling", "startup", "overhead"}
    assert {r.variant for r in skipped if r.group == "overhead"} == {"zerokit", "plain", "plain-no-deepspeed", "raw"}


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
    runs = plan_runs(config(tmp_path, skip=frozenset({"overhead", "configs", "checkpoint"}), jit_python=None), PLAIN)
    assert {r.group for r in runs} == {"scaling"}
    only_two_nodes = plan_runs(config(tmp_path, nodes=(2,)), PLAIN)  # JIT start-up compares with a 1-node run
    assert "startup" not in {r.group for r in only_two_nodes} and "overhead" in {r.group for r in only_two_nodes}


def result(
    name: str, group: str, variant: str, world: int, samples: float, first: float, nodes: int = 1, **more
) -> RunResult:
    return RunResult(**more,
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
    spread = overhead["throughput_spread"]  # the rounds' own ratios: 140/160, 150/140, 999/150
    assert (spread["pair_min"], spread["pair_max"]) == (pytest.approx(140 / 160), pytest.approx(999 / 150))
    assert overhead["plain_throughput_max_over_min"] == pytest.approx(160 / 140)
    assert "preemption_cost" not in overhead


def test_preemption_cost_config_rows_and_data_ratios():
    phases = [("launch preflight", 0.5), ("imports", 5.0), ("first_step", 1.0)]
    results = [
        result("s2", "scaling", "zerokit", 2, 150.0, 12.0, parameters=1000),
        result("c", "configs", "none", 2, 170.0, 9.0, parameters=1000),
        result("z1", "overhead", "zerokit", 2, 150.0, 12.0, startup_phases=phases),
        result("p1", "overhead", "plain", 2, 150.0, 10.0),
        result("n1", "overhead", "zerokit-no-preemption", 2, 152.0, 12.0),
        result("z2", "overhead", "zerokit", 2, 148.0, 12.0, startup_phases=phases),
        result("p2", "overhead", "plain", 2, 150.0, 10.0),
        result("n2", "overhead", "zerokit-no-preemption", 2, 146.0, 12.0),
        result("r1", "data", "raw-1x", 2, 0.0, 10.0),
        result("r10", "data", "raw-10x", 2, 0.0, 30.0),
        result("p1x", "data", "prepared-1x", 2, 0.0, 10.0),
        result("p10x", "data", "prepared-10x", 2, 0.0, 10.5),
        result("p10x-2", "data", "prepared-10x", 2, 0.0, 11.5),  # a second round: the median is 11.0
    ]
    overhead = overhead_summary(results)
    cost = overhead["preemption_cost"]
    assert cost["ratio"] == pytest.approx(149.0 / 149.0) and cost["pair_min"] == pytest.approx(150 / 152)
    assert overhead["zerokit"]["startup_phases"] == phases
    rows = config_rows(results, "zero3", peak=100.0)
    assert [(r["config"], r["samples_per_s"]) for r in rows] == [("zero3", 150.0), ("none", 170.0)]
    assert rows[1]["mfu"] is None  # the model's shape unknown: no MFU rather than one without attention
    shaped = [result("c", "configs", "none", 2, 170.0, 9.0, parameters=1000, layers=2, hidden=8, sequence=64)]
    rows = config_rows([*results[:1], *shaped], "zero3", peak=100.0)
    assert rows[1]["mfu"] == pytest.approx(170.0 * 64 * (6 * 1000 + 12 * 2 * 8 * 64) / (2 * 100e12))
    data = data_summary(results, {1: 2.0, 10: 9.0})
    assert data["raw_10x_over_1x"] == pytest.approx(3.0) and data["prepared_10x_over_1x"] == pytest.approx(1.1)


def test_flops_per_token_count_attention_and_peaks_depend_on_the_gpu_and_its_precision():
    # GPT-2 124M at sequence 1024, by hand: 6 * 124,439,808 = 746,638,848 for the parameters, and attention's
    # QK^T and AV, forward (2 matmuls x 2 FLOPs x S x d per layer) and backward (twice that): 12 x 12 x 768 x 1024
    # = 113,246,208, 15% of the parameters' share.
    assert flops_per_token(124_439_808, 12, 768, 1024) == 746_638_848 + 113_246_208
    # 7B parameters (32 x 4096) at sequence 4096, 8 GPUs of 989.5 TFLOPS, 80k tokens/s: 49.0%, not 6N's 42.4%.
    assert mfu(8e4, flops_per_token(7_000_000_000, 32, 4096, 4096), 8, 989.5) == pytest.approx(0.4896, abs=1e-4)
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.5 and peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == 67.0 and peak_tflops("NVIDIA H100 NVL", "tf32") == 417.5
    assert peak_tflops("NVIDIA H200 NVL") == 835.5 and peak_tflops("NVIDIA H200") == 989.5
    assert peak_tflops("NVIDIA GH200 480GB") == 989.5 and peak_tflops("NVIDIA B200") == 2250.0
    assert peak_tflops("NVIDIA L40") == 181.0 and peak_tflops("NVIDIA L4") == 121.0  # not L40S's, not L4's
    assert peak_tflops("Tesla V100-SXM2-32GB", "bf16") is None and peak_tflops("cpu") is None
    assert precision_of(["--bf16", "true"]) == "bf16" and precision_of(["--fp16=true"]) == "fp16"
    assert precision_of(["--bf16", "false", "--tf32", "true"]) == "tf32" and precision_of([]) == "fp32"


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
    result_ = run_zerokit(["bench", "--output", str(tmp_path / "new"), "--repeats", "0"], zk_env)  # was a TypeError
    assert (result_.returncode, result_.stderr) == (2, "error: --repeats (ZEROKIT_REPEATS) must be at least 1, got 0\n")
    result_ = run_zerokit(["bench", "--output", str(tmp_path / "new"), "--peak-tflops", "-1"], zk_env)  # ran all
    assert result_.returncode == 2 and "--peak-tflops (ZEROKIT_PEAK_TFLOPS)='-1' is not a peak" in result_.stderr
    assert not (tmp_path / "new").exists()
    # What train would refuse in the first run is refused before --overwrite replaces the earlier report.
    again = ["bench", "--output", str(existing), "--overwrite"]
    result_ = run_zerokit([*again, "--", "--lerning_rate", "1e-4"], zk_env)
    assert result_.returncode == 2 and "unknown flag --lerning_rate: did you mean --learning_rate?" in result_.stderr
    result_ = run_zerokit([*again, "--preset", "tiny", "--block-size", "65"], zk_env)
    assert result_.returncode == 2 and "--block-size 65 is past the preset tiny's 64 positions" in result_.stderr
    assert (existing / "report.md").read_text() == "keep me"


def test_a_tiny_models_mfu_is_not_printed_as_zero():
    """Seen on an H100: the tiny bench model's 0.007% MFU read "0.0%"."""
    from zerokit.bench.report import percent

    assert (percent(0.00007), percent(0.412)) == ("0.007%", "41%")


def test_a_split_config_that_does_not_divide_the_ranks_is_refused_before_any_run():
    from zerokit.bench.cli import checked_configs

    assert checked_configs("zero2, zero2+tp2, zero1+pp4", 4) == ["zero2", "zero2+tp2", "zero1+pp4"]
    with pytest.raises(UserError, match="--configs zero2\\+pp2: pipeline stages train with ZeRO-1: give zero1\\+pp2"):
        checked_configs("zero2+pp2", 2)
    with pytest.raises(UserError, match="zero2\\+tp0: the tensor parallel size must be at least 1"):
        checked_configs("zero2+tp0", 2)
    with pytest.raises(UserError) as refused:
        checked_configs("zero2+tp3", 2)
    assert str(refused.value) == (
        "--configs zero2+tp3: tensor parallel size 3 does not divide the 2 ranks the configs run on (the largest "
        "--ranks): give --ranks a multiple of 3"
    )


def test_the_baselines_are_the_plain_script_with_and_without_deepspeed_and_the_raw_loop(tmp_path: Path):
    by_name = {r.name: r for r in plan_runs(config(tmp_path), PLAIN)}
    plain, bare, raw = (by_name[f"overhead-{v}-1"] for v in ("plain", "plain-no-deepspeed", "raw"))
    assert [w for w in raw.argv if w.endswith(".py")] == ["src/zerokit/bench/raw_deepspeed_loop.py"]
    assert "--deepspeed" in plain.argv and "--deepspeed" in raw.argv and "--deepspeed" not in bare.argv

    def words(run):  # the command line but its free port and its own folder's name
        argv = list(run.argv)
        del argv[argv.index("--master-port") : argv.index("--master-port") + 2]
        return [word.replace(run.name, "RUN") for word in argv]

    assert [w for w in words(plain) if w not in ("--deepspeed", "configs/zero3.json")] == words(bare)
    for run in (plain, bare, raw, by_name["overhead-zerokit-1"]):  # every script counts its steps' tokens on CPU
        assert run.argv[run.argv.index("--include_num_input_tokens_seen") + 1] == "true"
    for run in plan_runs(config(tmp_path, on_gpu=True, preset="tiny"), PLAIN):  # on a GPU: no count's sync, full steps
        flags = dict(zip(run.argv, run.argv[1:], strict=False))
        assert (flags["--include_num_input_tokens_seen"], flags["--dataloader_drop_last"]) == ("false", "true")
    skipped = plan_runs(config(tmp_path, skip=frozenset({"raw", "no-deepspeed"})), PLAIN)
    assert {r.variant for r in skipped if r.group == "overhead"} == {"zerokit", "plain", "zerokit-no-preemption"}


def test_the_clock_counts_the_tokens_a_short_last_batch_really_had(tmp_path: Path, capsys):
    """StepClock driven as the Trainer drives it (its hooks, its state's token count): an epoch of 3 full steps of
    64 tokens and a short one of 16; throughput is the counted tokens over the steps' time, not 4 full steps. A
    folder it cannot write costs the run one line, not its end (the model is saved after the clock's on_train_end)."""
    import json
    from types import SimpleNamespace

    from zerokit.bench.plan import Run
    from zerokit.bench.runner import summarize
    from zerokit.train.callbacks.step_clock import StepClock

    clock = StepClock(tmp_path / "timings", tokens_per_sample=16)
    args = SimpleNamespace(world_size=1, process_index=0, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    state = SimpleNamespace(num_input_tokens_seen=0)
    clock.on_train_begin(args, state, None)
    for tokens in (64, 64, 64, 64, 16):  # the first step is left out of the timings, as every step before it
        state.num_input_tokens_seen += tokens
        clock.on_step_end(args, state, None)
    clock.on_train_end(args, state, None)
    record = json.loads((tmp_path / "timings" / "rank-0.json").read_text())
    assert record["step_tokens"] == [64, 64, 64, 16] and record["tokens_per_step"] == 64
    record["step_seconds"] = [1.0, 1.0, 1.0, 1.0]
    run = Run("r", "scaling", "zerokit", 1, 1, ("x",), tmp_path)
    figures = summarize(run, [{**record, "first_step_end": 1.0}], 0.0, 10.0, warmup_steps=0)
    assert figures.tokens_per_second == 208 / 4 and figures.samples_per_second == 208 / 4 / 16
    assert figures.tokens_counted and figures.steps_per_second == 1.0

    (tmp_path / "a-file").write_text("")
    unwritable = StepClock(tmp_path / "a-file" / "timings", tokens_per_sample=16)
    unwritable.on_train_begin(args, state, None)
    unwritable.on_step_end(args, state, None)
    unwritable.on_train_end(args, state, None)  # no exception
    assert f"zerokit: the step times were not written to {tmp_path / 'a-file' / 'timings' / 'rank-0.json'}: " in (
        capsys.readouterr().err
    )


def test_a_preset_is_flags_the_users_own_override(tmp_path: Path):
    from zerokit.bench.cli import parse

    cfg = parse(["--preset", "tiny", "--output", str(tmp_path / "b"), "--repeats", "1", "--", "--seed", "3"])
    assert (cfg.preset, cfg.repeats, cfg.batch_size, cfg.block_size, cfg.ranks) == ("tiny", 1, 4, 64, (1,))
    assert cfg.model == str((tmp_path / "b" / "preset" / "model").resolve()) and cfg.configs == ("zero1", "zero3")
    assert cfg.config.name == "zero2.json" and {"startup", "data", "preemption"} <= cfg.skip
    assert cfg.train_args == ("--seed", "3") and cfg.precision == "fp32"


def test_a_gpu_missing_from_the_peak_table_is_refused_naming_peak_tflops(tmp_path: Path, monkeypatch):
    """A mock GPU (none here): torch says it sees one of a name the table lacks. bench refuses before any run."""
    import torch

    from zerokit.bench.cli import parse

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA Future X1")
    with pytest.raises(UserError) as refused:
        parse(["--output", str(tmp_path / "b")])
    assert str(refused.value) == (
        "bench: zerokit.bench.flops has no bf16 peak for 'NVIDIA Future X1', so MFU cannot be reported: give "
        "--peak-tflops N (the data sheet's dense bf16 TFLOPS per GPU)"
    )
    assert parse(["--output", str(tmp_path / "b"), "--peak-tflops", "500"]).peak_tflops == 500.0
    assert not (tmp_path / "b").exists()


def test_a_checkpoints_save_is_timed_apart_from_the_steps(tmp_path: Path, monkeypatch):
    """StepClock as the Trainer drives it, with a save after the second step: the save's seconds are kept apart
    and the next step's time starts after it; the report says what a save costs in steps."""
    import json
    from types import SimpleNamespace

    from zerokit.bench.report import checkpoint_summary
    from zerokit.bench.runner import RunResult
    from zerokit.train.callbacks import step_clock

    now = [100.0]
    monkeypatch.setattr(step_clock, "time", SimpleNamespace(time=lambda: now[0]))
    clock = step_clock.StepClock(tmp_path / "timings", tokens_per_sample=16)
    args = SimpleNamespace(world_size=1, process_index=0, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    state = SimpleNamespace(num_input_tokens_seen=0)
    clock.on_train_begin(args, state, None)
    for seconds, event in ((1, "on_step_end"), (1, "on_step_end"), (6, "on_save"), (1, "on_step_end")):
        now[0] += seconds
        getattr(clock, event)(args, state, None)
    clock.on_train_end(args, state, None)
    record = json.loads((tmp_path / "timings" / "rank-0.json").read_text())
    assert record["step_seconds"] == [1.0, 1.0] and record["save_seconds"] == [6.0]

    sync = RunResult("c", "checkpoint", "sync", 1, 2, 1.0, 0.5, 2.0, 32.0, [1], ["h"], "cpu-rss", [], 10.0, [],
                     save_seconds=[4.0, 6.0, 5.0], checkpoint_bytes=100 * 2**20)  # fmt: skip
    figures = [{"wait_seconds": w, "write_seconds": s} for w, s in ((0.0, 8.0), (1.0, 10.0), (0.5, 12.0))]
    background = RunResult("b", "checkpoint", "background", 1, 2, 1.0, 0.5, 2.0, 32.0, [1], ["h"], "cpu-rss", [],
                           10.0, [], save_seconds=[0.2, 0.4, 0.3], checkpoint_bytes=100 * 2**20,
                           checkpoint_saves=figures)  # fmt: skip
    summary = checkpoint_summary([sync, background])
    assert summary["ranks"] == 2
    assert summary["sync"] == {"saves": 3, "stall_s": 5.0, "step_s": 2.0, "stall_steps": 2.5, "wait_s": 0.0,
                               "write_s": 5.0, "steps_per_s": 0.5, "checkpoint_mib": 100.0,
                               "write_mib_per_s": 20.0}  # fmt: skip
    assert summary["background"] == pytest.approx({"saves": 3, "stall_s": 0.3, "step_s": 2.0, "stall_steps": 0.15,
                                                   "wait_s": 0.5, "write_s": 10.0, "steps_per_s": 0.5,
                                                   "checkpoint_mib": 100.0, "write_mib_per_s": 10.0})  # fmt: skip
    assert summary["memory"] is None  # not run

    copies = [{"write": "memory", "stall_seconds": s, "write_seconds": 0.2, "bytes": 8 * 2**20, "peer_seconds": 0.1}
              for s in (0.05, 0.1, 0.15)] + figures  # fmt: skip
    memory = RunResult("m", "checkpoint", "memory", 1, 2, 1.0, 0.5, 2.0, 32.0, [1], ["h"], "cpu-rss", [], 10.0, [],
                       save_seconds=[0.2], checkpoint_bytes=100 * 2**20, checkpoint_saves=copies)  # fmt: skip
    assert checkpoint_summary([memory])["memory"] == pytest.approx({"copies": 3, "stall_s": 0.1, "stall_steps": 0.05,
                                                                    "write_s": 0.2, "node_copy_mib": 8.0,
                                                                    "peer_s": 0.1, "steps_per_s": 0.5})  # fmt: skip


def test_the_checkpoint_run_saves_every_third_of_the_steps_unless_skipped(tmp_path: Path):
    from zerokit.bench.cli import parse
    from zerokit.bench.plan import plan_runs

    cfg = parse(["--output", str(tmp_path / "b"), "--ranks", "1,2", "--steps", "12"])
    sync, background, memory = [r for r in plan_runs(cfg, None) if r.group == "checkpoint"]
    for run, write in ((sync, "sync"), (background, "background"), (memory, "memory")):
        assert run.world_size == 2 and run.variant == write  # the compared ranks, on one node
        at = run.argv.index("--save_strategy")
        assert run.argv[at : at + 6] == ("--save_strategy", "steps", "--save_steps", "4", "--save_total_limit", "1")
        assert run.argv.count("--save_strategy") == 1
    at = sync.argv.index("train")
    assert sync.argv[at : at + 3] == ("train", "--checkpoint-write", "sync")
    assert background.argv[at : at + 3] == ("train", "--checkpoint-write", "background")
    assert memory.argv[at : at + 5] == ("train", "--memory-checkpoints", "1", "--checkpoint-write", "background")
    skipped = parse(["--output", str(tmp_path / "c"), "--skip", "checkpoint"])
    assert not [r for r in plan_runs(skipped, None) if r.group == "checkpoint"]


def test_the_speed_table_takes_the_switches_that_can_run_here(tmp_path: Path):
    """On CPU ranks the chunked cross-entropy; on a GPU Liger's where installed, compile and FlashAttention where
    its package is, the micro-batch train chooses (not under ZeRO-3); no fused cross-entropy under ZeRO-3. Each
    alone, then all together; a run with --micro-batch auto leaves bench's batch size out (train refuses both)."""
    from zerokit.bench.plan import speed_runs, speed_switches

    assert speed_switches(False, lambda name: True, 2) == (("cross-entropy", ("--cross-entropy", "chunked")),)
    gpu = speed_switches(True, lambda name: True, 2)
    assert [name for name, _ in gpu] == ["cross-entropy", "compile", "flash-attention", "micro-batch"]
    assert gpu[0][1] == ("--cross-entropy", "liger")
    assert [name for name, _ in speed_switches(True, lambda name: False, 3, micro_batch=False)] == ["compile"]
    from zerokit.bench.cli import train_takes_micro_batch_auto  # the row only where train would take the flag

    assert train_takes_micro_batch_auto(Path("configs/zero2.json"), [])
    assert not train_takes_micro_batch_auto(Path("configs/zero3.json"), [])
    assert not train_takes_micro_batch_auto(Path("configs/zero2.json"), ["--per_device_train_batch_size", "8"])
    runs = speed_runs(config(tmp_path, speed=gpu, ranks=(1,)), 1)
    assert [run.variant for run in runs] == ["cross-entropy", "compile", "flash-attention", "micro-batch", "all"]
    one = speed_switches(False, lambda name: True, 2)  # CPU ranks: one switch, whose "all" would be the same run
    assert [run.variant for run in speed_runs(config(tmp_path, speed=one, ranks=(1,)), 1)] == ["cross-entropy"]
    assert {"--cross-entropy", "--compile", "--attn-implementation", "--micro-batch"} <= set(runs[-1].argv)
    batch_given = {run.variant: "--per_device_train_batch_size" in run.argv for run in runs}
    assert batch_given == {"cross-entropy": True, "compile": True, "flash-attention": True, "micro-batch": False,
                           "all": False}  # fmt: skip


def test_the_overhead_switches_reach_every_side_in_its_own_spelling(tmp_path: Path):
    """--overhead-switches compile: zerokit's train (with and without the preemption callback) gets --compile torch,
    the plain script (with DeepSpeed and without) and the raw loop HF's --torch_compile true; the report says so."""
    from zerokit.bench.cli import checked_overhead_switches

    corpus = str(tmp_path / "corpus.txt")
    switched = config(tmp_path, overhead_switches=("compile",), dataset=corpus, block_size=64)
    runs = [r for r in plan_runs(switched, PLAIN) if r.group == "overhead"]
    for run in runs:
        train = "zerokit" in run.variant
        flags = dict(zip(run.argv, run.argv[1:], strict=False))
        assert (flags.get("--compile"), flags.get("--torch_compile")) == (("torch", None) if train else (None, "true"))
        assert flags.get("--dataset", corpus) == corpus  # train's runs keep the job's data beside the switch
    assert {r.variant for r in runs} == {"zerokit", "plain", "plain-no-deepspeed", "raw", "zerokit-no-preemption"}
    caches = {r.env["TORCHINDUCTOR_CACHE_DIR"] for r in runs} | {r.env["TRITON_CACHE_DIR"] for r in runs}
    assert len(caches) == 2 * len(runs)  # each compiles anew: none reuses the kernels of the run before it
    speed = plan_runs(config(tmp_path, speed=(("compile", ("--compile", "torch")),)), PLAIN)
    assert [r.env.get("TORCHINDUCTOR_CACHE_DIR") for r in speed if r.group == "speed"] == [None]  # no start-up
    eager = [r for r in plan_runs(config(tmp_path), PLAIN) if r.group == "overhead"]
    assert not any("--compile" in r.argv or "--torch_compile" in r.argv for r in eager)
    pair = [result("z1", "overhead", "zerokit", 2, 150.0, 12.0), result("p1", "overhead", "plain", 2, 150.0, 10.0)]
    assert "Every side ran with compile." in "\n".join(overhead_section(overhead_summary(pair, None, ("compile",))))
    assert "Eager." in "\n".join(overhead_section(overhead_summary(pair)))

    assert checked_overhead_switches("compile, compile", on_gpu=False) == ("compile",)
    with pytest.raises(UserError, match="--overhead-switches cross-entropy: not a switch both sides have; choose from"):
        checked_overhead_switches("cross-entropy", on_gpu=False)
    with pytest.raises(UserError, match="--overhead-switches flash-attention: FlashAttention runs on GPUs only"):
        checked_overhead_switches("flash-attention", on_gpu=False)
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(UserError, match="--attn-implementation flash_attention_2 needs the flash_attn package"):
            checked_overhead_switches("flash-attention", on_gpu=True)
    else:
        assert checked_overhead_switches("flash-attention", on_gpu=True) == ("flash-attention",)


def planned_result(run) -> RunResult:
    """What a finished run of the plan gives, in the shape its group reports (saves for the checkpoint group)."""
    saves = [{"wait_seconds": 0.1, "write_seconds": 1.0}] * 3
    if run.variant == "memory":
        saves += [{"write": "memory", "stall_seconds": 0.1, "write_seconds": 0.2, "bytes": 2**20, "peer_seconds": 0.1}]
    checkpoint = run.group == "checkpoint"
    return result(
        run.name, run.group, run.variant, run.world_size, 16.0 * run.world_size, 9.0, nodes=run.nodes,
        parameters=1000, layers=2, hidden=8, sequence=64, step_quantiles=(0.1, 0.12, 0.2), last_loss=3.0,
        save_seconds=[0.5] * 3 if checkpoint else [], checkpoint_bytes=2**20 if checkpoint else None,
        checkpoint_saves=saves if checkpoint and run.variant != "sync" else [],
    )  # fmt: skip


@pytest.mark.parametrize("gpus", [[], ["NVIDIA H200"]], ids=["cpu", "gpu"])
def test_the_report_is_written_after_every_run_of_the_plan(tmp_path: Path, gpus: list[str]):
    """bench rewrites its report after each run (a machine taken back midway keeps the rows it finished): every
    prefix of the whole plan, each group cut anywhere, renders. `make bench` once died after its data group's first
    run, on a ratio whose second run had not come."""
    from zerokit.bench.plan import speed_switches
    from zerokit.bench.report import collect, markdown

    on_gpu = bool(gpus)
    cfg = config(tmp_path, on_gpu=on_gpu, speed=speed_switches(on_gpu, lambda name: True, 2), config=Path("zero2"))
    runs = plan_runs(cfg, PLAIN, DATA)
    assert {run.group for run in runs} == {"scaling", "configs", "startup", "speed", "checkpoint", "data", "overhead"}
    results = [planned_result(run) for run in runs]
    host = {"host": "n1", "cpu": "cpu", "cpu_cores": 2, "gpus": gpus, "torch": "t", "deepspeed": "d",
            "transformers": "h", "zerokit": "z", "date": "today"}  # fmt: skip
    reports = [markdown(collect(cfg, results[:done], {1: 2.0, 10: 9.0}, host), cfg) for done in range(len(results) + 1)]
    assert "| prepared blocks | 9.0 | - | - |" in "".join(reports)  # its 10x run still to come
    assert "| prepared blocks | 9.0 | 9.0 | **1.00** |" in reports[-1]
