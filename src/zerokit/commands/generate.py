"""`generate`: sample text from a trained model folder, or a LoRA adapter folder on its base; write jsonl.

Prompts come from `--prompt` (repeatable), `--prompts-file` (one per line) or `--jsonl` rows
(the `prompt` field, or `--template "Question: {question}\\nAnswer:"` filled from each row).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.training.checkpoints import complete_checkpoints, damage
from zerokit.training.model_source import is_path, require_model_folder, require_tokenizer_folder
from zerokit.training.outputs import built_beside, check_writable

ADAPTER_CONFIG = "adapter_config.json"
# A folder with one of these holds a model's weights (or an adapter's) that from_pretrained reads.
WEIGHTS = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
    "adapter_model.safetensors", "adapter_model.bin",
)  # fmt: skip


def has_weights(folder: Path) -> bool:
    return any((folder / name).is_file() for name in WEIGHTS)


def model_to_load(folder: Path) -> Path:
    """What training left, as generate reads it: a folder with weights as it is; a run folder without final
    weights (stopped before its final save), its newest whole checkpoint; a checkpoint with only ZeRO shards,
    itself (load_model consolidates them). Anything else is refused in one line."""
    if has_weights(folder):
        return folder
    newest = next((c for c in complete_checkpoints(folder) if not damage(c)), None)
    if newest is not None:
        print(
            f"generate: {folder} has no final weights (the run stopped before its final save): "
            f"using its newest whole checkpoint, {newest.name}",
            file=sys.stderr,
        )
        return model_to_load(newest)
    if (folder / "latest").is_file() or not (folder / "config.json").is_file():
        return folder  # ZeRO shards; or no model at all, which require_model_folder names
    raise UserError(
        f"{folder} has a config but no weights ({WEIGHTS[0]}) and no checkpoint-N: give a folder whose run "
        "finished, or one of its checkpoint-N folders"
    )


def consolidated_model(folder: Path):
    """The model of a checkpoint holding only DeepSpeed ZeRO shards, in fp32, consolidated in memory as
    zero_to_fp32 does (nothing is written)."""
    import contextlib

    from transformers import AutoConfig, AutoModelForCausalLM

    print(f"generate: {folder} holds ZeRO shards only: consolidating them in memory", file=sys.stderr)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's log and progress lines: stdout is the jsonl
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(folder))
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    tied = set(getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied:
        raise UserError(
            f"{folder}: its ZeRO shards do not fit its config.json (missing {sorted(set(missing) - tied)[:3]}, "
            f"unexpected {unexpected[:3]}): give the checkpoint-N folder train wrote, unchanged"
        )
    return model


@dataclass(frozen=True)
class GenerateOptions:
    """`generate`'s flags, each defined once here (zerokit.foundations.flags)."""

    model: str = flag("model", help="a folder written by train (a model, or a LoRA adapter), or a Hub id")
    base: str | None = flag(
        "--base", help="base model of a LoRA adapter folder (default: the one recorded in adapter_config.json)"
    )
    prompt: list[str] = flag("--prompt", action="append", default=[], help="a prompt; repeat for several")
    prompts_file: Path | None = flag("--prompts-file", type=Path, help="one prompt per line")
    jsonl: Path | None = flag(
        "--jsonl", type=Path, help="prompts from jsonl rows: the `prompt` field, or --template filled from each row"
    )
    template: str | None = flag("--template", help='with --jsonl: e.g. "Question: {question}\\nAnswer:"')
    max_new_tokens: int = flag("--max-new-tokens", type=int, default=24, help=None)
    temperature: float = flag("--temperature", type=float, default=0.0, help="0 means greedy")
    top_p: float = flag("--top-p", type=float, default=1.0, help=None)
    seed: int = flag("--seed", type=int, default=0, help=None)
    batch_size: int = flag("--batch-size", type=int, default=8, help="prompts per generate call")
    output: Path | None = flag("--output", type=Path, help="write jsonl here (default: print to stdout)")
    overwrite: bool = flag("--overwrite", default=False, action="store_true", help="replace an existing --output file")


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(GenerateOptions, environ, prog="generate", description=__doc__)


def load_model(model_dir: str, base: str | None = None):
    """The model of a trained folder, or base + the LoRA adapter in it."""
    from transformers import AutoModelForCausalLM

    adapter_config = Path(model_dir) / ADAPTER_CONFIG
    if not adapter_config.is_file():
        if base:
            raise UserError(f"--base is for LoRA adapter folders; {model_dir} has no {ADAPTER_CONFIG}")
        if is_path(model_dir) and not has_weights(Path(model_dir)) and (Path(model_dir) / "latest").is_file():
            return consolidated_model(Path(model_dir))
        return AutoModelForCausalLM.from_pretrained(model_dir)
    from peft import PeftModel

    base = base or json.loads(adapter_config.read_text()).get("base_model_name_or_path")
    if not base:
        raise UserError(f"{model_dir} is a LoRA adapter that names no base model: pass --base MODEL")
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), model_dir)


def generate(
    model_dir: str,
    prompts: list[str],
    max_new_tokens: int = 24,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    base: str | None = None,
) -> list[str]:
    """Completions (prompt included) for each prompt, in batches, on the GPU when there is one."""
    import torch
    from transformers import AutoTokenizer, set_seed

    set_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = load_model(model_dir, base).to(device).eval()
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {}
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start : start + batch_size], return_tensors="pt", padding=True).to(device)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                **({"do_sample": False} | sampling),
            )
        texts += tokenizer.batch_decode(out, skip_special_tokens=True)
    return texts


def read_prompts(args: GenerateOptions) -> list[str]:
    from zerokit.prepare.pack import decode_escapes

    prompts = list(args.prompt)
    for path in filter(None, (args.prompts_file, args.jsonl)):
        if not path.is_file():
            raise UserError(f"prompts file not found: {path}")
    if args.prompts_file:
        prompts += [line for line in args.prompts_file.read_text().splitlines() if line.strip()]
    if args.template and not args.jsonl:
        raise UserError("--template fills prompts from --jsonl rows: pass --jsonl FILE")
    if args.jsonl:
        template = decode_escapes(args.template) if args.template else "{prompt}"
        for number, line in enumerate(args.jsonl.read_text().splitlines(), 1):
            if line.strip():
                prompts.append(fill(template, json.loads(line), f"{args.jsonl}:{number}"))
    if not prompts:
        raise UserError("no prompts: pass --prompt TEXT, --prompts-file FILE or --jsonl FILE")
    return prompts


def fill(template: str, row: dict, where: str) -> str:
    try:
        return template.format_map(row)
    except KeyError as error:
        raise UserError(f"{where}: no field {error} for the template; the row has {', '.join(row)}") from None


def main(argv: list[str]) -> int:
    args = from_namespace(GenerateOptions, build_parser().parse_args(argv))
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    prompts = read_prompts(args)
    model = args.model
    if is_path(model):
        model = str(model_to_load(Path(model).expanduser()))
        require_model_folder("model", model)
        require_tokenizer_folder("model", model)
    if args.output and args.output.exists() and not args.overwrite:
        raise UserError(f"output {args.output} exists: pick another --output, or pass --overwrite")
    if args.output:
        check_writable(args.output.parent, "--output")
    with built_beside(args.output, "generate", "--output") if args.output else nullcontext() as partial:
        texts = generate(
            model,
            prompts,
            args.max_new_tokens,
            args.temperature,
            args.top_p,
            args.seed,
            args.batch_size,
            args.base,
        )
        lines = [
            json.dumps({"prompt": p, "text": t, "completion": t[len(p) :] if t.startswith(p) else t})
            for p, t in zip(prompts, texts, strict=True)
        ]
        if partial is not None:
            partial.write_text("\n".join(lines) + "\n")
        else:
            sys.stdout.write("\n".join(lines) + "\n")
    return 0
