"""`doctor --against RECORD`: this environment against a run's zerokit-run.json, one line per difference.

Compared: the image (stack, tag, build, labels, a SIF's digest; or the Python environment's prefix),
the lock file's sha256, zerokit's version and commit, the versions of Python, torch, CUDA, NCCL,
DeepSpeed and the HF packages, DeepSpeed's prebuilt ops, the recorded environment variables, and the
DeepSpeed config: the config the record names is looked up again now (a path, else a bundled name) and
compared with the one the run was given, value by value. Its "auto" values were filled by HF from the
training flags (the record's argv) and the model; they are not re-derived here, and the report says so.
Not compared, and said: where caches live, what the launcher sets for each run (when unset now), the
launcher itself (doctor runs outside the job), whether the checkout had uncommitted changes.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.image.provenance import LOCATION_NAMES, RUN_SET_NAMES, environment_facts, leaves
from zerokit.sources.ds_configs import bundled

IMAGE_KEYS = ("kind", "stack", "tag", "build_id", "commit", "base_image", "sif_sha256", "python_prefix")
MISSING = "(none)"


@dataclass
class Comparison:
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: int = 0

    def check(self, what: str, recorded: object, current: object) -> None:
        self.compared += 1
        if recorded != current:
            self.differences.append(f"{what}: {show(recorded)} in the record, {show(current)} now")


def show(value: object) -> str:
    if value is None:
        return MISSING
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def read_run_record(path: Path) -> dict:
    if path.is_dir():
        path = path / "zerokit-run.json"
    try:
        record = json.loads(path.read_text())
    except OSError as error:
        raise UserError(f"--against {path}: cannot read it ({error.strerror}): give a run's zerokit-run.json") from None
    except ValueError:
        raise UserError(f"--against {path}: not valid JSON: give a run's zerokit-run.json") from None
    if not isinstance(record, dict) or not str(record.get("format", "")).startswith("zerokit-run/"):
        raise UserError(
            f"--against {path}: not a zerokit run record (no format zerokit-run/N): give a zerokit-run.json"
        )
    return record


def compare(record: dict, environ: Mapping[str, str], now: dict | None = None) -> Comparison:
    """Every difference between record and this environment (now: its facts, gathered if not given)."""
    now = environment_facts(environ) if now is None else now
    result = Comparison()
    recorded_image, current_image = record.get("image") or {}, now["image"]
    for key in IMAGE_KEYS:
        if key in recorded_image or key in current_image:
            result.check(f"image {key}", recorded_image.get(key), current_image.get(key))
    labels_then, labels_now = recorded_image.get("labels") or {}, current_image.get("labels") or {}
    if bool(labels_then) != bool(labels_now):  # an image against a host venv: one line, not one per label
        result.check("image labels", f"{len(labels_then)} labels", f"{len(labels_now)} labels")
    else:
        for label in sorted(labels_then.keys() | labels_now.keys()):
            result.check(f"image label {label}", labels_then.get(label), labels_now.get(label))
    result.check("stack", record.get("stack"), now["stack"])
    result.check("lock sha256", (record.get("lock") or {}).get("sha256"), now["lock"]["sha256"])
    then_zerokit = record.get("zerokit") or {}
    result.check("zerokit version", then_zerokit.get("version"), now["zerokit"]["version"])
    # An image knows its commit by a 12-digit prefix (image.json), a checkout by the whole hash.
    commit_then, commit_now = then_zerokit.get("commit"), now["zerokit"]["commit"]
    if commit_then and commit_now and (commit_then.startswith(commit_now) or commit_now.startswith(commit_then)):
        commit_now = commit_then
    result.check("zerokit commit", commit_then, commit_now)
    if then_zerokit.get("dirty"):
        result.notes.append("the run's checkout had uncommitted changes: the same commit may not be the same code")
    versions_then = record.get("versions") or {}
    for package in sorted(versions_then.keys() | now["versions"].keys()):
        result.check(f"version {package}", versions_then.get(package), now["versions"].get(package))
    result.check("prebuilt ops", sorted(record.get("prebuilt_ops") or []), sorted(now["prebuilt_ops"]))
    compare_environment(result, record.get("environment") or {}, now["environment"])
    compare_deepspeed(result, record)
    launcher = record.get("launcher") or {}
    if launcher:
        result.notes.append(
            "launcher not compared (doctor runs outside the job): the run had "
            f"{launcher.get('scheduler') or 'no launcher'}, world size {launcher.get('world_size')}, "
            f"hosts {show(launcher.get('hosts'))}, "
            f"interface {launcher.get('interface') or MISSING}"
        )
    return result


def compare_environment(result: Comparison, then: Mapping[str, str], now: Mapping[str, str]) -> None:
    skipped_run_set = []
    for name in sorted(then.keys() | now.keys()):
        if name in LOCATION_NAMES:
            continue
        if name in RUN_SET_NAMES and name not in now:
            skipped_run_set.append(f"{name}={then[name]}")
            continue
        result.check(f"environment {name}", then.get(name), now.get(name))
    if skipped_run_set:
        shown = ", ".join(name.split("=")[0] for name in skipped_run_set)
        result.notes.append(f"set for each run (launcher, train, its libraries), unset here, not compared: {shown}")
    result.notes.append(f"cache locations not compared: {', '.join(LOCATION_NAMES)}")


def current_config_file(section: dict, cwd: str | None) -> Path | None:
    """The config the record names, looked up now as train looks it up: a path, else a bundled name."""
    name = section.get("name") or ""
    candidates = []
    if name:
        given = Path(name)
        candidates.append(given if given.is_absolute() else Path(cwd or ".") / given)
        candidates.append(bundled(name))
    if section.get("file"):
        candidates.append(Path(section["file"]))
    return next((path for path in candidates if path.is_file()), None)


def compare_deepspeed(result: Comparison, record: dict) -> None:
    section = record.get("deepspeed")
    if not section:
        result.notes.append("the run used no DeepSpeed config: nothing to compare")
        return
    given_then = section.get("given")
    path = current_config_file(section, record.get("cwd"))
    if path is None or given_then is None:
        result.differences.append(
            f"deepspeed config: {section.get('name') or section.get('file')} is not found now; "
            "only the resolved config in the record remains (compare it by hand)"
        )
        return
    try:
        file_now = json.loads(path.read_text())
    except ValueError:
        result.differences.append(f"deepspeed config: {path} is not valid JSON now")
        return
    now_leaves = {**leaves(file_now), **(section.get("zerokit_changes") or {})}
    then_leaves = leaves(given_then)
    autos = 0
    for key in sorted(then_leaves.keys() | now_leaves.keys()):
        then, current = then_leaves.get(key), now_leaves.get(key)
        autos += then == "auto" and current == "auto"
        result.check(f"deepspeed config {key} ({path})", then, current)
    resolved = len(leaves(section.get("resolved") or {}))
    result.notes.append(
        f"deepspeed config: {path} (named {section.get('name')!r}) compared value by value with the one the run was "
        f'given; {autos} "auto" values, which HF filled from the training flags and the model '
        f"({resolved} values resolved, in the record), are not re-derived"
    )


def report(record_path: Path, result: Comparison) -> str:
    lines = [f"differs: {line}" for line in result.differences] + [f"note: {line}" for line in result.notes]
    if result.differences:
        count = len(result.differences)
        lines.append(f"doctor --against {record_path}: {count} difference{'s' if count > 1 else ''}")
    else:
        lines.append(f"doctor --against {record_path}: no differences ({result.compared} facts compared)")
    return "\n".join(lines)


def run_against(record_path: Path, environ: Mapping[str, str], as_json: bool = False) -> int:
    """Print the comparison; 1 when anything differs."""
    started_with = dict(environ)  # before torch & co. set variables of their own in os.environ
    record = read_run_record(record_path)
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout as it is imported
        result = compare(record, started_with)
    if as_json:
        print(json.dumps({"differences": result.differences, "notes": result.notes}, indent=2))
    else:
        print(report(record_path, result))
    return 1 if result.differences else 0
