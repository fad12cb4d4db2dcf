"""Who signed a SIF, read from the file itself: doctor says it from inside the container, with no keyring.

A SIF (Apptainer's Singularity Image Format, version 2) is a 128-byte header, a table of 585-byte
descriptors and their data objects. `apptainer sign` adds one signature object per signed group; its
descriptor's extra field holds the hash type and the signing key's fingerprint (the Entity). Whether the
signature still holds, and whose name the key carries, only `apptainer verify` with the signer's public key
can say (`make verify-sif`): this tells a SIF that was signed, and by which key, from one that was not.
Layouts: github.com/apptainer/sif, pkg/sif (rawHeader, rawDescriptor, signature).
"""

from __future__ import annotations

import struct
from pathlib import Path

MAGIC = b"SIF_MAGIC\0"
HEADER = struct.Struct("<32s10s3s3s16s8q")  # launch script, magic, version, arch, id, 8 int64s
DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")  # type, used, id, group, link, offset, sizes, times, ...
DATA_SIGNATURE = 0x4005
FINGERPRINT_BYTES = 20  # an OpenPGP v4 fingerprint


class NotASif(ValueError):
    pass


def signing_keys(path: Path) -> list[str]:
    """The fingerprints (upper-case hex) of the keys that signed the SIF at path, each once; [] when unsigned.
    Raises NotASif for a file that is no SIF (a sandbox folder, a Docker image name) and OSError when unreadable."""
    with path.open("rb") as sif:
        header = sif.read(HEADER.size)
        fields = HEADER.unpack(header) if len(header) == HEADER.size else ()
        if not fields or fields[1] != MAGIC:
            raise NotASif(f"{path} is not a SIF file")
        total, offset = fields[8], fields[9]  # DescriptorsTotal, DescriptorsOffset
        sif.seek(offset)
        table = sif.read(total * DESCRIPTOR.size)
    keys: list[str] = []
    for index in range(len(table) // DESCRIPTOR.size):
        fields = DESCRIPTOR.unpack_from(table, index * DESCRIPTOR.size)
        data_type, used, extra = fields[0], fields[1], fields[-1]
        if used and data_type == DATA_SIGNATURE:
            fingerprint = extra[4 : 4 + FINGERPRINT_BYTES].hex().upper()  # after the int32 hash type
            if fingerprint.strip("0") and fingerprint not in keys:
                keys.append(fingerprint)
    return keys


def keyring_names(keyring: Path) -> dict[str, str]:
    """Fingerprint -> the first user ID, for each public key of an OpenPGP keyring file (Apptainer's
    pgp-public); {} when there is none. A v4 fingerprint is SHA-1 over 0x99, the key packet's length and body."""
    import hashlib

    try:
        data = keyring.read_bytes()
    except OSError:
        return {}
    names: dict[str, str] = {}
    current: str | None = None
    for tag, body in packets(data):
        if tag in (6, 14):  # public key, public subkey
            current = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
            names.setdefault(current, "")
        elif tag == 13 and current is not None and not names.get(current):  # user ID
            names[current] = body.decode("utf-8", "replace")
    return names


def packets(data: bytes):
    """(tag, body) of each OpenPGP packet (RFC 4880 section 4.2: old and new formats; no partial lengths,
    which keys do not use)."""
    at = 0
    while at < len(data):
        first = data[at]
        if not first & 0x80:
            return
        if first & 0x40:  # new format
            tag, at = first & 0x3F, at + 1
            octet = data[at]
            if octet < 192:
                length, at = octet, at + 1
            elif octet < 224:
                length, at = ((octet - 192) << 8) + data[at + 1] + 192, at + 2
            else:
                length, at = int.from_bytes(data[at + 1 : at + 5], "big"), at + 5
        else:  # old format
            tag, kind, at = (first >> 2) & 0x0F, first & 0x03, at + 1
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                return
            length, at = int.from_bytes(data[at : at + size], "big"), at + size
        yield tag, data[at : at + length]
        at += length
