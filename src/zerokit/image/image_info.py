"""What an image knows about itself: /etc/zerokit/image.json, written when it is built.

A container cannot ask its runtime which image it is; the build can say it. `make image` hands the
tag, the build id (stack and commit), the base image and SOURCE_DATE_EPOCH to the Dockerfile, which
writes them here with the labels zerokit.image.stack gives. A SIF made from the image carries the same file;
which SIF it is (path and sha256) comes from Apptainer's environment at run time (zerokit.image.provenance).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

IMAGE_INFO = Path("/etc/zerokit/image.json")


def read_image_info(path: Path = IMAGE_INFO) -> dict | None:
    """The image's own record, or None outside an image (a venv on a host)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def image_info(stack: str, tag: str, build_id: str, base_image: str, source_date_epoch: str) -> dict:
    from zerokit.image.stack import load_stack

    commit = build_id.removeprefix(f"{stack}-")
    return {
        "tag": tag,
        "build_id": build_id,
        "stack": stack,
        "commit": commit,
        "base_image": base_image,
        "source_date_epoch": int(source_date_epoch) if source_date_epoch.isdigit() else None,
        "labels": load_stack(stack).labels(commit, base_image),
        "sbom": "/etc/zerokit/sbom.cdx.json",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zerokit.image.image_info", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["write"])
    parser.add_argument("file", type=Path)
    for flag in ("--stack", "--tag", "--build-id", "--base-image", "--source-date-epoch"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    info = image_info(args.stack, args.tag, args.build_id, args.base_image, args.source_date_epoch)
    args.file.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
