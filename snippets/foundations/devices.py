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


# --8<-- [start:pick_device]
def _available(kind: str) -> bool:
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available())
    return kind == "cpu"


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
        TypeError: ``device`` is neither a string, a ``torch.device`` nor None.
        ValueError: the requested device is unknown or not available here.
    """
    source = "device"
    if device is None:
        device = os.environ.get(ENV_VAR, "").strip() or None
        source = ENV_VAR
    if device is None:
        for kind in ("cuda", "mps"):
            if _available(kind):
                return torch.device(kind)
        return torch.device("cpu")

    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"{source} must be a str, a torch.device or None, got {type(device).__name__}"
        )
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise ValueError(
            f"{source} must name one of {', '.join(_KNOWN)} (optionally with an "
            f"index, as in 'cuda:1'), got {str(device)!r}"
        ) from None
    if chosen.type not in _KNOWN:
        raise ValueError(f"{source} must be one of {', '.join(_KNOWN)}, got {str(device)!r}")
    if not _available(chosen.type):
        raise ValueError(f"{source} asks for {str(device)!r}, but {chosen.type} is not available here")
    if chosen.type == "cuda" and chosen.index is not None:
        count = torch.cuda.device_count()
        if chosen.index >= count:
            raise ValueError(
                f"{source} asks for {str(device)!r}, but only {count} CUDA device(s) exist"
            )
    return chosen
# --8<-- [end:pick_device]


# --8<-- [start:default_dtype]
def default_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype the guide's examples use on ``device``.

    float32 on the CPU (half precision is slow there and gains nothing);
    bfloat16 on CUDA when the card supports it, else float16; float16 on MPS.

    Args:
        device: a ``torch.device`` or a device string.

    Returns:
        A floating ``torch.dtype``.
    """
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"device must name a device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if kind == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if kind == "mps":
        return torch.float16
    return torch.float32
# --8<-- [end:default_dtype]
