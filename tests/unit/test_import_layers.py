"""The package's layers: no module imports one above it, and no two parts import each other.

A newcomer reads zerokit bottom up: foundations, then facts and file logic (stacks, runtimes,
schedulers, checkpoints, data), then the services built on them (doctor's checks, the Trainer,
prepare), then the two engines (launch, the train library), then the commands. Each part is
named by its module or package; the longest name that matches a module decides its layer.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS: list[set[str]] = [
    {"zerokit", "zerokit.errors", "zerokit.paths", "zerokit.corpus", "zerokit.flags", "zerokit.startup_marks"},
    {
        "zerokit.stack", "zerokit.site_torch", "zerokit.runtimes", "zerokit.outputs", "zerokit.checkpoints",
        "zerokit.model_source", "zerokit.hf_flags", "zerokit.data", "zerokit.embedded", "zerokit.lora", "zerokit.nic",
        "zerokit.step_clock", "zerokit.hub_cache", "zerokit.cluster", "zerokit.ops_gate", "zerokit.container",
        "zerokit.sbom", "zerokit.image_info", "zerokit.provenance", "zerokit.ds_configs",
    },
    {
        "zerokit.doctor", "zerokit.offline", "zerokit.trainer", "zerokit.preemption", "zerokit.prepare",
        "zerokit.healthcheck", "zerokit.run_record",
    },
    {"zerokit.launch", "zerokit.train"},
    {
        "zerokit.train.cli", "zerokit.bench", "zerokit.demo", "zerokit.smoke", "zerokit.generate",
        "zerokit.universal", "zerokit.__main__",
    },
]  # fmt: skip
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def part_of(module: str) -> str:
    """The longest layered name that module is, or lies in."""
    candidates = [p for p in LEVEL if module == p or module.startswith(p + ".")]
    assert candidates, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return max(candidates, key=len)


def imports() -> list[tuple[str, str]]:
    """(importer, imported) for every zerokit import in the package, at any depth of the code."""
    found = []
    for path in sorted((SRC / "zerokit").rglob("*.py")):
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zerokit"):
                names = [f"{node.module}.{a.name}" if node.module == "zerokit" else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("zerokit")]
            else:
                continue
            found += [(importer, name) for name in names]
    return found


def test_every_module_is_in_a_layer():
    for path in (SRC / "zerokit").rglob("*.py"):
        part_of(module_name(path))


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
