"""A user's DeepSpeed config checked before any rank starts, against the installed DeepSpeed's own keys and models.

Unchecked, a typo is named by nothing: `"zero_optimisation"` ends rank 0 in deepspeed.initialize ("Please specify
the ZeRO optimization config"), `"gradient_cliping"` is ignored, `"offload_optimiser"` is a pydantic
ValidationError on every rank after start-up. Here each is one line naming the file and the key's path:

- a key DeepSpeed does not read there (zerokit.sources.ds_config_keys), with the nearest one it does; a key it
  removed, with DeepSpeed's own reason;
- a section that is not a JSON object;
- "auto" where neither Hugging Face's Trainer (zerokit.sources.hf_autos) nor DeepSpeed fills it;
- a value the pydantic model DeepSpeed reads its section with refuses (validated by that model, which leaves
  "auto" values out, as DeepSpeed does: the Trainer fills those with values of their type).

A bundled config (configs/) is not checked at each start: importing DeepSpeed costs seconds, and
tests/unit/test_ds_config_check.py checks those.
"""

from __future__ import annotations

import difflib
import json
import reprlib
from collections.abc import Iterator
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.packages import installed_version
from zerokit.sources.ds_config_keys import Section, known_keys, removed_keys
from zerokit.sources.ds_configs import is_bundled, read_ds_config
from zerokit.sources.hf_autos import hf_filled_keys

AUTO = "auto"
SHOWN = 60  # characters of a key or value said in an error
UNFILLED = 'is "auto", which neither Hugging Face\'s Trainer nor DeepSpeed fills: give it a value, or leave it out'
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "train_batch_size")  # DeepSpeed asserts one is there
NO_BATCH = (
    "sets neither train_micro_batch_size_per_gpu nor train_batch_size, and DeepSpeed needs one: add "
    '"train_micro_batch_size_per_gpu": "auto" (the Trainer fills it from --per_device_train_batch_size)'
)

KeyPath = tuple[str, ...]  # a key's path: ("zero_optimization", "offload_optimizer")
Problem = tuple[KeyPath, str]  # where, and what is wrong there


def check_ds_config(path: Path, pipelined: bool = False) -> None:
    """Refuse, in one line, a config DeepSpeed or the Trainer would refuse or misread once the ranks start.
    pipelined: train's --pp-size, whose engine sets the batch sizes itself (zerokit.train.engines.pipeline_engine)."""
    if is_bundled(path):
        return
    problems = config_problems(read_ds_config(path), known_keys(), hf_filled_keys(), needs_batch=not pipelined)
    if problems:
        others = ", ".join(shown(where) for where, _ in problems[1:])
        more = f" (and {len(problems) - 1} more: {one_line(others)[:120]})" if others else ""
        raise UserError(f"DeepSpeed config {path}: {one_line(problems[0][1])}{more}")


def config_problems(config: dict, keys: Section, filled: frozenset[str], needs_batch: bool = True) -> list[Problem]:
    """What is wrong with config, first the keys (and "auto"), then, when the keys are right, the values, the batch
    DeepSpeed cannot start without where the Trainer does not set it (DeepSpeed's assertion on every rank, after
    start-up) and the optimizer's and scheduler's names."""
    problems = list(key_problems(config, keys, (), filled)) or list(value_problems(config, keys, ()))
    problems += number_problems(config, filled)
    if not problems and needs_batch and not any(key in config for key in BATCH_KEYS):
        problems.append(((), NO_BATCH))
    return problems or list(type_problems(config))


def number_problems(config: dict, filled: frozenset[str]) -> list[Problem]:
    """An optimizer's or scheduler's parameter that the Trainer fills from the flags (lr, betas, eps, warmup, ...)
    given as something other than a number or "auto": HF's check called `"lr": "abc"` a disagreement with the
    flags; it is not a number."""
    problems = []
    for dotted in sorted(filled):
        path = tuple(dotted.split("."))
        if path[0] not in ("optimizer", "scheduler"):
            continue
        value: object = config
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        numbers = value if isinstance(value, list) else [value]
        if value is None or value == AUTO or all(is_number(number) for number in numbers):
            continue
        what = "a list of numbers" if isinstance(value, list) else "a number"
        problems.append((path, f'{shown(path)}: {brief(value)} is not {what}: give {what}, or "auto" (the flags\')'))
    return problems


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def type_problems(config: dict) -> Iterator[Problem]:
    """An optimizer or scheduler type DeepSpeed does not know: its engine finds out when it starts, on every rank
    (a torch.optim name, or one of its own, as engine.py `_configure_basic_optimizer` and `_scheduler_from_config`
    look them up)."""
    import torch
    from deepspeed.runtime import lr_schedules
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    optimizer = config.get("optimizer")
    name = optimizer.get("type") if isinstance(optimizer, dict) else None
    if isinstance(name, str) and name.lower() not in DEEPSPEED_OPTIMIZERS and not hasattr(torch.optim, name):
        known = ", ".join(DEEPSPEED_OPTIMIZERS)
        fix = "fix the name, or leave the optimizer section out (the Trainer's AdamW)"
        yield (
            ("optimizer", "type"),
            f"optimizer.type {brief(name)} is neither DeepSpeed's ({known}) nor torch.optim's: {fix}",
        )
    scheduler = config.get("scheduler")
    name = scheduler.get("type") if isinstance(scheduler, dict) else None
    known_schedules = lr_schedules.VALID_LR_SCHEDULES
    if isinstance(name, str) and name not in known_schedules and not hasattr(torch.optim.lr_scheduler, name):
        known = ", ".join(known_schedules)
        fix = "fix the name, or leave the scheduler section out (the Trainer's)"
        yield (
            ("scheduler", "type"),
            f"scheduler.type {brief(name)} is neither DeepSpeed's ({known}) nor torch.optim.lr_scheduler's: {fix}",
        )


def key_problems(config: dict, section: Section, path: KeyPath, filled: frozenset[str]) -> Iterator[Problem]:
    for key, value in config.items():
        at = (*path, key)
        if key not in section.keys and not section.any_key:
            yield at, unknown_key(at, section)
        elif value == AUTO:
            if ".".join(at) not in filled and key not in section.auto_keys:
                yield at, f"{shown(at)} {UNFILLED}"
        elif (inner := section.keys.get(key)) is not None:
            if isinstance(value, dict):
                yield from key_problems(value, inner, at, filled)
            else:
                yield at, f"{shown(at)} must be a JSON object of {shown(at)} keys, not {json_type(value)}"


def unknown_key(path: KeyPath, section: Section) -> str:
    if len(path) == 1 and path[0] in removed_keys():
        return f"{shown(path)}: {removed_keys()[path[0]]}"
    close = difflib.get_close_matches(path[-1], list(section.keys), n=1)
    fix = f"did you mean {shown((*path[:-1], close[0]))}?" if close else "remove it"
    return f"unknown key {shown(path)}: {fix} (DeepSpeed {installed_version('deepspeed')} has no such key)"


def value_problems(config: dict, section: Section, path: KeyPath) -> Iterator[Problem]:
    """Each section DeepSpeed reads with a pydantic model, validated by it; the keys are known to be right."""
    for key, inner in section.keys.items():
        value = config.get(key)
        if inner is None or not isinstance(value, dict):
            continue
        if inner.model is None:
            yield from value_problems(value, inner, (*path, key))
        elif (problem := refused_value(inner.model, value, (*path, key))) is not None:
            yield (*path, key), problem


def refused_value(model: type, values: dict, path: KeyPath) -> str | None:
    import pydantic

    try:
        model(**values)
    except pydantic.ValidationError as error:
        detail = error.errors()[0]
        where = (*path, *map(str, detail["loc"]))
        if not detail["loc"]:  # the section as a whole (a model's own check)
            return f"{shown(where)}: {detail['msg']}"
        return f"{shown(where)}: {refusal_words(detail)}"
    except (ValueError, AssertionError, TypeError) as error:  # DeepSpeed's checks after pydantic's
        return f"{shown(path)}: {error}"
    return None


# pydantic's error types, in words of the value: what it is not. Those with a bound (ge, gt, ...) and a list of
# values (enum, literal) are worded by refusal_words; any other type keeps pydantic's message.
NOT_A = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a JSON object",
    "list_type": "a list",
}
BOUNDS = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}


def refusal_words(detail: dict) -> str:
    """One of pydantic's errors as zerokit says it: the value, what it is not, what is allowed."""
    got, kind, context = brief(detail["input"]), detail["type"], detail.get("ctx", {})
    if kind in NOT_A:
        return f"{got} is not {NOT_A[kind]}: give {NOT_A[kind]}"
    if kind in ("enum", "literal_error"):
        return f"{got} is not allowed: give one of {allowed(str(context.get('expected', '')))}"
    bounds = [f"{words} {context[bound]}" for bound, words in BOUNDS.items() if bound in context]
    if bounds:
        return f"{got} is out of range: give a value {' and '.join(bounds)}"
    if kind == "missing":
        return "is required here: add it"
    return f"{detail['msg']} (got {got})"


def allowed(expected: str) -> str:
    """pydantic's list of allowed values ("'none', 'cpu' or 'nvme'"; an enum whose members share a value lists
    it twice: "0, 1, 2, 3 or 3"), each once."""
    values = [value.strip() for part in expected.split(" or ") for value in part.split(", ") if value.strip()]
    return ", ".join(dict.fromkeys(values))


def shown(path: KeyPath) -> str:
    """A key's path as the user wrote it, dotted; a key with odd characters quoted, a long one cut."""
    keys = (key if key.isprintable() else json.dumps(key) for key in path)
    return ".".join(key if len(key) <= SHOWN else f"{key[:SHOWN]}..." for key in keys)


def brief(value: object) -> str:
    text = reprlib.repr(value)  # a few levels and items of a value nested deep or long
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}..."


def json_type(value: object) -> str:
    names = {str: "a string", bool: "true or false", int: "a number", float: "a number", list: "a list"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def one_line(text: str) -> str:
    return " ".join(text.split())
