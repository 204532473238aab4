"""snippets/foundations/devices.py with the hardware faked: availability is patched, not assumed."""

from __future__ import annotations

import pytest
import torch

from snippets.foundations import devices as dev


@pytest.fixture
def fake(monkeypatch):
    """Pretend that the devices named in the call are available."""

    def set_available(*kinds, bf16=True, count=1):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: "cuda" in kinds)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count if "cuda" in kinds else 0)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: "mps" in kinds)

    monkeypatch.delenv(dev.ENV_VAR, raising=False)
    return set_available


@pytest.mark.parametrize(
    "available, expected",
    [(("cuda", "mps"), "cuda"), (("cuda",), "cuda"), (("mps",), "mps"), ((), "cpu")],
)
def test_preference_order(fake, available, expected):
    fake(*available)
    assert dev.pick_device() == torch.device(expected)


def test_argument_beats_environment_beats_automatic(fake, monkeypatch):
    fake("cuda", "mps")
    monkeypatch.setenv(dev.ENV_VAR, "mps")
    assert dev.pick_device() == torch.device("mps")
    assert dev.pick_device("cpu") == torch.device("cpu")
    assert dev.pick_device(torch.device("cuda")) == torch.device("cuda")
    monkeypatch.setenv(dev.ENV_VAR, "  ")
    assert dev.pick_device() == torch.device("cuda")


def test_cuda_index(fake):
    fake("cuda", count=2)
    assert dev.pick_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"device must be one of cpu, cuda, mps and available here \(2 of its kind\), got 'cuda:2'"):
        dev.pick_device("cuda:2")


def test_errors_name_argument_and_value(fake, monkeypatch):
    fake()
    with pytest.raises(ValueError, match=r"device must be one of cpu, cuda, mps and available here .*got 'cuda'"):
        dev.pick_device("cuda")
    with pytest.raises(ValueError, match=r"device must name a device such as 'cpu' or 'cuda:0', got 'gpu'"):
        dev.pick_device("gpu")
    with pytest.raises(ValueError, match=r"device must be one of cpu, cuda, mps and available here .*got 'meta'"):
        dev.pick_device("meta")
    with pytest.raises(ValueError, match=r"device must name a device such as 'cpu' or 'cuda:0', got 0"):
        dev.pick_device(0)
    monkeypatch.setenv(dev.ENV_VAR, "mps")
    with pytest.raises(ValueError, match=rf"{dev.ENV_VAR} must be one of cpu, cuda, mps and available here .*got 'mps'"):
        dev.pick_device()


@pytest.mark.parametrize(
    "kind, bf16, expected",
    [("cpu", True, torch.float32), ("mps", True, torch.float16),
     ("cuda", True, torch.bfloat16), ("cuda", False, torch.float16)],
)
def test_default_dtype(fake, kind, bf16, expected):
    fake("cuda", "mps", bf16=bf16)
    assert dev.default_dtype(kind) == expected
    assert dev.default_dtype(torch.device(kind)) == expected


def test_default_dtype_rejects_other_types():
    with pytest.raises(ValueError, match=r"device must name a device such as 'cpu' or 'cuda:0', got None"):
        dev.default_dtype(None)


def test_real_machine_choice_is_usable():
    device = dev.pick_device()
    x = torch.ones(2, device=device, dtype=dev.default_dtype(device))
    assert x.sum().item() == 2


def test_default_dtype_rejects_an_unknown_device_string():
    with pytest.raises(ValueError, match=r"device must name a device such as 'cpu' or 'cuda:0', got 'nonsense'"):
        dev.default_dtype("nonsense")


def test_a_message_written_for_the_cpu_is_read_for_the_device_under_test():
    """conftest.on_this_device: what pytest.raises(match=...) expects on a GPU."""
    import re

    from conftest import on_this_device

    cuda = torch.device("cuda", 0)
    written = r"x must be float on cpu, got \(torch.int64, device\(type='cpu'\)\)"
    assert on_this_device(written, torch.device("cpu")) == written
    read = on_this_device(written, cuda)
    assert re.search(read, "x must be float on cuda:0, got (torch.int64, device(type='cuda', index=0))")
    assert not re.search(read, "x must be float on cpu, got (torch.int64, device(type='cpu'))")
    assert on_this_device(None, cuda) is None
