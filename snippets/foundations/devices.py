"""Pick the device and dtype that the guide's examples run on.

Page: docs/foundations/devices.md
Tested against: torch.cuda.is_available / torch.backends.mps.is_available,
faked in tests/test_device.py.

Order of preference: an explicit ``device`` argument, then the environment
variable ``FIELD_GUIDE_DEVICE``, then CUDA, then Apple's MPS, then the CPU.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import os

import torch

__all__ = ["ENV_VAR", "pick_device", "default_dtype"]

ENV_VAR = "FIELD_GUIDE_DEVICE"
_KNOWN = ("cpu", "cuda", "mps")


# --8<-- [start:choose]
def _available(kind: str) -> bool:
    """Whether this machine can run on ``kind`` ("cpu", "cuda" or "mps")."""
    if kind == "cuda":
        return torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None)
    return kind == "cpu" or (kind == "mps" and mps is not None and mps.is_available())


def best_device(requested: str | torch.device | None) -> torch.device:
    """The request if there is one, else the first of CUDA, MPS, CPU that is here."""
    if requested is not None:
        return torch.device(requested)
    for kind in ("cuda", "mps"):
        if _available(kind):
            return torch.device(kind)
    return torch.device("cpu")
# --8<-- [end:choose]


# --8<-- [start:pick_device]
def pick_device(device: torch.device | str | None = None) -> torch.device:
    """Return the device to run on.

    Args:
        device: force a device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``
            or a ``torch.device``). When ``None``, the environment variable
            ``FIELD_GUIDE_DEVICE`` is read, and when that is unset or empty the
            best available device is chosen: CUDA, then MPS, then CPU.

    Returns:
        A ``torch.device``.

    Raises:
        ValueError: the requested device is unknown or not available here.
    """
    source = "device"
    if device is None:
        device, source = os.environ.get(ENV_VAR, "").strip() or None, ENV_VAR
    _check_device_request(device, source)
    return best_device(device)
# --8<-- [end:pick_device]


# --8<-- [start:validate]
def _check_device_request(device: torch.device | str | None, source: str) -> None:
    """Refuse a device this machine lacks, naming where the request came from."""
    request = "cpu" if device is None else device  # no request: the CPU is always here
    kind, index = _device_kind(request, source), torch.device(str(request)).index or 0
    count = torch.cuda.device_count() if kind == "cuda" else 1
    if kind not in _KNOWN or not _available(kind) or index >= count:
        raise ValueError(f"{source} must be one of {', '.join(_KNOWN)} and available "
                         f"here ({count} of its kind), got {str(device)!r}")
# --8<-- [end:validate]


# --8<-- [start:default_dtype]
def default_dtype(device: torch.device | str) -> torch.dtype:
    """bfloat16 (or float16) on CUDA, float16 on MPS, float32 on the CPU."""
    kind = _device_kind(device)
    if kind == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float16 if kind == "mps" else torch.float32
# --8<-- [end:default_dtype]


# --8<-- [start:device_kind]
def _device_kind(device: torch.device | str, source: str = "device") -> str:
    """The kind of a device or a device string ('cuda', 'mps', 'cpu')."""
    try:  # str() first: torch.device(0) would silently mean cuda:0
        return torch.device(str(device)).type
    except RuntimeError:
        raise ValueError(f"{source} must name a device such as 'cpu' or 'cuda:0', "
                         f"got {device!r}") from None
# --8<-- [end:device_kind]
