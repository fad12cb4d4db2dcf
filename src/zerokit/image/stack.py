"""Stacks: pinned version sets, read from `containers/stacks/<name>.toml`.

A stack is data. This module reads it and derives what the build needs from it:
the top-level requirements that `make lock` resolves, and the environment that
builds DeepSpeed's ops (`DS_BUILD_*`, `TORCH_CUDA_ARCH_LIST`, the portable CPU target).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from zerokit.foundations.errors import UserError
from zerokit.foundations.paths import STACKS_DIR

if TYPE_CHECKING:
    from zerokit.image.site_torch import SiteTorch

# DeepSpeed op name (as in `installed_ops`) -> the variable that prebuilds it.
DS_BUILD_VARS: dict[str, str] = {
    "async_io": "DS_BUILD_AIO",
    "cpu_adagrad": "DS_BUILD_CPU_ADAGRAD",
    "cpu_adam": "DS_BUILD_CPU_ADAM",
    "cpu_lion": "DS_BUILD_CPU_LION",
    "dc": "DS_BUILD_DEEP_COMPILE",
    "deepspeed_ccl_comm": "DS_BUILD_CCL_COMM",
    "deepspeed_shm_comm": "DS_BUILD_SHM_COMM",
    "evoformer_attn": "DS_BUILD_EVOFORMER_ATTN",
    "fused_adam": "DS_BUILD_FUSED_ADAM",
    "fused_lamb": "DS_BUILD_FUSED_LAMB",
    "fused_lion": "DS_BUILD_FUSED_LION",
    "inference_core_ops": "DS_BUILD_INFERENCE_CORE_OPS",
    "pin_memory": "DS_BUILD_PIN_MEMORY",
    "quantizer": "DS_BUILD_QUANTIZER",
    "transformer_inference": "DS_BUILD_TRANSFORMER_INFERENCE",
    "utils": "DS_BUILD_UTILS",
}

# gcc -march level -> the SIMD macro DeepSpeed's CPU kernels are compiled with. The one table:
# containers/portable-cc gets both from ds_build_env (ZEROKIT_CPU_TARGET, ZEROKIT_CPU_SIMD).
SIMD_FOR_TARGET: dict[str, str] = {
    "x86-64": "-D__SCALAR__",
    "x86-64-v2": "-D__SCALAR__",
    "x86-64-v3": "-D__AVX256__",
    "x86-64-v4": "-D__AVX512__",
}

# Where a cuda stack's nvcc comes from (the `cuda_home` key): "wheels", a CUDA_HOME that
# containers/cuda-home makes of the lock's cuda-toolkit wheels; "system", a toolkit outside the lock
# ($CUDA_HOME, else /usr/local/cuda: a cluster's CUDA module, or the base image's, as in nvidia/cuda).
CUDA_HOMES = ("wheels", "system")

# The Python packages every stack pins alike, in common/packages.toml beside the stack files; a stack
# file adds its own (torch, CUDA wheels). A stack file elsewhere without one beside it uses zerokit's.
COMMON_PACKAGES = Path("common") / "packages.toml"
# Those every CUDA stack (accelerator "cuda") pins alike: GPU-only kernels (liger-kernel's Triton ones).
CUDA_PACKAGES = Path("common") / "cuda-packages.toml"

# A stack whose python, accelerator, CUDA and arch list say "site" takes them from the torch of the Python
# it runs in (src/zerokit/image/site_torch.py): recorded in the environment once it is built, else probed.
SITE = "site"


DEFAULT_STACK = "cpu"


def environment_stack(environ: Mapping[str, str]) -> str:
    """The stack this environment was built from: ZEROKIT_STACK (the images set it), a site venv's record of
    its torch (make venv STACK=site), else the cpu stack."""
    from zerokit.image.site_torch import FACTS_NAME

    return environ.get("ZEROKIT_STACK") or (SITE if (Path(sys.prefix) / FACTS_NAME).is_file() else DEFAULT_STACK)


class StackError(UserError):
    """A stack file that is missing or malformed."""


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    base_image: str
    python: str
    accelerator: str
    cuda: str
    torch_cuda_arch_list: str
    cpu_target: str
    cuda_home: str
    ds_ops: tuple[str, ...]
    extra_index_url: str
    packages: dict[str, str]
    apt_runtime: tuple[str, ...]
    apt_build: tuple[str, ...]
    site: SiteTorch | None = None  # a site stack's torch (site.toml), None for a stack that pins its own
    notes: tuple[str, ...] = ()  # what was changed to build on the site's torch (its arch list)

    @property
    def lock_file(self) -> Path:
        return STACKS_DIR.parent / "lock" / f"{self.name}.txt"

    def version(self, package: str) -> str:
        return self.packages[package]

    def requirements(self) -> list[str]:
        """Top-level `name==version` lines, the input of `make lock`."""
        return [f"{name}=={version}" for name, version in self.packages.items()]

    def ds_build_env(self) -> dict[str, str]:
        """Environment for building the DeepSpeed wheel with exactly this stack's ops."""
        env = {
            "DS_BUILD_OPS": "0",
            "ZEROKIT_CPU_TARGET": self.cpu_target,
            "ZEROKIT_CPU_SIMD": SIMD_FOR_TARGET[self.cpu_target],  # for containers/portable-cc
        }
        env.update({DS_BUILD_VARS[op]: "1" for op in self.ds_ops})
        if self.accelerator == "cuda":
            env["DS_ACCELERATOR"] = "cuda"
            env["TORCH_CUDA_ARCH_LIST"] = self.torch_cuda_arch_list
        else:
            env["DS_ACCELERATOR"] = "cpu"
        return env

    def ds_wheel_inputs(self) -> list[str]:
        """What DeepSpeed's wheel is built from: a change here, and only here, recompiles the ops."""
        pins = [f"python={self.python}", f"torch={self.version('torch')}", f"deepspeed={self.version('deepspeed')}"]
        if self.site:  # the site's torch files, not a lock entry, say which torch the ops are built against
            pins.append(f"torch-digest={self.site.digest}")
        return pins + [f"{k}={v}" for k, v in sorted(self.ds_build_env().items())]

    def labels(self, git_commit: str, base_image: str) -> dict[str, str]:
        """OCI labels of an image built from this stack on base_image at git_commit."""
        from zerokit import __version__

        return {
            "org.opencontainers.image.title": f"zerokit-{self.name}",
            "org.opencontainers.image.description": self.description,
            "org.opencontainers.image.version": __version__,
            "org.opencontainers.image.revision": git_commit,
            "org.opencontainers.image.base.name": base_image,
            "io.zerokit.stack": self.name,
            "io.zerokit.python": self.python,
            "io.zerokit.torch": self.packages["torch"],
            "io.zerokit.deepspeed": self.packages["deepspeed"],
            "io.zerokit.transformers": self.packages["transformers"],
            "io.zerokit.cuda": self.cuda or "none",
            "io.zerokit.cuda-home": self.cuda_home if self.accelerator == "cuda" else "none",
            "io.zerokit.ds-ops": ",".join(self.ds_ops),
            "io.zerokit.torch-cuda-arch-list": self.torch_cuda_arch_list or "none",
            "io.zerokit.cpu-target": self.cpu_target,
        }


# The stack file's schema: key -> type (a list is of strings; a table maps strings to strings).
# Every key is required but those in OPTIONAL_KEYS; an unknown key is an error, not ignored.
STACK_SCHEMA: dict[str, type] = {
    "name": str,
    "description": str,
    "base_image": str,
    "python": str,
    "accelerator": str,
    "cuda": str,
    "torch_cuda_arch_list": str,
    "cpu_target": str,
    "cuda_home": str,
    "ds_ops": list,
    "ds_ops_from": dict,
    "extra_index_url": str,
    "packages": dict,
    "apt": dict,
}
APT_SCHEMA: dict[str, type] = {"runtime": list, "build": list}
OPTIONAL_KEYS: dict[str, object] = {"cuda_home": "wheels", "ds_ops_from": {}}
ACCELERATORS = ("cpu", "cuda", SITE)


def load_stack(name_or_path: str, *, site: bool = True) -> Stack:
    """The stack of that name or file. A site stack's torch facts are filled in unless site=False (for
    `make lock`, which leaves torch out and runs where no torch is)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = STACKS_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in STACKS_DIR.glob("*.toml")))
        raise StackError(f"no stack {name_or_path!r}: pick one of {known} (files in {STACKS_DIR})")
    try:
        data = {**OPTIONAL_KEYS, **tomllib.loads(path.read_text())}
    except tomllib.TOMLDecodeError as error:
        raise StackError(f"{path}: not valid TOML ({error})") from None
    check_schema(path, data, STACK_SCHEMA, "")
    check_schema(path, data["apt"], APT_SCHEMA, "apt.")
    cuda_pins = data["accelerator"] == "cuda"  # the file's: a site stack on a CUDA torch takes none of them
    if data["accelerator"] == SITE and site:
        data = with_site_torch(path, data)
    stack = Stack(
        name=data["name"],
        description=data["description"],
        base_image=data["base_image"],
        python=data["python"],
        accelerator=data["accelerator"],
        cuda=data["cuda"],
        torch_cuda_arch_list=data["torch_cuda_arch_list"],
        cpu_target=data["cpu_target"],
        cuda_home=data["cuda_home"],
        ds_ops=tuple(data["ds_ops"]),
        extra_index_url=data["extra_index_url"],
        packages=with_common_packages(path, data["packages"], cuda=cuda_pins),
        apt_runtime=tuple(data["apt"]["runtime"]),
        apt_build=tuple(data["apt"]["build"]),
        site=data.get("site"),
        notes=data.get("notes", ()),
    )
    unknown = [op for op in stack.ds_ops if op not in DS_BUILD_VARS]
    if unknown:
        raise StackError(f"{path}: unknown DeepSpeed op(s) {unknown}; known: {sorted(DS_BUILD_VARS)}")
    if stack.accelerator not in ACCELERATORS:
        raise StackError(f"{path}: accelerator {stack.accelerator!r} is not one of {list(ACCELERATORS)}")
    if stack.cpu_target not in SIMD_FOR_TARGET:
        raise StackError(f"{path}: cpu_target {stack.cpu_target!r} is not one of {sorted(SIMD_FOR_TARGET)}")
    if " " in stack.torch_cuda_arch_list + stack.cpu_target:
        raise StackError(f'{path}: write torch_cuda_arch_list with semicolons and no spaces, e.g. "8.0;9.0"')
    if stack.accelerator == "cuda" and not stack.torch_cuda_arch_list:
        raise StackError(f'{path}: a cuda stack needs an explicit torch_cuda_arch_list, e.g. "8.0;9.0"')
    if stack.cuda_home not in CUDA_HOMES:
        raise StackError(f"{path}: cuda_home {stack.cuda_home!r} is not one of {list(CUDA_HOMES)}")
    return stack


def with_site_torch(path: Path, data: dict) -> dict:
    """A site stack's file with the site's torch filled in: recorded facts where the environment has them
    (so a torch swapped later shows as drift), else the torch this interpreter imports."""
    from zerokit.image import site_torch

    facts = site_torch.recorded() or site_torch.probe()
    ops_from = data["ds_ops_from"].get(facts.accelerator)
    if not ops_from:
        raise StackError(f"{path}: ds_ops_from names no stack for a {facts.accelerator} torch")
    arch_list, notes = "", []
    if facts.accelerator == "cuda":
        arch_list, notes = site_torch.deepspeed_arch_list(site_torch.arch_entries(facts))
    return {
        **data,
        "python": facts.python,
        "accelerator": facts.accelerator,
        "cuda": facts.cuda,
        "torch_cuda_arch_list": arch_list,
        "ds_ops": list(load_stack(ops_from).ds_ops),
        "packages": {"torch": facts.torch, **data["packages"]},
        "site": facts,
        "notes": tuple(notes),
    }


def with_common_packages(stack_path: Path, own: dict[str, str], cuda: bool) -> dict[str, str]:
    """A stack's own packages, then the shared ones (and a CUDA stack's, the CUDA stacks' shared ones); pinning a
    shared one again is refused (one home per version)."""
    packages = dict(own)
    for shared in (COMMON_PACKAGES, CUDA_PACKAGES) if cuda else (COMMON_PACKAGES,):
        common_file = stack_path.parent / shared
        if not common_file.is_file():
            common_file = STACKS_DIR / shared
        common = tomllib.loads(common_file.read_text())["packages"]
        again = sorted(name for name in packages if name.split("[")[0] in common)
        if again:
            raise StackError(
                f"{stack_path}: {', '.join(again)} pinned here and in {common_file}: keep each version in one place"
            )
        packages.update(common)
    return packages


def check_schema(path: Path, data: dict, schema: dict[str, type], prefix: str) -> None:
    """One line for the first unknown key (with the nearest known one), missing key or wrong type."""
    for key in data:
        if key not in schema:
            close = difflib.get_close_matches(key, list(schema), n=1)
            hint = f"did you mean {prefix}{close[0]}? " if close else ""
            raise StackError(f"{path}: unknown key {prefix}{key}: {hint}(known: {', '.join(schema)})")
    for key, kind in schema.items():
        if key not in data:
            raise StackError(f"{path}: missing key {prefix}{key}; see containers/stacks/cpu.toml for the format")
        value = data[key]
        if kind is list:
            ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
            what = "a list of strings"
        elif kind is dict and key == "packages":
            ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
            what = 'a table of name = "version"'
        else:
            ok, what = isinstance(value, kind), "a table" if kind is dict else "a string"
        if not ok:
            raise StackError(f"{path}: {prefix}{key} must be {what}, got {type(value).__name__} {value!r}")


def needs_site_torch(field: str, keys: list[str]) -> bool:
    """Whether a field of a site stack comes from its torch (`make lock` and the base image do not)."""
    if field == "get":
        return keys[0].replace("-", "_") in ("python", "accelerator", "cuda", "torch_cuda_arch_list", "ds_ops")
    return field not in ("requirements", "lock-file")


def main(argv: list[str] | None = None) -> int:
    """`python -m zerokit.image.stack STACK FIELD`: print one derived value for the Makefile and Dockerfile."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m zerokit.image.stack", description=main.__doc__)
    parser.add_argument("stack")
    fields = ["requirements", "ds-build-env", "ds-wheel-inputs", "lock-file", "version", "get", "labels", "notes"]
    parser.add_argument("field", choices=fields)
    parser.add_argument("key", nargs="*", help="package (version), stack key (get), or commit and base image (labels)")
    args = parser.parse_args(argv)
    try:
        stack = load_stack(args.stack, site=needs_site_torch(args.field, args.key))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.field == "requirements":
        print("\n".join(stack.requirements()))
    elif args.field == "ds-build-env":
        # Unquoted NAME=value words, for `env $(...)` in a POSIX shell: no value holds a space.
        print(" ".join(f"{k}={v}" for k, v in sorted(stack.ds_build_env().items())))
    elif args.field == "ds-wheel-inputs":
        print("\n".join(stack.ds_wheel_inputs()))
    elif args.field == "lock-file":
        print(stack.lock_file)
    elif args.field == "labels":
        print("\n".join(f"{k}={v}" for k, v in stack.labels(*args.key).items()))
    elif args.field == "notes":
        if stack.notes:
            print("\n".join(stack.notes))
    elif args.field == "version":
        print(stack.version(args.key[0]))
    else:
        value = getattr(stack, args.key[0].replace("-", "_"))
        print(" ".join(value) if isinstance(value, tuple) else value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
