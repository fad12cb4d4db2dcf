"""The keys a DeepSpeed config may hold, read from the installed DeepSpeed itself: its version's, not a list kept here.

DeepSpeed reads its config two ways. `DeepSpeedConfig._initialize_params` asks for keys by name (`get_scalar_param`,
`key in`, `[key]`), and hands some sections to its pydantic models (`DeepSpeedZeroConfig`, the offload configs,
...), which forbid keys they have no field for. So the keys are found by letting DeepSpeed read: a stand-in dict
(`Reads`) notes each key DeepSpeed asks it for, section by section; a section given a key no model has makes the
model that reads it refuse that key, and the refusal names the model (pydantic's `ValidationError.title`), whose
fields and aliases, recursing into nested models, are that section's keys. A section DeepSpeed copies or iterates
whole (`pipeline`, `data_efficiency.data_sampling`) is a value: any keys.

Importing DeepSpeed costs seconds (it imports torch), so `known_keys()` does it once per process, only when a
config is checked; finding the keys then takes milliseconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import types
import typing
from collections.abc import KeysView, Mapping
from dataclasses import dataclass
from functools import cache

from zerokit.foundations.errors import UserError

# Sections DeepSpeed hands whole to the optimizer's and the scheduler's constructor (DeepSpeedEngine's
# _configure_basic_optimizer and _scheduler_from_config): their keys are the chosen type's arguments.
HANDED_ON = ("optimizer.params", "scheduler.params")
# Keys deepspeed.initialize reads from the config itself, before DeepSpeedConfig (deepspeed/__init__.py: the
# data x sequence parallel mesh).
READ_BY_INITIALIZE = ("data_parallel_size", "sequence_parallel_size")
SENTINEL = "__zerokit_probe__"  # a key no DeepSpeed model has
DEPTH = 6  # deeper than any section DeepSpeed reads


@dataclass(frozen=True)
class Section:
    """A part of a config that is a JSON object: the keys DeepSpeed reads in it, and what checks its values."""

    keys: Mapping[str, Section | None]  # each key: its own section, or None for a value (checked by `model`)
    auto_keys: frozenset[str] = frozenset()  # keys whose DeepSpeed default is "auto": DeepSpeed fills them itself
    model: type | None = None  # the pydantic model DeepSpeed validates this section with
    any_key: bool = False  # handed on whole (HANDED_ON): its keys are another's arguments


class Reads(dict):
    """An empty config section that notes each key DeepSpeed asks it for (with the default it gives), and whether
    DeepSpeed took it whole (iterated or copied it) rather than key by key."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: dict[str, object] = {}
        self.whole = False

    def get(self, key, default=None):
        self.asked.setdefault(key, default)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self.asked.setdefault(key, None)
        return super().__contains__(key)

    def __getitem__(self, key):  # a key DeepSpeed set itself (data_efficiency: {}) is there to read back
        self.asked.setdefault(key, None)
        return super().__getitem__(key)

    def keys(self):  # `key in section.keys()` asks __contains__
        return KeysView(self)

    def __bool__(self) -> bool:  # `if section and KEY in section.keys()`
        return True

    def __iter__(self):
        self.whole = True
        return super().__iter__()

    def items(self):
        self.whole = True
        return super().items()

    def values(self):
        self.whole = True
        return super().values()

    def __copy__(self) -> dict:
        self.whole = True
        return {}

    def __deepcopy__(self, memo) -> dict:
        self.whole = True
        return {}


@cache
def known_keys() -> Section:
    """The whole config's keys, as this DeepSpeed reads them (imports DeepSpeed: seconds, once)."""
    if importlib.util.find_spec("deepspeed") is None:
        raise UserError(
            "checking a DeepSpeed config needs DeepSpeed, which this Python lacks: use the image or `make venv` "
            "(or train without DeepSpeed: --config none)"
        )
    root = section_at(())
    extra = dict.fromkeys(READ_BY_INITIALIZE)
    return Section({**root.keys, **extra}, root.auto_keys) if root else Section(extra)


@cache
def removed_keys() -> dict[str, str]:
    """Top-level keys this DeepSpeed refuses by name (features it removed), each with DeepSpeed's own reason."""
    from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError

    reads = Reads()
    with contextlib.suppress(Exception):  # an empty config fails, after the first step asked for each removed key
        DeepSpeedConfig(reads)
    removed = {}
    for key in set(reads.asked) - set(known_keys().keys):
        try:
            DeepSpeedConfig({key: {}})
        except DeepSpeedConfigError as error:
            removed[key] = str(error)
        except Exception:  # refused later, for what the config lacks: not a removed key
            continue
    return removed


def read_by_deepspeed(config: dict) -> Exception | None:
    """What DeepSpeedConfig raises reading config (None if nothing): its parse, without a world to size it for."""
    from deepspeed.runtime.config import DeepSpeedConfig

    reader = DeepSpeedConfig.__new__(DeepSpeedConfig)
    reader._param_dict = config
    try:
        reader._initialize_params(config)
        reader._do_warning_check()  # reads vocabulary_size
    except Exception as error:
        return error
    return None


def nested(path: tuple[str, ...], leaf: dict) -> dict:
    """A config holding leaf at path ({"a": {"b": leaf}} for ("a", "b"))."""
    for key in reversed(path):
        leaf = {key: leaf}
    return leaf


def section_at(path: tuple[str, ...]) -> Section | None:
    """The section DeepSpeed reads at path, or None where it reads a value (or takes the object whole)."""
    model = model_reading(path) if path else None
    if model:
        return model_section(model)
    reads = Reads()
    read_by_deepspeed(nested(path, reads) if path else reads)
    if reads.whole or not reads.asked or len(path) >= DEPTH:
        return None
    keys = {key: section_at((*path, key)) for key in reads.asked}
    for handed in HANDED_ON:
        parent, _, key = handed.rpartition(".")
        if parent == ".".join(path):
            keys[key] = Section({}, any_key=True)
    return Section(keys, frozenset(key for key, default in reads.asked.items() if default == "auto"))


def model_reading(path: tuple[str, ...]) -> type | None:
    """The pydantic model that reads the section at path: the one that refuses a key no model has, there."""
    import pydantic

    error = read_by_deepspeed(nested(path, {SENTINEL: True}))
    if not isinstance(error, pydantic.ValidationError):
        return None
    for detail in error.errors():
        if detail["type"] == "extra_forbidden" and detail["loc"][-1:] == (SENTINEL,):
            model = deepspeed_models().get(error.title)
            for name in detail["loc"][:-1]:  # the section is a field of the model that refused it
                model = model and field_model(model, name)
            return model
    return None


def field_model(model: type, name: object) -> type | None:
    """The model that model's field of this name (or alias) holds."""
    fields = model.model_fields.items()
    return next((model_in(field.annotation) for key, field in fields if name in (key, field.alias)), None)


@cache
def deepspeed_models() -> dict[str, type]:
    """DeepSpeed's config models by name (a ValidationError names its model), those of one name only."""
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel

    found: dict[str, list[type]] = {}
    pending = [DeepSpeedConfigModel]
    while pending:
        for subclass in pending.pop().__subclasses__():
            found.setdefault(subclass.__name__, []).append(subclass)
            pending.append(subclass)
    return {name: models[0] for name, models in found.items() if len(models) == 1}


def model_section(model: type) -> Section:
    """A model's fields by name and by alias; a field whose type is a model is a section of its own."""
    keys: dict[str, Section | None] = {}
    autos = set()
    for name, field in model.model_fields.items():
        inner = model_in(field.annotation)
        spelled = {name, field.alias, field.validation_alias if isinstance(field.validation_alias, str) else None}
        for key in spelled - {None}:
            keys[key] = model_section(inner) if inner else None
            if field.default == "auto":
                autos.add(key)
    return Section(keys, frozenset(autos), model)


def model_in(annotation: object) -> type | None:
    """The pydantic model a field holds: its type, or the one model of an Optional/Union; None for other values."""
    import pydantic

    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    models = [m for m in members if isinstance(m, type) and issubclass(m, pydantic.BaseModel)]
    return models[0] if len(models) == 1 else None
