"""The CUDA caching allocator's settings, read as ``PYTORCH_CUDA_ALLOC_CONF`` spells them, and its
size rules. Pure Python (no torch): the allocator model runs in the candidate environment or on the host.

The rules, as PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` and ``c10/core/AllocatorConfig.cpp`` state
them (quoted names are theirs):

* ``round_size``: a request below ``kMinBlockSize`` (512 B) takes 512 B, any other is rounded up to a
  multiple of 512 B, or, where ``roundup_power2_divisions`` gives N > 1 divisions for the request's
  power-of-two interval and the request exceeds 512 N bytes, up to the next of N equal divisions
  between the powers of two around it (``roundup_power2_next_division``).
* ``get_pool``: rounded sizes up to ``kSmallSize`` (1 MiB) come from the small pool, larger ones from
  the large pool.
* ``get_allocation_size``: a new segment is ``kSmallBuffer`` (2 MiB) for a small request,
  ``kLargeBuffer`` (20 MiB) below ``kMinLargeAlloc`` (10 MiB), else the request rounded up to
  ``kRoundLarge`` (2 MiB).
* ``max_split_size_mb`` (at least 20): blocks of that size or more are never split, a request below it
  never takes one, and a request at or above it takes a cached block only within
  ``max_non_split_rounding_mb`` (default 20 MiB) of its size.
* ``garbage_collection_threshold`` (between 0 and 1) acts only once a memory fraction is set
  (``torch.cuda.set_per_process_memory_fraction``): ``set_fraction`` in the allocator.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

MIB = 1024 * 1024
MIN_BLOCK = 512                 # kMinBlockSize
SMALL_SIZE = MIB                # kSmallSize: the largest small request
SMALL_BUFFER = 2 * MIB          # kSmallBuffer: a small pool segment
LARGE_BUFFER = 20 * MIB         # kLargeBuffer: the segment of a 1..10 MiB request
MIN_LARGE_ALLOC = 10 * MIB      # kMinLargeAlloc
ROUND_LARGE = 2 * MIB           # kRoundLarge
INTERVALS = 16                  # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB, one per power of two
INTERVAL_START_LOG2 = 20        # log2(kRoundUpPowerOfTwoStart = 1 MiB)
# options that change nothing the model replays (host memory, locking, other backends' switches)
IGNORED = ("release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "pinned_use_cuda_host_register",
           "pinned_use_hip_host_register", "pinned_num_register_threads", "pinned_use_background_threads",
           "pinned_reserve_segment_size_mb", "graph_capture_record_stream_reuse")


class AllocConfError(ValueError):
    """A setting the allocator would refuse, or one the model cannot replay."""


@dataclass(frozen=True)
class AllocSettings:
    """What the model replays with. ``device_total`` (bytes) lets a segment allocation fail, as
    ``cudaMalloc`` does on a full device (None: it never does); ``memory_fraction`` is
    ``set_per_process_memory_fraction``, the cap that also turns ``garbage_collection_threshold`` on."""

    max_split_size: Optional[int] = None          # bytes; None = unlimited (SIZE_MAX)
    max_non_split_rounding: int = LARGE_BUFFER
    expandable_segments: bool = False
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple = (0,) * INTERVALS
    device_total: Optional[int] = None
    memory_fraction: Optional[float] = None

    @property
    def allowed_maximum(self) -> Optional[int]:
        """``allowed_memory_maximum``: the fraction's cap in bytes (None without a fraction)."""
        if self.memory_fraction is None or self.device_total is None:
            return None
        return int(self.memory_fraction * self.device_total)

    def with_device(self, device_total=None, memory_fraction=None) -> "AllocSettings":
        if memory_fraction is not None and not 0 < memory_fraction <= 1:
            raise AllocConfError(f"memory fraction {memory_fraction} is not within (0, 1]")
        if memory_fraction is not None and device_total is None:
            raise AllocConfError("a memory fraction needs the device's memory (how many bytes it is a fraction of)")
        return replace(self, device_total=device_total, memory_fraction=memory_fraction)

    def conf(self) -> str:
        """The ``PYTORCH_CUDA_ALLOC_CONF`` text of the non-default settings ('' for torch's defaults)."""
        parts = []
        if self.max_split_size is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size // MIB}")
        if self.max_non_split_rounding != LARGE_BUFFER:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MIB}")
        if self.garbage_collection_threshold:
            parts.append(f"garbage_collection_threshold:{self.garbage_collection_threshold:g}")
        divisions = self.roundup_power2_divisions
        if len(set(divisions)) == 1 and divisions[0]:
            parts.append(f"roundup_power2_divisions:{divisions[0]}")
        elif any(divisions):
            parts.append("roundup_power2_divisions:[" + ",".join(f"{1 << i}:{n}" for i, n in enumerate(divisions)) + "]")
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        return ",".join(parts)

    def describe(self) -> str:
        """'expandable_segments:True, device 80 GiB x 0.5', or 'torch defaults'."""
        text = self.conf() or "torch defaults"
        if self.device_total is not None:
            text += f", device {self.device_total / 2**30:g} GiB"
            if self.memory_fraction is not None:
                text += f" x {self.memory_fraction:g}"
        return text


def _tokens(text: str) -> list:
    """``lexArgs``: ',', ':', '[' and ']' are tokens of their own, spaces are dropped."""
    out, buf = [], ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif ch != " ":
            buf += ch
    return out + ([buf] if buf else [])


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise AllocConfError(f"{what}: {text!r} is not a whole number") from None


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _split_mb(value: str, key: str) -> int:
    mb = _int(value, key)
    if mb < LARGE_BUFFER // MIB:
        raise AllocConfError(f"{key} too small, must be >= {LARGE_BUFFER // MIB}")
    return mb * MIB


def _divisions(tokens: list, i: int) -> tuple:
    """``parseRoundUpPower2Divisions``: one power of two for every interval, or ``[MB:N, ..., >:N]``."""
    if tokens[i] != "[":
        n = _int(tokens[i], "roundup_power2_divisions")
        if not _power_of_two(n):
            raise AllocConfError("roundup_power2_divisions: the divisions have to be a power of 2")
        return (n,) * INTERVALS, i
    values, last, first = [0] * INTERVALS, 0, True
    i += 1
    while i < len(tokens) and tokens[i] != "]":
        if i + 2 >= len(tokens) or tokens[i + 1] != ":":
            raise AllocConfError("roundup_power2_divisions: expected [MB:N, ..., >:N]")
        where, n = tokens[i], _int(tokens[i + 2], "roundup_power2_divisions")
        if n and not _power_of_two(n):
            raise AllocConfError("roundup_power2_divisions: the divisions have to be a power of 2 or 0")
        if where == ">":
            values[last:] = [n] * (INTERVALS - last)
        else:
            mb = _int(where, "roundup_power2_divisions interval")
            if not _power_of_two(mb):
                raise AllocConfError("roundup_power2_divisions: the intervals have to be powers of 2 (MB)")
            index = min(mb.bit_length() - 1, INTERVALS - 1)
            if first:
                values[:index] = [n] * index
                first = False
            values[index], last = n, index
        i += 3
        if i < len(tokens) and tokens[i] == ",":
            i += 1
    if i >= len(tokens):
        raise AllocConfError("roundup_power2_divisions: missing ']'")
    return tuple(values), i


def _bool(value: str, key: str) -> bool:
    if value not in ("True", "False"):
        raise AllocConfError(f"expected a single True/False argument for {key}")
    return value == "True"


def parse_alloc_conf(text: Optional[str]) -> AllocSettings:
    """``PYTORCH_CUDA_ALLOC_CONF`` text -> settings; an option torch refuses is refused here too."""
    fields: dict = {}
    tokens = _tokens(text or "")
    i = 0
    while i < len(tokens):
        key = tokens[i]
        if i + 2 >= len(tokens) or tokens[i + 1] != ":":
            raise AllocConfError(f"expected '{key}:VALUE' in the allocator settings {text!r}")
        value, i = tokens[i + 2], i + 2
        if key == "max_split_size_mb":
            fields["max_split_size"] = _split_mb(value, key)
        elif key == "max_non_split_rounding_mb":
            fields["max_non_split_rounding"] = _split_mb(value, key)
        elif key == "garbage_collection_threshold":
            try:
                threshold = float(value)
            except ValueError:
                threshold = -1.0
            if not 0.0 < threshold < 1.0:
                raise AllocConfError("garbage_collection_threshold is invalid, set it in (0.0, 1.0)")
            fields["garbage_collection_threshold"] = threshold
        elif key == "roundup_power2_divisions":
            fields["roundup_power2_divisions"], i = _divisions(tokens, i)
        elif key == "expandable_segments":
            fields["expandable_segments"] = _bool(value, key)
        elif key == "backend":
            if value != "native":
                raise AllocConfError(f"backend:{value} is not the caching allocator; the model replays backend:native")
        elif key not in IGNORED:
            raise AllocConfError(f"unrecognized CachingAllocator option: {key}")
        i += 1
        if i < len(tokens):
            if tokens[i] != ",":
                raise AllocConfError(f"expected ',' after {key} in the allocator settings {text!r}")
            i += 1
    return AllocSettings(**fields)


CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def conf_from_env(environ) -> str:
    """The allocator settings a CUDA run in this environment would get ('' when none are set)."""
    return next((environ[name] for name in CONF_ENV if environ.get(name)), "")


def settings_from_spec(spec: dict) -> AllocSettings:
    """The probe spec's model settings: ``alloc_conf``, ``alloc_device_gib`` and, with a device size,
    ``cuda_memory_fraction`` (the cap ``set_per_process_memory_fraction`` would set)."""
    settings = parse_alloc_conf(spec.get("alloc_conf"))
    gib = spec.get("alloc_device_gib")
    if gib is None:
        return settings
    return settings.with_device(int(gib * 2**30), spec.get("cuda_memory_fraction"))


def divisions_for(settings: AllocSettings, size: int) -> int:
    """``roundup_power2_divisions(size)``: the divisions of the size's power-of-two interval."""
    index = (size.bit_length() - 1) - INTERVAL_START_LOG2
    return settings.roundup_power2_divisions[min(max(index, 0), INTERVALS - 1)]


def next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: e.g. 1200 B in 4 divisions of 1024..2048 rounds to 1280 B."""
    if _power_of_two(size):
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(settings: AllocSettings, size: int) -> int:
    """``round_size``: the block size a request of ``size`` bytes takes."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    divisions = divisions_for(settings, size)
    if divisions > 1 and size > MIN_BLOCK * divisions:
        return next_division(size, divisions)
    return MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the bytes of the segment a rounded request opens."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)
