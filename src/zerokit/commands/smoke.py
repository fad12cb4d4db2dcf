"""`smoke`: the single-GPU smoke test of an image, run inside it (`make smoke`, which passes the GPU in).

One code path for both devices, the device being data (DEVICES):
  1. doctor's checks, strict (and requiring a GPU on gpu), then `launch --check-only`: the health check
     on the training's ranks (NCCL on the GPU, its all-reduce figures as nccl-tests reports them);
  2. a 30-step ZeRO-3 `train` of the embedded default: AdamW runs on DeepSpeed's prebuilt fused_adam
     (bf16 where the GPU supports it: train turns it on);
  3. the same with ZeRO-3 and CPU offload: AdamW runs on cpu_adam;
  4. `generate` from the ZeRO-3 model.
Facts are gathered first, then judged by evaluate(), a pure function of them, so every assertion is
tested with made-up facts. Writes smoke-report.json and smoke-report.md into --output; exits 0 only if
every assertion holds. `--device cpu` runs the same steps on two CPU ranks, so CI keeps it from rotting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.image import built_ops
from zerokit.image.stack import DEFAULT_STACK, Stack, environment_stack, load_stack
from zerokit.outputs.ownership import check_writable

if TYPE_CHECKING:
    from zerokit.doctor.gpu import GpuInfo


@dataclass(frozen=True)
class Device:
    ranks: int  # training ranks: one GPU; on CPU two, so ZeRO-3 really partitions
    require_gpu: bool  # doctor --require-gpu, and the GPU-only assertions apply
    env: dict[str, str]  # for every training and generate process


DEVICES: dict[str, Device] = {
    "gpu": Device(ranks=1, require_gpu=True, env={}),
    "cpu": Device(ranks=2, require_gpu=False, env={"CUDA_VISIBLE_DEVICES": ""}),
}


@dataclass(frozen=True)
class Run:
    name: str  # also the bundled DeepSpeed config and the output folder
    op: str  # the DeepSpeed op the config's AdamW runs on (for the report; DeepSpeed picks it)


RUNS = (Run("zero3", "fused_adam"), Run("zero3-offload", "cpu_adam"))
STEPS = 30
TRAIN_FLAGS = ("--max_steps", str(STEPS), "--logging_steps", "5", "--warmup_steps", "5")
LOSS_RATIO = 0.9  # the last logged loss must be below this fraction of the first
PROMPT = "three plus four is"


@dataclass(frozen=True)
class Assertion:
    name: str
    status: str  # "pass", "fail", or "skip" (a GPU-only assertion on --device cpu)
    detail: str


# ---- judging: pure functions of the facts (the JSON the report holds) ---------------------------


def evaluate(facts: Mapping) -> list[Assertion]:
    device = DEVICES[facts["device"]]
    results = [doctor_assertion(facts["doctor"]), health_check_assertion(facts["health_check"], device)]
    for run in RUNS:
        results += [
            train_assertion(run.name, facts["runs"][run.name]),
            loss_assertion(run.name, facts["runs"][run.name]),
        ]
    results += [jit_assertion(facts["torch_extensions"]), generate_assertion(facts["generate"])]
    gpu_only = [arch_assertion(facts["gpu"]), memory_assertion(facts["runs"])]
    if device.require_gpu:
        return results + gpu_only
    return results + [Assertion(a.name, "skip", f"--device {facts['device']}") for a in gpu_only]


def passed(assertions: list[Assertion]) -> bool:
    return bool(assertions) and all(a.status != "fail" for a in assertions)


def check(name: str, ok: bool, detail: str) -> Assertion:
    return Assertion(name, "pass" if ok else "fail", detail)


def doctor_assertion(rows: list[Mapping]) -> Assertion:
    failed = [f"{r['name']}: {r['detail']}" for r in rows if r["status"] == "fail"]
    return check("doctor --strict", bool(rows) and not failed, "; ".join(failed) or f"{len(rows)} checks, none failed")


def health_check_assertion(result: Mapping, device: Device) -> Assertion:
    """`launch --check-only` passed, on NCCL where there is a GPU (gloo on CPU ranks)."""
    report = result.get("report") or {}
    backend = "nccl" if device.require_gpu else "gloo"
    sweep = [row for row in report.get("collectives", []) if row["op"] == "all_reduce"]
    best = max(sweep, key=lambda row: row["algbw_gbps"], default=None)
    ok = result["returncode"] == 0 and report.get("verdict") == "pass" and report.get("backend") == backend
    detail = f"exit {result['returncode']}, {report.get('backend', 'no report')}"
    if best:
        detail += (
            f", all_reduce algbw {best['algbw_gbps']:.2f} GB/s busbw {best['busbw_gbps']:.2f} GB/s at {best['size']} B"
        )
    return check("launch --check-only", ok and best is not None, detail)


def train_assertion(name: str, run: Mapping) -> Assertion:
    return check(f"train {name}", run["returncode"] == 0, f"exit {run['returncode']}, {run['seconds']:.0f} s")


def loss_assertion(name: str, run: Mapping) -> Assertion:
    losses = run["losses"]
    falls = len(losses) >= 2 and losses[-1] < LOSS_RATIO * losses[0]
    return check(f"loss falls: {name}", falls, " -> ".join(f"{x:.3f}" for x in losses) or "no loss logged")


def jit_assertion(files: list[str]) -> Assertion:
    return check("no op JIT-compiled", not files, f"TORCH_EXTENSIONS_DIR has {', '.join(files)}" if files else "empty")


def generate_assertion(generated: Mapping) -> Assertion:
    text = generated.get("text", "")
    ok = text.startswith(generated["prompt"]) and len(text) > len(generated["prompt"])
    return check("generate", ok, repr(text) if text else generated.get("error", "no text"))


def arch_assertion(gpu: Mapping) -> Assertion:
    """Every visible GPU has native code in torch's arch list and in the prebuilt ops' (`stack_arch_list`: as
    recorded at build where the environment has the record, else the stack's)."""
    from zerokit.doctor.gpu import cc_text, covers, parse_arch_list, torch_arch

    name = "GPU in the arch lists"
    capabilities = sorted({tuple(capability) for _, capability in gpu["devices"]})
    if not capabilities:
        return check(name, False, "no GPU visible")
    torch_verdict = torch_arch(tuple(gpu["torch_arch_list"]), capabilities)
    native, _ = parse_arch_list(gpu["stack_arch_list"])
    missing = [cc_text(c) for c in capabilities if not any(covers(built, c) for built in native)]
    ok = torch_verdict.status == "ok" and not missing
    detail = f"{', '.join(map(cc_text, capabilities))} in torch {' '.join(gpu['torch_arch_list'])}"
    ops = "ops recorded at build" if gpu.get("ops_arch_recorded") else "stack"
    detail += f" and {ops} {gpu['stack_arch_list']!r}"
    if torch_verdict.status != "ok":
        detail += f"; torch: {torch_verdict.detail}"
    if missing:
        detail += f"; the prebuilt ops have no code for {', '.join(missing)}"
    return check(name, ok, detail)


def memory_assertion(runs: Mapping) -> Assertion:
    peaks = {name: run["peak_gpu_memory_bytes"] for name, run in runs.items()}
    ok = all(isinstance(p, int) and p > 0 for p in peaks.values())
    return check("peak GPU memory reported", ok, ", ".join(f"{n}: {mib(p)}" for n, p in peaks.items()))


def mib(value: int | None) -> str:
    return "none" if value is None else f"{value / 2**20:.0f} MiB"


# ---- gathering: doctor in this process, train and generate as subprocesses ----------------------


def gather(device: str, stack: Stack, output: Path, environ: Mapping[str, str]) -> dict:
    from zerokit.doctor.checks import run_checks
    from zerokit.doctor.context import Context

    settings = DEVICES[device]
    # A fresh JIT cache of this run: it must still be empty at the end.
    extensions = output / "torch_extensions"
    shutil.rmtree(extensions, ignore_errors=True)
    extensions.mkdir(parents=True)
    env = {**environ, **settings.env, "TORCH_EXTENSIONS_DIR": str(extensions)}

    say(f"doctor (stack {stack.name}{', GPU required' if settings.require_gpu else ''})")
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout
        rows = run_checks(Context(stack=stack, environ=env, require_gpu=settings.require_gpu))
    checked = health_check(settings.ranks, output, env)
    runs = {run.name: train(run, settings.ranks, output, env) for run in RUNS}
    generated = generate(output / RUNS[0].name, output, env)
    compiled = sorted(str(p.relative_to(extensions)) for p in extensions.rglob("*"))  # after every step
    return {
        "device": device,
        "stack": stack.name,
        "steps": STEPS,
        "doctor": [r.as_dict() for r in rows],
        "health_check": checked,
        "gpu": gpu_facts(stack),
        "runs": runs,
        "generate": generated,
        "torch_extensions_dir": str(extensions),
        "torch_extensions": compiled,
    }


def health_check(ranks: int, output: Path, env: Mapping[str, str]) -> dict:
    """`launch --check-only --json` on the training's ranks; its report read from stdout."""
    argv = [sys.executable, "-m", "zerokit", "launch", "--nproc-per-node", str(ranks), "--no-preflight",
            "--check-only", "--check-timeout", "60", "--json"]  # fmt: skip
    with (output / "health-check.log").open("w") as log:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    (output / "health-check.json").write_text(done.stdout)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    say(f"launch --check-only ({ranks} rank(s)): exit {done.returncode}, verdict {(report or {}).get('verdict')}")
    return {"returncode": done.returncode, "report": report}


def train(run: Run, ranks: int, output: Path, env: Mapping[str, str]) -> dict:
    folder = output / run.name
    argv = ["train", "--config", run.name, "--nproc-per-node", str(ranks), "--output-dir", str(folder)]
    code, seconds = subprocess_logged([*argv, "--overwrite", *TRAIN_FLAGS], output / f"{run.name}.log", env)
    losses = [e["loss"] for e in read_json(folder / "trainer_state.json", {}).get("log_history", []) if "loss" in e]
    peak = read_json(folder / "train_results.json", {}).get("peak_gpu_memory_bytes")
    say(
        f"train {run.name} ({run.op}, {ranks} rank(s)): exit {code}, {seconds:.0f} s, losses {losses}, peak {mib(peak)}"
    )
    return {
        "op": run.op,
        "ranks": ranks,
        "returncode": code,
        "seconds": seconds,
        "losses": losses,
        "peak_gpu_memory_bytes": peak,
    }


def generate(model: Path, output: Path, env: Mapping[str, str]) -> dict:
    samples = output / "generate.jsonl"
    samples.unlink(missing_ok=True)
    argv = ["generate", str(model), "--prompt", PROMPT, "--output", str(samples)]
    code, _ = subprocess_logged(argv, output / "generate.log", env)
    if code != 0 or not samples.is_file():
        return {"prompt": PROMPT, "error": f"generate exited {code}"}
    text = json.loads(samples.read_text().splitlines()[0])["text"]
    say(f"generate: {text!r}")
    return {"prompt": PROMPT, "text": text}


def gpu_facts(stack: Stack, info: GpuInfo | None = None) -> dict:
    """The GPUs torch sees (info: probe_gpu's, gathered here unless given) and the archs torch and the ops have
    code for."""
    from zerokit.doctor.gpu import probe_gpu

    info = info or probe_gpu()
    bf16 = False
    if info.devices:
        import torch

        bf16 = torch.cuda.is_bf16_supported()
    return {
        "devices": [[name, list(capability)] for name, capability in info.devices],
        "torch_cuda": info.torch_cuda,
        "torch_arch_list": list(info.arch_list),
        "stack_arch_list": built_ops.arch_list(stack, info.built),
        "ops_arch_recorded": info.built is not None,
        "bf16": bf16,
    }


def subprocess_logged(argv: list[str], log: Path, env: Mapping[str, str]) -> tuple[int, float]:
    """`zerokit ARGV` with its output in log; on a failure the log's tail is shown. (exit code, seconds)"""
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(
            [sys.executable, "-m", "zerokit", *argv], stdout=out, stderr=subprocess.STDOUT, env=env
        ).returncode
    if code != 0:
        print(f"smoke: {shlex.join(argv)} exited {code}; the end of {log}:", file=sys.stderr)
        print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:]), file=sys.stderr)
    return code, time.monotonic() - started


def read_json(path: Path, default: dict) -> dict:
    return json.loads(path.read_text()) if path.is_file() else default


def say(line: str) -> None:
    print(f"smoke: {line}", file=sys.stderr, flush=True)


# ---- the report and the command ---------------------------------------------------------------


def markdown(facts: Mapping, assertions: list[Assertion]) -> str:
    verdict = "PASSED" if passed(assertions) else "FAILED"
    gpu = facts["gpu"]
    devices = ", ".join(f"{name} (cc {c[0]}.{c[1]})" for name, c in gpu["devices"]) or "none visible"
    devices += f", bf16 {'on' if gpu['bf16'] else 'off'}" if gpu["devices"] else ""
    lines = [
        f"# zerokit smoke: {verdict}",
        "",
        f"device `{facts['device']}`, stack `{facts['stack']}`, {facts['steps']} steps per run; GPU: {devices}",
        "",
        "| assertion | result | detail |",
        "| --- | --- | --- |",
        *(f"| {a.name} | {a.status} | {a.detail.replace('|', '/')} |" for a in assertions),
    ]
    return "\n".join(lines) + "\n"


def smoke(device: str, output: Path, stack: str = DEFAULT_STACK, environ: Mapping[str, str] | None = None) -> dict:
    """Run the smoke test; write smoke-report.json and .md into output; return the report."""
    loaded = load_stack(stack)  # an unknown stack is refused before the output folder is made
    output.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    facts = gather(device, loaded, output, os.environ if environ is None else environ)
    facts["seconds"] = round(time.monotonic() - started, 1)
    assertions = evaluate(facts)
    report = {"passed": passed(assertions), "assertions": [asdict(a) for a in assertions], "facts": facts}
    (output / "smoke-report.json").write_text(json.dumps(report, indent=2) + "\n")
    (output / "smoke-report.md").write_text(markdown(facts, assertions))
    return report


@dataclass(frozen=True)
class SmokeFlags:
    """`smoke`'s flags, each defined once here (zerokit.foundations.flags)."""

    device: str = flag("--device", choices=tuple(DEVICES), default="gpu", help="gpu (default) or cpu (2 ranks)")
    output: Path = flag("--output", type=Path, default=Path("runs/smoke"), help="report, logs and models go here")
    stack: str | None = flag("--stack", help="stack of this environment")  # None: environment_stack's


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    return command_parser(
        SmokeFlags, environ, prog="smoke", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )


def main(argv: list[str]) -> int:
    args = from_namespace(SmokeFlags, build_parser(os.environ).parse_args(argv))
    check_writable(args.output, "--output")  # found now, not by the report's write after the trainings
    report = smoke(args.device, args.output, args.stack or environment_stack(os.environ))
    print((args.output / "smoke-report.md").read_text())
    return 0 if report["passed"] else 1
