"""`generate`: sample text from a trained model folder (prompts from flags or a file), write jsonl."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zerokit.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="generate", description=__doc__)
    parser.add_argument("model", help="a folder written by train (or a Hub id)")
    parser.add_argument("--prompt", action="append", default=[], help="a prompt; repeat for several")
    parser.add_argument("--prompts-file", type=Path, help="one prompt per line")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 means greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="write jsonl here (default: print to stdout)")
    return parser


def generate(
    model_dir: str,
    prompts: list[str],
    max_new_tokens: int = 24,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> list[str]:
    """Completions (prompt included) for each prompt, one batch, on the GPU when there is one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    set_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device).eval()
    batch = tokenizer(prompts, return_tensors="pt", padding=True).to(device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {}
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            **({"do_sample": False} | sampling),
        )
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    prompts = list(args.prompt)
    if args.prompts_file:
        if not args.prompts_file.is_file():
            raise UserError(f"prompts file not found: {args.prompts_file}")
        prompts += [line for line in args.prompts_file.read_text().splitlines() if line.strip()]
    if not prompts:
        raise UserError("no prompts: pass --prompt TEXT or --prompts-file FILE")
    if not Path(args.model).exists() and Path(args.model).is_absolute():
        raise UserError(f"model folder not found: {args.model}")
    texts = generate(args.model, prompts, args.max_new_tokens, args.temperature, args.top_p, args.seed)
    lines = [json.dumps({"prompt": p, "text": t}) for p, t in zip(prompts, texts, strict=True)]
    if args.output:
        args.output.write_text("\n".join(lines) + "\n")
    else:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
