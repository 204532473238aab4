"""Proof for snippets/distributed/context_parallel.py.

Proves, with 2 and 4 real processes on the gloo backend: ring attention
(contiguous and zigzag, causal and not), Ulysses and all-gather KV give the
same output and the same gradients for q, k and v as single-process
F.scaled_dot_product_attention on the whole sequence (float64 to 1e-12,
float32 to 1e-5), for lengths that the world size does not divide (padded with
pad_to_multiple) and with key padding masks, including a query row with no
key left (zeros). Ulysses refuses a head count the world size does not
divide. A rank that dies mid-ring makes its neighbour raise PeerTimeoutError
within seconds. In one process: the simulated ring equals SDPA for 1 to 8
ranks, zigzag balances causal work, shard/unshard round-trip, and every
validation message is raised.

Each world is started once (module fixture) and runs every case; this file
also serves as the worker script (``python tests/test_context_parallel.py``).
"""

from __future__ import annotations

import datetime
import os
import pathlib
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the worker runs this file as a script

from snippets.distributed.context_parallel import (  # noqa: E402
    LAYOUTS,
    PeerTimeoutError,
    allgather_kv_attention,
    causal_work_per_rank,
    merge_block,
    pad_to_multiple,
    ring_attention,
    shard_positions,
    shard_sequence,
    simulate_ring_attention,
    ulysses_attention,
    unshard_sequence,
)

SCHEMES = {"ring": ring_attention, "ulysses": ulysses_attention, "allgather": allgather_kv_attention}
LENGTH = {2: 7, 4: 11}  # neither world size divides these
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5)}
HEADS = 4
TIMEOUT_S = 3  # the ring group's timeout: a dead rank is noticed within this


def _cases() -> list[dict]:
    cases = []
    for scheme in SCHEMES:
        layouts = ("contiguous",) if scheme == "ulysses" else LAYOUTS
        for layout in layouts:
            for causal in (False, True):
                cases.append(dict(scheme=scheme, layout=layout, causal=causal, dtype=torch.float64))
        cases.append(dict(scheme=scheme, layout=layouts[-1], causal=True, dtype=torch.float32))
        # grouped-query attention: 8 query heads share 4 key/value heads
        cases.append(dict(scheme=scheme, layout=layouts[-1], causal=True, dtype=torch.float64,
                          kv_heads=4))
    return cases


CASES = _cases()


def _case_id(case: dict) -> str:
    dtype = str(case["dtype"]).removeprefix("torch.")
    gqa = f"-gqa{case['kv_heads']}" if "kv_heads" in case else ""
    return f"{case['scheme']}-{case['layout']}-{'causal' if case['causal'] else 'full'}-{dtype}{gqa}"


def _inputs(case: dict, n: int, index: int):
    """Whole-sequence q, k, v, a key mask (True = real) and an output gradient."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(index)
    h, h_kv = (8, case["kv_heads"]) if "kv_heads" in case else (HEADS, HEADS)
    q, grad = (torch.randn(2, h, n, 4, generator=g, dtype=case["dtype"]) for _ in range(2))
    k, v = (torch.randn(2, h_kv, n, 4, generator=g, dtype=case["dtype"]) for _ in range(2))
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, -3:] = False  # padding at the end of the second sequence
    mask[1, 0] = False  # and its first key: causal query 0 then has no key at all
    return q, k, v, mask, grad


def _reference(case, q, k, v, mask, grad):
    allowed = mask[:, None, None, :]
    if case["causal"]:
        allowed = allowed & torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).tril()
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                         enable_gqa=k.shape[1] != q.shape[1])
    out = out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


# ---------------------------------------------------------------------------
# The worker: one process of a gloo world.
# ---------------------------------------------------------------------------
def _worker(rank: int, world_size: int, folder: str, mode: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=60),  # generous: a loaded machine starts ranks slowly
    )
    results: dict = {}
    n = LENGTH[world_size]
    for index, case in enumerate(CASES):
        layout = case["layout"]
        multiple = world_size * (2 if layout == "zigzag" else 1)
        q, k, v, mask, grad = _inputs(case, n, index)
        q, k, v, grad = [pad_to_multiple(t, multiple, dim=2)[0] for t in (q, k, v, grad)]
        mask, real = pad_to_multiple(mask, multiple, dim=1)
        mask = mask & real  # padded keys are never attended
        local = [shard_sequence(t, rank, world_size, layout, dim=2) for t in (q, k, v, grad)]
        q_l, k_l, v_l = (t.clone().requires_grad_() for t in local[:3])
        out = SCHEMES[case["scheme"]](
            q_l, k_l, v_l, key_mask=shard_sequence(mask, rank, world_size, layout, dim=1),
            is_causal=case["causal"], **({} if case["scheme"] == "ulysses" else {"layout": layout}),
        )
        out.backward(local[3])  # padded query rows have zero gradient: they do not count
        results[_case_id(case)] = [t.detach() for t in (out, q_l.grad, k_l.grad, v_l.grad)]
    odd_heads = torch.zeros(1, world_size + 2 if world_size > 2 else 3, world_size, 2)
    try:
        ulysses_attention(odd_heads, odd_heads, odd_heads)
    except ValueError as error:
        results["odd_heads"] = str(error)
    if mode == "die":  # then rank 1 dies mid-ring; rank 0 must not hang
        short = dist.new_group(timeout=datetime.timedelta(seconds=TIMEOUT_S))
        dist.barrier(group=short)
        if rank == 1:
            torch.save(results, f"{folder}/rank{rank}.pt")
            os._exit(3)
        time.sleep(0.2)
        start = time.perf_counter()
        try:
            ring_attention(odd_heads, odd_heads, odd_heads, group=short)
        except Exception as error:  # noqa: BLE001 - the test checks the type
            results["dead_peer"] = (type(error).__name__, str(error), time.perf_counter() - start)
        torch.save(results, f"{folder}/rank{rank}.pt")
        os._exit(0)  # the group is broken: no clean shutdown
    torch.save(results, f"{folder}/rank{rank}.pt")
    dist.destroy_process_group()


def _start(world_size: int, folder: pathlib.Path, mode: str) -> list[subprocess.Popen]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return [
        subprocess.Popen(
            [sys.executable, __file__, str(r), str(world_size), str(folder), mode],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(world_size)
    ]


def _collect(procs: list[subprocess.Popen], folder: pathlib.Path, mode: str) -> list[dict]:
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=90)[0])  # the test-level timeout: never hang
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    expected = [3 if (mode == "die" and r == 1) else 0 for r in range(len(procs))]
    assert [p.returncode for p in procs] == expected, "\n".join(logs)[-4000:]
    return [torch.load(folder / f"rank{r}.pt") for r in range(len(procs))]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """Run every case once in a world of 2 and once in a world of 4 (both
    started at once); at the end of the world of 2, rank 1 dies while rank 0
    runs a ring."""
    modes = {2: "die", 4: "check"}
    folders = {p: tmp_path_factory.mktemp(f"world{p}") for p in modes}
    started = {p: _start(p, folders[p], modes[p]) for p in modes}
    return {p: _collect(started[p], folders[p], modes[p]) for p in modes}


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_scheme_matches_sdpa_output_and_gradients(worlds, world_size, case):
    n = LENGTH[world_size]
    q, k, v, mask, grad = _inputs(case, n, CASES.index(case))
    expected = _reference(case, q, k, v, mask, grad)
    shards = [r[_case_id(case)] for r in worlds[world_size]]
    layout = case["layout"]
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        got = unshard_sequence([s[i] for s in shards], layout, dim=2)[:, :, :n]
        torch.testing.assert_close(got, expected[i], **TOL[case["dtype"]], msg=lambda m: f"{name}: {m}")
    out = unshard_sequence([s[0] for s in shards], layout, dim=2)
    if case["causal"]:  # the second sequence's first query has no key: zeros, not NaN
        assert torch.equal(out[1, :, 0], torch.zeros_like(out[1, :, 0]))


@pytest.mark.parametrize("world_size", [2, 4])
def test_ulysses_refuses_heads_the_world_does_not_divide(worlds, world_size):
    for rank_result in worlds[world_size]:
        assert "n_kv_heads" in rank_result["odd_heads"]
        assert f"multiple of world_size = {world_size}" in rank_result["odd_heads"]


def test_dead_rank_raises_peer_timeout(worlds):
    name, message, seconds = worlds[2][0]["dead_peer"]
    assert name == "PeerTimeoutError", message
    assert "rank 0: ring step 0 received no block" in message
    assert seconds < TIMEOUT_S + 2


# ---------------------------------------------------------------------------
# One process: the same per-rank math, simulated; layouts; validation.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_simulated_ring_matches_sdpa(layout, causal, world_size):
    torch.manual_seed(world_size)
    n = 48
    q, k, v = (torch.randn(2, 3, n, 5, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, n) > 0.3
    out, _ = simulate_ring_attention(q, k, v, world_size, key_mask=mask, is_causal=causal, layout=layout)
    expected, *_ = _reference(dict(causal=causal), q, k, v, mask, torch.zeros_like(q))
    torch.testing.assert_close(out, expected, **TOL[torch.float64])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_simulated_ring_with_grouped_kv_heads_matches_sdpa_enable_gqa(layout, world_size):
    """The ring moves H_kv-head blocks; each query head reads its group's head."""
    torch.manual_seed(world_size)
    n = 24
    q = torch.randn(2, 6, n, 5, dtype=torch.float64)
    k, v = (torch.randn(2, 2, n, 5, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(2, n) > 0.3
    out, _ = simulate_ring_attention(q, k, v, world_size, key_mask=mask, is_causal=True,
                                     layout=layout)
    expected, *_ = _reference(dict(causal=True), q, k, v, mask, torch.zeros_like(q))
    torch.testing.assert_close(out, expected, **TOL[torch.float64])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("per_chunk", [1, 2, 3])
def test_ring_equals_sdpa_down_to_one_token_per_chunk(layout, world_size, per_chunk):
    """Every length the layout allows: P or 2P chunks of 1, 2 or 3 tokens."""
    n = per_chunk * world_size * (2 if layout == "zigzag" else 1)
    torch.manual_seed(n)
    q, k, v = (torch.randn(1, 2, n, 3, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        out, _ = simulate_ring_attention(q, k, v, world_size, is_causal=causal, layout=layout)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(out, want, **TOL[torch.float64])


def test_single_process_gqa_gradients_match_sdpa_enable_gqa():
    torch.manual_seed(1)
    q, grad = (torch.randn(1, 4, 6, 3, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(1, 2, 6, 3, dtype=torch.float64) for _ in range(2))
    mask = torch.tensor([[True, True, False, True, True, False]])
    expected = _reference(dict(causal=True), q, k, v, mask, grad)
    for scheme in SCHEMES.values():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = scheme(*leaves, key_mask=mask, is_causal=True)
        out.backward(grad)
        for got, want in zip([out, *[t.grad for t in leaves]], expected):
            torch.testing.assert_close(got, want, **TOL[torch.float64])


def test_zigzag_balances_causal_work():
    for p in (2, 4, 8):
        contiguous = causal_work_per_rank(16 * p, p, "contiguous")
        zigzag = causal_work_per_rank(16 * p, p, "zigzag")
        assert sum(contiguous) > sum(zigzag)  # zigzag skips more of the masked triangle
        assert contiguous == sorted(contiguous) and contiguous[-1] == p * contiguous[0]
        assert len(set(zigzag)) == 1  # every rank does the same work


def test_single_process_ring_gradients_match_sdpa():
    torch.manual_seed(0)
    q, k, v, grad = (torch.randn(1, 2, 6, 3, dtype=torch.float64) for _ in range(4))
    mask = torch.tensor([[True, True, False, True, True, False]])
    case = dict(causal=True)
    expected = _reference(case, q, k, v, mask, grad)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ring_attention(*leaves, key_mask=mask, is_causal=True).backward(grad)
    for got, want in zip([None, *[t.grad for t in leaves]], expected):
        if got is not None:
            torch.testing.assert_close(got, want, **TOL[torch.float64])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shard_unshard_round_trip(layout):
    x = torch.arange(24.0).reshape(1, 1, 24, 1)
    shards = [shard_sequence(x, r, 3, layout) for r in range(3)]
    assert torch.equal(unshard_sequence(shards, layout), x)
    for r, s in enumerate(shards):
        assert torch.equal(s.flatten().long(), shard_positions(s.shape[2], r, 3, layout))


def test_validation_messages():
    x = torch.zeros(1, 2, 7, 4)
    with pytest.raises(ValueError, match=r"the length of x along dim must be an int >= 0 and a multiple of 4 for "
                                         r"layout 'zigzag' on world_size 2 \(pad_to_multiple pads\), got 7"):
        shard_sequence(x, 0, 2, "zigzag")
    with pytest.raises(ValueError, match=r"layout must be one of .* got 'spiral'"):
        ring_attention(x, x, x, layout="spiral")
    with pytest.raises(ValueError, match=r"n must be an int >= 0 and a multiple of 2 for layout 'zigzag' on "
                                         r"world_size 1 \(pad_to_multiple pads\), got 7"):
        allgather_kv_attention(x, x, x, layout="zigzag")
    with pytest.raises(ValueError, match=r"key_mask must be None or torch.bool \(1, 7\) on cpu, "
                                         r"True = real key, got torch.bool \(1, 6\) on cpu"):
        ring_attention(x, x, x, key_mask=torch.ones(1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"k must be a floating \(1, H_kv, 7, 4\) tensor on q's device and dtype, "
                                         r"got torch.float32 \(1, 2, 6, 4\)"):
        ulysses_attention(x, torch.zeros(1, 2, 6, 4), x)
    with pytest.raises(ValueError, match=r"k's H_kv must divide q's H = 2, got 3"):
        ring_attention(x, torch.zeros(1, 3, 7, 4), torch.zeros(1, 3, 7, 4))
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, n, d\) tensor .* got torch.float32 \(2, 7, 4\)"):
        ring_attention(x[0], x, x)
    with pytest.raises(TypeError, match=r"k must be a floating .* got \[\]"):
        ring_attention(x, [], x)
    with pytest.raises(ValueError, match=r"multiple must be an int >= 1, got 0"):
        pad_to_multiple(x, 0)
    with pytest.raises(ValueError, match=r"world_size must be an int >= 1, got 0"):
        simulate_ring_attention(x, x, x, 0)


def test_more_validation_messages():
    x = torch.zeros(1, 2, 8, 4)
    mask = torch.ones(1, 8, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"k must be .* on q's device and dtype, got torch.float64"):
        ring_attention(x, x.double(), x)
    with pytest.raises(ValueError, match=r"v must be .* on q's device and dtype, got .* on meta"):
        allgather_kv_attention(x, x, x.to("meta"))
    with pytest.raises(ValueError, match=r"key_mask must be None or torch.bool .* got \[True"):
        ulysses_attention(x, x, x, key_mask=[True] * 8)
    with pytest.raises(ValueError, match=r"key_mask must be .* on cpu, True = real key, got torch.bool \(1, 8\) on meta"):
        ring_attention(x, x, x, key_mask=mask.to("meta"))
    with pytest.raises(ValueError, match=r"scale must be None or a finite float > 0, got 0.0"):
        ulysses_attention(x, x, x, scale=0.0)
    with pytest.raises(ValueError, match=r"n must be an int >= 0 and a multiple of 6 for "
                                         r"layout 'zigzag' on world_size 3"):
        simulate_ring_attention(x, x, x, 3, layout="zigzag")
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got 2"):
        shard_sequence(x, 2, 2)
    with pytest.raises(ValueError, match=r"world_size must be an int >= 1, got 2.5"):
        shard_positions(4, 0, 2.5)
    with pytest.raises(ValueError, match=r"n_local must be an int >= 0 and a multiple of 2 for layout 'zigzag', got 3"):
        shard_positions(3, 0, 2, "zigzag")
    with pytest.raises(ValueError, match=r"for x, a tensor, got dim -2 and x list"):
        pad_to_multiple([1.0], 2)
    with pytest.raises(ValueError, match=r"dim must be an int in \[-4, 4\) for x, a tensor, got dim 4 and x \(1, 2, 8, 4\)"):
        shard_sequence(x, 0, 2, dim=4)
    with pytest.raises(ValueError, match=r"shards must be P >= 1 tensors of one shape, "
                                         r"got \[\(1, 2, 8, 4\), \(1, 2, 7, 4\)\]"):
        unshard_sequence([x, x[:, :, :7]])
    with pytest.raises(ValueError, match=r"the shards' length along dim must be an int >= 0 and a multiple of 2 "
                                         r"for layout 'zigzag' on world_size 1 .*, got 7"):
        unshard_sequence([x[:, :, :7]], "zigzag")
    with pytest.raises(ValueError, match=r"n must be an int >= 1 and a multiple of 4 .* got 0"):
        causal_work_per_rank(0, 2, "zigzag")
    with pytest.raises(ValueError, match=r"n must be an int >= 1 and a multiple of 4 for layout 'zigzag' on "
                                         r"world_size 2 \(pad_to_multiple pads\), got 6"):
        causal_work_per_rank(6, 2, "zigzag")
    m, l, o, scores, v = torch.zeros(1, 3, 1), torch.ones(1, 3, 1), torch.zeros(1, 3, 4), torch.zeros(1, 3, 5), torch.zeros(1, 5, 4)
    merge_block(m, l, o, scores, v)  # fits
    with pytest.raises(TypeError, match=r"scores must be a floating \(n, b\) tensor .* got \[0.0\]"):
        merge_block(m, l, o, [0.0], v)
    with pytest.raises(TypeError, match=r"l must be a floating \(1, 3, 1\) tensor .* got torch.int64"):
        merge_block(m, l.long(), o, scores, v)
    with pytest.raises(ValueError, match=r"v must be .* on scores's device and dtype, got torch.float64"):
        merge_block(m, l, o, scores, v.double())
    with pytest.raises(ValueError, match=r"o must be .* on scores's device and dtype, got .* on meta"):
        merge_block(m, l, o.to("meta"), scores, v)
    with pytest.raises(ValueError, match=r"v must be a floating \(1, 5, 4\) tensor on scores's device and dtype, "
                                         r"got torch.float32 \(1, 6, 4\) on cpu"):
        merge_block(m, l, o, scores, torch.zeros(1, 6, 4))


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
