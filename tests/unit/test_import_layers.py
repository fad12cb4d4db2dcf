"""The package's layers, read from its folders: no module imports one above it, and no two parts import each other.

A newcomer reads zerokit bottom up: foundations, then facts (what an image holds, where a rank stands in a
cluster, the files a training run reads and writes), then the services built on them (doctor's checks, the
health check, prepare, a run's Trainer, preemption and record), then the two engines (launch, the train
library), then the commands. Each top-level package of src/zerokit/ is in one layer; the command line of
train (train.cli) is the one module that sits above its package. Every module lives in a package: the top
level holds only packages, `__init__` and `__main__`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS: list[set[str]] = [
    {"zerokit", "zerokit.foundations"},
    {"zerokit.image", "zerokit.cluster", "zerokit.sources", "zerokit.outputs"},
    {"zerokit.doctor", "zerokit.healthcheck", "zerokit.prepare"},
    {"zerokit.launch", "zerokit.train"},
    {"zerokit.train.cli", "zerokit.bench", "zerokit.generate", "zerokit.commands", "zerokit.__main__"},
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}

# train's rooms from the top down (docs/architecture.md draws them): a module imports only its own room or one below.
TRAIN_ROOMS = [
    "cli",
    "run",
    "engines",
    "training_run",
    "callbacks",
    "checkpoints",
    "sizing",
    "data",
    "model",
    "options",
    "parallel",
    "ds_settings",
    "hf_flags",
    "secret_free",
]
# launch's, the same way: the command, the loop and its restarts above the plan, the watchers below it, the rank side
# (imported by train, generate and users' scripts) at the ground.
LAUNCH_ROOMS = [
    "cli",
    "execute",
    "restarts",
    "preflight",
    "job_ops",
    "plan",
    "config",
    "program",
    "head",
    "hostfile",
    "nccl_plugin",
    "watch",
    "job",
    "command",
    "remote_shell",
    "rank",
]
ROOMS = {"zerokit.train": TRAIN_ROOMS, "zerokit.launch": LAUNCH_ROOMS}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def part_of(module: str) -> str:
    """The longest layered name that module is, or lies in."""
    candidates = [p for p in LEVEL if module == p or (p != "zerokit" and module.startswith(p + "."))]
    assert candidates, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return max(candidates, key=len)


def imported_name(module: str, name: str) -> str:
    """What `from module import name` imports: a subpackage of zerokit, or a name in module."""
    return f"zerokit.{name}" if module == "zerokit" and (SRC / "zerokit" / name).is_dir() else module


def imports() -> list[tuple[str, str]]:
    """(importer, imported) for every zerokit import in the package, at any depth of the code."""
    found = []
    for path in sorted((SRC / "zerokit").rglob("*.py")):
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zerokit"):
                names = [imported_name(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("zerokit")]
            else:
                continue
            found += [(importer, name) for name in names]
    return found


def test_every_module_is_in_a_layer():
    for path in (SRC / "zerokit").rglob("*.py"):
        part_of(module_name(path))


def test_the_top_level_holds_only_packages():
    loose = sorted(p.name for p in (SRC / "zerokit").glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert loose == [], "put each module in the package of its layer"
    layered = {p.split(".")[1] for p in LEVEL if p.count(".") >= 1} - {"__main__"}
    packages = {p.name for p in (SRC / "zerokit").iterdir() if (p / "__init__.py").is_file()}
    assert packages == layered, "every top-level package has its layer in LAYERS"


def test_no_module_imports_one_above_it():
    upward = [
        f"{a} (layer {LEVEL[part_of(a)]}) imports {b} (layer {LEVEL[part_of(b)]})"
        for a, b in imports()
        if LEVEL[part_of(b)] > LEVEL[part_of(a)]
    ]
    assert upward == []


def test_no_two_parts_import_each_other():
    edges: dict[str, set[str]] = defaultdict(set)
    for a, b in imports():
        if part_of(a) != part_of(b) and not part_of(b).startswith(part_of(a) + "."):
            edges[part_of(a)].add(part_of(b))
    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, ()) and a < b)
    assert cycles == []


def room(package: str, module: str) -> str | None:
    """The room of package that module is, or lies in (None: outside package, or the package's face)."""
    parts, top = module.split("."), package.split(".")
    return parts[len(top)] if parts[: len(top)] == top and len(parts) > len(top) else None


@pytest.mark.parametrize("package", ROOMS)
def test_every_room_is_drawn(package: str):
    folder = SRC.joinpath(*package.split("."))
    rooms = {p.stem for p in folder.iterdir() if p.suffix == ".py" or p.is_dir()}
    assert rooms - {"__init__", "__pycache__"} == set(ROOMS[package])


@pytest.mark.parametrize("package", ROOMS)
def test_no_room_imports_one_above_it(package: str):
    order = ROOMS[package]
    upward = [
        f"{a} imports {b}"
        for a, b in imports()
        if (mine := room(package, a)) and (other := room(package, b)) and order.index(other) < order.index(mine)
    ]
    assert upward == []
