"""`--micro-batch auto` (zerokit.train.sizing.micro_batch, zerokit.train.sizing.micro_probe): the candidates, the
halving, the refusals before torch, the activation estimate, and the choice on a CPU rank, which is the estimate alone.

Where a GPU is needed (the halving after an out-of-memory probe) a fake memory function stands in for the GPU's:
`fits` below says which sizes a GPU of that many bytes would hold. Everything else is the real thing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.sources.ds_configs import bundled
from zerokit.train.cli import parse
from zerokit.train.sizing.memory_need import Activations, GiB, Setup, estimate, largest_batch, still_to_come
from zerokit.train.sizing.micro_batch import MAX_MICRO, accumulation_for, candidates, halving, share_of
from zerokit.train.sizing.micro_probe import MicroBatch


def test_candidates_are_powers_of_two_up_to_the_bound_the_data_and_the_ceiling():
    assert candidates(100, 10_000, None) == [64, 32, 16, 8, 4, 2, 1]
    assert candidates(100, 20, None) == [16, 8, 4, 2, 1]  # no more than the rank's share of the blocks
    assert candidates(10**9, 10**9, None)[0] == MAX_MICRO
    assert candidates(0, 100, None) == [1]  # the estimate's floor; on a GPU the probe decides


def test_a_fixed_global_batch_makes_the_candidates_the_divisors_of_its_share():
    assert candidates(100, 10_000, share_of(96, 4, "zero2.json")) == [24, 12, 8, 6, 4, 3, 2, 1]
    assert candidates(10, 10_000, 24) == [8, 6, 4, 3, 2, 1]
    assert accumulation_for(96, 6, 4) == 4  # 6 x 4 x 4 = 96
    with pytest.raises(UserError, match=r"fixes the global batch at 96, which 5 data-parallel ranks cannot share"):
        share_of(96, 5, "zero2.json")


def fits(gpu_bytes: int, per_sample: int, fixed: int = 0):
    """A fake GPU (no GPU here): a probe of `size` samples runs out of memory above gpu_bytes."""
    tried: list[int] = []

    def probe(size: int) -> bool:
        tried.append(size)
        return fixed + size * per_sample <= gpu_bytes

    return probe, tried


def test_the_probe_halves_from_the_largest_candidate_until_one_fits():
    probe, tried = fits(gpu_bytes=20 * GiB, per_sample=GiB)  # 20 samples fit
    choice = halving(candidates(100, 10_000, None), probe)
    assert (choice.micro, choice.too_big, tried) == (16, (64, 32), [64, 32, 16])
    probe, tried = fits(gpu_bytes=20 * GiB, per_sample=GiB)
    choice = halving(candidates(100, 10_000, 96), probe)  # the divisors of 96, each try at most half the last
    assert (choice.micro, tried) == (12, [96, 48, 24, 12])
    assert choice.micro * accumulation_for(96, choice.micro, 1) == 96


def test_nothing_fits_when_one_sample_does_not():
    probe, tried = fits(gpu_bytes=GiB, per_sample=2 * GiB)
    assert halving(candidates(8, 100, None), probe).micro is None
    assert tried == [8, 4, 2, 1]
    assert halving([], probe).micro is None  # CPU ranks: the estimate left no candidate


def test_activations_by_hand():
    gpt2_small = Activations(layers=12, hidden=768, heads=12, ffn=3072, vocab=50257, tokens=1024, precision_bytes=2)
    layer = 1024 * (20 * 768 + 11 * 3072)  # 16-bit bytes
    ends, logits = 2 * 1024 * 768 * 2, 1024 * 50257 * (2 + 12)
    assert gpt2_small.per_sample() == 12 * layer + ends + logits  # 1.33 GB; the H200 run shows about 1.16
    chunked = Activations(12, 768, 12, 3072, 50257, 1024, 2, full_logits=False)
    assert chunked.per_sample() == 12 * layer + ends + 2 * 1024 * 768 * 2  # the vocabulary's logits gone
    fp32 = Activations(12, 768, 12, 3072, 50257, 1024, 4)
    assert fp32.per_sample() == 2 * 12 * layer + 2 * ends + 1024 * 50257 * 16
    eager = Activations(12, 768, 12, 3072, 50257, 1024, 2, scores=True)
    assert eager.per_sample() - gpt2_small.per_sample() == 12 * 7 * 12 * 1024 * 1024
    checkpointed = Activations(12, 768, 12, 3072, 50257, 1024, 2, checkpointed=True)
    assert checkpointed.per_sample() == 12 * 1024 * 768 * 2 + layer + ends + logits
    assert largest_batch(10 * gpt2_small.per_sample() + 5, gpt2_small) == 10
    assert largest_batch(gpt2_small.per_sample() - 1, gpt2_small) == 0


def test_the_states_still_to_come_leave_out_what_the_built_model_already_holds():
    gpu = Setup(parameters=10**9, trainable=10**9, zero_stage=2, precision_bytes=2, on_gpu=True)
    # on the GPU: fp32 gradients 4, master 4, Adam 8 (the 16-bit weights are there, a probe makes 16-bit gradients)
    assert still_to_come(estimate(gpu), on_gpu=True) == 16 * 10**9
    cpu = Setup(parameters=10**9, trainable=10**9, zero_stage=2, precision_bytes=4)
    assert still_to_come(estimate(cpu), on_gpu=False) == 16 * 10**9  # fp32 gradients, master, Adam; not the weights


def refused(argv: list[str]) -> str:
    with pytest.raises(UserError) as error:
        parse(argv, environ={})
    return str(error.value)


def test_the_flag_and_its_variable():
    assert parse(["--micro-batch", "auto"], environ={})[0].micro_batch == "auto"
    assert parse([], environ={"ZEROKIT_MICRO_BATCH": "auto"})[0].micro_batch == "auto"
    assert parse([], environ={})[0].micro_batch is None
    assert "a fixed micro-batch is --per_device_train_batch_size 8" in refused(["--micro-batch", "8"])


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--per_device_train_batch_size", "8"], "chooses --per_device_train_batch_size: give one of them"),
        (["--auto_find_batch_size"], "HF's --auto_find_batch_size both choose"),
        (["--config", "zero3"], "is ZeRO-3, which partitions it: use a ZeRO-1/2 config"),
        (["--pp-size", "2", "--config", "zero1"], "leave out --tp-size/--pp-size"),
    ],
)
def test_what_auto_cannot_choose_for_is_refused_in_one_line(extra: list[str], says: str):
    assert says in refused(["--micro-batch", "auto", *extra])


def test_a_config_that_fixes_the_micro_batch_or_leaves_nothing_to_choose_is_refused(tmp_path: Path):
    config = json.loads(bundled("zero2").read_text())
    fixed_micro = tmp_path / "micro.json"
    fixed_micro.write_text(json.dumps({**config, "train_micro_batch_size_per_gpu": 4}))
    assert 'fixes train_micro_batch_size_per_gpu at 4: set it to "auto" there' in refused(
        ["--micro-batch", "auto", "--config", str(fixed_micro)]
    )
    fixed_global = tmp_path / "global.json"
    fixed_global.write_text(json.dumps({**config, "train_batch_size": 64}))
    assert parse(["--micro-batch", "auto", "--config", str(fixed_global)], environ={})[0].micro_batch == "auto"
    assert "leave out --gradient_accumulation_steps" in refused(
        ["--micro-batch", "auto", "--config", str(fixed_global), "--gradient_accumulation_steps", "2"]
    )
    both = tmp_path / "both.json"
    both.write_text(json.dumps({**config, "train_batch_size": 64, "gradient_accumulation_steps": 2}))
    assert "leaves no micro-batch to choose" in refused(["--micro-batch", "auto", "--config", str(both)])


def test_the_line_and_the_record_say_how_it_was_chosen():
    probed = MicroBatch(16, 1, True, 40, (32,), None, 2)
    assert probed.line().startswith("zerokit: micro-batch 16 per rank (--micro-batch auto: a forward and backward")
    assert "32 did not fit" in probed.line()
    assert probed.as_record() == {
        "chosen": 16, "accumulation": 1, "how": "probe", "estimate_bound": 40, "did_not_fit": [32],
        "global_batch_kept_from": None,
    }  # fmt: skip
    estimated = MicroBatch(8, 4, False, 9, (), "configs/x.json", 2)
    assert "no probe: on CPU ranks running out of memory brings the OOM killer" in estimated.line()
    assert "the global batch of 64 that configs/x.json fixes kept" in estimated.line()


def test_rebatch_fills_hfs_deepspeed_config_anew(tmp_path: Path):
    """The Trainer fills DeepSpeed's "auto" batch sizes from the TrainingArguments once, when they are made: the
    chosen micro-batch must reach the config DeepSpeed starts with, and a fixed train_batch_size must match it."""
    from transformers import TrainingArguments

    from zerokit.train.sizing.micro_probe import rebatch

    config = json.loads(bundled("zero2").read_text())
    fixed = tmp_path / "global.json"
    fixed.write_text(json.dumps({**config, "train_batch_size": 12}))
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, deepspeed=str(fixed))
    assert args.hf_deepspeed_config.mismatches  # 8 per device x 1 does not make 12
    rebatch(args, 4, 3)
    filled = args.hf_deepspeed_config.config
    assert (filled["train_micro_batch_size_per_gpu"], filled["gradient_accumulation_steps"]) == (4, 3)
    assert filled["train_batch_size"] == 12 and not args.hf_deepspeed_config.mismatches
    assert args.deepspeed_plugin.hf_ds_config is args.hf_deepspeed_config
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 3)


def test_the_door_leaves_a_fixed_global_batch_to_the_micro_batch_it_chooses(tmp_path: Path):
    """train refuses a config whose values disagree with the flags before the run writes (HF would, once DeepSpeed
    starts); with --micro-batch auto the batch sizes are chosen later, rebatch checks them again: not refused."""
    from zerokit.train.run import FlagsRefused, training_arguments

    fixed = tmp_path / "global.json"
    fixed.write_text(json.dumps({**json.loads(bundled("zero2").read_text()), "train_batch_size": 12}))
    argv = ["--config", str(fixed), "--output-dir", str(tmp_path / "out")]
    chosen = parse([*argv, "--micro-batch", "auto"], environ={})[0]
    assert training_arguments(chosen, [], None, False, []).hf_deepspeed_config.mismatches  # left to rebatch
    embedded = r"\(ds train_batch_size=12 vs hf train_batch_size \(calculated\)=16\)"  # its 16 a step
    with pytest.raises(FlagsRefused, match=embedded):
        training_arguments(parse(argv, environ={})[0], [], None, False, [])


def test_on_a_cpu_rank_the_estimate_alone_chooses_and_says_so(tmp_path: Path, capsys):
    """The real choice on this machine's CPU (no probe there): a tiny GPT-2, 12 training blocks, the node's memory."""
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

    from zerokit.train.sizing.micro_probe import choose_micro_batch

    options = parse(["--micro-batch", "auto", "--config", "none"], environ={})[0]
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=97, n_layer=2, n_embd=32, n_head=2, n_positions=16))
    blocks = Dataset.from_dict({"input_ids": [[1] * 16] * 12, "labels": [[1] * 16] * 12})
    numbers = Setup(
        parameters=model.num_parameters(), trainable=model.num_parameters(), zero_stage=0, precision_bytes=4
    )
    chosen = choose_micro_batch(options, args, model, blocks, numbers, resume=None, accumulation_given=False)
    assert (chosen.micro, chosen.accumulation, chosen.probed) == (8, 1, False)  # 12 blocks: at most 8, a power of two
    assert chosen.bound > 1000  # a few hundred KiB a sample against GiBs
    assert args.per_device_train_batch_size == 8
    assert "zerokit: micro-batch 8 per rank (--micro-batch auto: the memory estimate" in capsys.readouterr().out


def test_the_models_shape_and_the_runs_switches_make_its_activations(tmp_path: Path):
    from types import SimpleNamespace

    from transformers import GPT2Config, LlamaConfig

    from zerokit.train.sizing.micro_probe import model_activations

    options = parse(["--micro-batch", "auto", "--cross-entropy", "chunked"], environ={})[0]
    args = SimpleNamespace(bf16=False, fp16=False, gradient_checkpointing=True)
    fp32 = Setup(parameters=1, trainable=1, zero_stage=2, precision_bytes=4)
    gpt2 = model_activations(options, GPT2Config(n_layer=3, n_embd=64, n_head=4), 128, args, fp32, on_gpu=False)
    assert (gpt2.layers, gpt2.hidden, gpt2.heads, gpt2.ffn, gpt2.tokens) == (3, 64, 4, 256, 128)  # n_inner: 4 x width
    assert not gpt2.full_logits and gpt2.checkpointed and gpt2.scores  # CPU attention under GPT-2's dropout 0.1
    llama = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=172, num_attention_heads=4)
    on_gpu = model_activations(options, llama, 128, args, fp32, on_gpu=True)
    assert on_gpu.ffn == 172 and not on_gpu.scores  # sdpa on a GPU keeps no scores
    with pytest.raises(UserError, match="cannot read the layers, width and heads of this model's config"):
        model_activations(options, SimpleNamespace(model_type="odd", vocab_size=10), 128, args, fp32, on_gpu=False)


def test_zero2s_reduction_buckets_are_whole_on_a_gpu_and_touched_pages_on_cpu():
    from zerokit.train.sizing.micro_probe import bucket_bytes

    options = parse(["--micro-batch", "auto", "--config", "zero2"], environ={})[0]
    numbers = Setup(parameters=10**6, trainable=10**6, zero_stage=2, precision_bytes=2)
    assert bucket_bytes(options, numbers, 768, on_gpu=True) == 500_000_000 * 2 * 2  # two 16-bit buffers (overlap)
    assert bucket_bytes(options, numbers, 768, on_gpu=False) == 10**6 * 2 * 2
    none = parse(["--micro-batch", "auto", "--config", "none"], environ={})[0]
    assert bucket_bytes(none, numbers, 768, on_gpu=True) == 0
