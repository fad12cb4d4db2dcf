"""A copy of a training state in host memory, into buffers that are kept and reused by the next save.

A background checkpoint (zerokit.train.checkpoints.writer) must write the state as it was when the save was asked
for, while training goes on changing the live tensors. So the save copies every tensor of each state it is given
(a nested dict/list/tuple of tensors and small Python values, as torch.save and safetensors take) into a host
buffer: on a GPU the copy out of device memory (into pinned memory, asynchronously, waited for once), on CPU ranks
a memcpy. The buffers are kept between saves, keyed by the file and the place in its state, so a run allocates
them once (the first save pays the page faults) and every later save is a copy into memory already mapped.

A tensor that several states hold (the module's weights are in the HF `model.safetensors` and in DeepSpeed's
module states) is copied once per save. Everything that is not a tensor or a container is deep-copied (scheduler
and optimizer hyper-parameters, DeepSpeed's config): small, and changed by training in place too.

A buffer is allocated only while the node keeps RESERVE_BYTES free beyond it (zerokit.cluster.node_memory): else
`copy` raises NoHostRoom, and the caller writes that file synchronously instead (zerokit.train.checkpoints.capture),
so a run near its host memory's limit saves as before rather than being killed by the OOM killer at a save.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import torch

RESERVE_BYTES = 2 * 2**30  # host memory left free after a new buffer
ATOMS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


class NoHostRoom(MemoryError):
    """The node has no room for a new buffer (RESERVE_BYTES kept free)."""


class HostSnapshot:
    """Host copies of states, in buffers reused across saves. `begin` a save, `copy` each state, `finish`."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}  # (file, place in its state) -> its buffer, kept
        self._copied: dict[tuple, torch.Tensor] = {}  # this save's: a source tensor -> its copy
        self._on_device = False
        self.bytes = 0  # copied by this save

    def begin(self) -> None:
        self._copied = {}
        self._on_device = False
        self.bytes = 0

    def copy(self, state: Any, file: str, distinct: bool = False) -> Any:
        """state with its tensors copied into host buffers. file names the state's buffers across saves (a name
        the next save gives again); distinct: no two tensors of the copy share memory (safetensors refuses that)."""
        seen: set[tuple] | None = set() if distinct else None
        return self._copy(state, (file,), seen)

    def finish(self) -> None:
        """Wait for the copies out of device memory: from now on the host copies hold the state."""
        if self._on_device:
            torch.cuda.synchronize()
        self._copied = {}

    @property
    def held_bytes(self) -> int:
        """Host memory the kept buffers take."""
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def _copy(self, item: Any, place: tuple, seen: set[tuple] | None) -> Any:
        if isinstance(item, torch.Tensor):
            return self._tensor(item, place, seen)
        if isinstance(item, ATOMS):
            return item
        if isinstance(item, OrderedDict) or type(item) is dict:
            return type(item)((key, self._copy(value, (*place, key), seen)) for key, value in item.items())
        if type(item) is list:
            return [self._copy(value, (*place, i), seen) for i, value in enumerate(item)]
        if type(item) is tuple:
            return tuple(self._copy(value, (*place, i), seen) for i, value in enumerate(item))
        return copy.deepcopy(item)

    def _tensor(self, source: torch.Tensor, place: tuple, seen: set[tuple] | None) -> torch.Tensor:
        identity = (
            source.device,
            source.untyped_storage().data_ptr() if source.device.type != "meta" else id(source),
            source.storage_offset(),
            tuple(source.shape),
            tuple(source.stride()),
            source.dtype,
        )
        if seen is not None:
            if identity in seen:
                identity = (*identity, place)  # a second name for the same tensor: a copy of its own
            seen.add(identity)
        if (done := self._copied.get(identity)) is not None:
            return done
        buffer = self._buffers.get(place)
        if buffer is None or buffer.shape != source.shape or buffer.dtype != source.dtype:
            self._buffers.pop(place, None)
            check_host_room(source.numel() * source.element_size())
            pinned = source.device.type == "cuda"
            buffer = torch.empty(source.shape, dtype=source.dtype, device="cpu", pin_memory=pinned)
            self._buffers[place] = buffer
        with torch.no_grad():
            buffer.copy_(source.detach(), non_blocking=source.device.type == "cuda")
        self._on_device |= source.device.type == "cuda"
        copied = buffer
        if isinstance(source, torch.nn.Parameter):
            copied = torch.nn.Parameter(buffer, requires_grad=source.requires_grad)
        self._copied[identity] = copied
        self.bytes += buffer.numel() * buffer.element_size()
        return copied


def check_host_room(size: int) -> None:
    """Raise NoHostRoom unless the node can give size bytes and still keep RESERVE_BYTES free."""
    from zerokit.cluster.node_memory import host_available

    available = host_available()
    if available - size < RESERVE_BYTES:
        raise NoHostRoom(
            f"{size / 2**30:.1f} GiB for a host copy, {available / 2**30:.1f} GiB available "
            f"({RESERVE_BYTES / 2**30:.0f} GiB kept free)"
        )
