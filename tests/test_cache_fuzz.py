"""Fuzz the feature-cache reader: whatever bytes a cache file holds, no garbage is served.

Opening an entry either returns its verified states or reports the file as damaged (a
warning naming it), removes it and rebuilds it: never an unhandled exception, never other
states than the encoder's.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from bench.cache.keys import FeatureKey
from bench.cache.store import CHECKSUM, FeatureStore, FlatStates, checksum

KEY = FeatureKey("enc", "w", "t", "sst2", "train", None, None, 16, "in", (), "float32")
ENTRY = KEY.with_layers((4,))
N_EXAMPLES = 3
REFERENCE = FlatStates(
    torch.arange(48.0).reshape(6, 1, 8), torch.tensor([[0, 2], [2, 1], [3, 3]])
)  # what the "encoder" gives for layer 4
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,  # the same cases every run: a fast, deterministic default-suite test
)


def _reference_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as root:
        store = FeatureStore(root)
        return store.save(ENTRY, REFERENCE).read_bytes()


VALID = _reference_bytes()


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as path:
        yield Path(path)


def _open_entry(root: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> bool:
    """Put ``content`` where the entry lives, ask for it as a cell would; True if rebuilt.

    Checks the reader's contract on the way: the encoder's states come back, and a rebuild
    happens exactly when the file is reported damaged, with a warning naming it.
    """
    store = FeatureStore(root)
    path = store.path(ENTRY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    calls: list[list[int]] = []

    def build(layers: list[int]) -> FlatStates:
        calls.append(layers)
        return REFERENCE

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bench.cache.store"):
        flat, built = store.get_layers(KEY, [4], N_EXAMPLES, build)
    assert torch.equal(flat.states, REFERENCE.states) and torch.equal(flat.index, REFERENCE.index)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    rebuilt = bool(store.damaged)
    assert (calls == [[4]]) == (built == [4]) == rebuilt
    assert warnings == [
        f"feature cache file {path} is damaged ({d['reason']}); removing it and rebuilding it"
        for d in store.damaged
    ]
    again = FeatureStore(root)  # what is on disk now is the verified entry
    stored = again.load(ENTRY, N_EXAMPLES)
    assert stored is not None and torch.equal(stored.states, REFERENCE.states)
    assert again.damaged == []
    return rebuilt


def test_the_valid_file_is_read_not_rebuilt(root, caplog):
    assert not _open_entry(root, VALID, caplog)


@FUZZ
@given(content=st.binary(max_size=400))
def test_random_bytes_are_rebuilt(root, caplog, content):
    assert _open_entry(root, content, caplog)


@FUZZ
@given(size=st.integers(0, len(VALID) - 1))
def test_a_truncated_file_is_rebuilt(root, caplog, size):
    assert _open_entry(root, VALID[:size], caplog)


@FUZZ
@given(
    flips=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(1, 255)),
        min_size=1,
        max_size=4,
        unique_by=lambda flip: flip[0],  # each position changed once: no flip undoes another
    )
)
def test_flipped_bytes_are_rebuilt_or_harmless(root, caplog, flips):
    """A flipped byte is caught, or lies where it changes nothing served (header spacing)."""
    data = bytearray(VALID)
    for at, mask in flips:
        data[at] ^= mask
    rebuilt = _open_entry(root, bytes(data), caplog)
    header_end = 8 + int.from_bytes(VALID[:8], "little")
    if any(at >= header_end for at, _ in flips):  # a tensor byte changed: always caught
        assert rebuilt


def _wrong(fault: str, draw: Callable[[st.SearchStrategy], object]) -> dict[str, object]:
    """A well-formed safetensors file's parts with one thing wrong for ``ENTRY``."""
    states = REFERENCE.states.clone()
    index = REFERENCE.index.clone()
    tensors: dict[str, torch.Tensor] = {}
    meta = {"key_digest": ENTRY.digest(), "key": "{}"}
    if fault == "states_shape":
        shape = draw(
            st.lists(st.integers(0, 7), min_size=1, max_size=4).filter(lambda s: s[1:2] != [1])
        )
        states = torch.zeros(shape)
    elif fault == "index_shape":
        shape = draw(
            st.lists(st.integers(0, 4), min_size=1, max_size=3).filter(lambda s: s != [3, 2])
        )
        index = torch.zeros(shape, dtype=torch.int64)
    elif fault == "index_values":
        values = draw(st.lists(st.integers(-5, 12), min_size=6, max_size=6))
        index = torch.tensor(values).reshape(3, 2)
        if all(v >= 0 for v in values) and int((index[:, 0] + index[:, 1]).max()) <= 6:
            index[0, 1] = -1  # in range after all: make one length negative
    elif fault == "index_dtype":
        index = index.to(draw(st.sampled_from([torch.int32, torch.float32, torch.uint8])))
    elif fault == "states_dtype":
        states = states.to(draw(st.sampled_from([torch.float16, torch.bfloat16, torch.int64])))
    elif fault == "key_digest":
        meta["key_digest"] = draw(st.sampled_from([KEY.digest(), "", "0" * 64]))
    elif fault == "tensor_names":
        names = draw(st.sampled_from([("states",), ("index",), ("states", "index", "extra")]))
        tensors = {n: {"states": states, "index": index}.get(n, states).clone() for n in names}
    tensors = tensors or {"states": states, "index": index}
    if fault == "checksum":
        meta[CHECKSUM] = draw(st.sampled_from(["", "sha256:" + "0" * 64, checksum({})]))
    elif fault != "no_checksum":
        meta[CHECKSUM] = checksum(tensors)  # self-consistent: only the structure is wrong
    return {"tensors": tensors, "metadata": meta}


FAULTS = [
    "states_shape",
    "index_shape",
    "index_values",
    "index_dtype",
    "states_dtype",
    "key_digest",
    "tensor_names",
    "checksum",
    "no_checksum",
]


@FUZZ
@given(data=st.data(), fault=st.sampled_from(FAULTS))
def test_a_wellformed_file_that_does_not_fit_its_key_is_rebuilt(root, caplog, data, fault):
    parts = _wrong(fault, data.draw)
    content = save(parts["tensors"], metadata=parts["metadata"])  # type: ignore[arg-type]
    assert _open_entry(root, content, caplog)
