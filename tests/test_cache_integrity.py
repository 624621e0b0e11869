"""Feature-cache integrity: a file altered after it was written is rebuilt, never read.

Also the cache's concurrency property (issue #20): two processes asking for the same entry
at once encode each split once; the other waits for the lock and reads what was built.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import multiprocessing.synchronize
import time
from pathlib import Path

import pytest
import torch

from bench.cache.keys import FeatureKey
from bench.cache.store import BUILD_LOG, FeatureStore, FlatStates

SPLITS = ("train", "dev")
N_EXAMPLES = 3
WARNING = "is damaged ({reason}); removing it and rebuilding it"


def _key(split: str = "train", layers: tuple[int, ...] = ()) -> FeatureKey:
    return FeatureKey("enc", "w", "t", "sst2", split, None, None, 16, "in", layers, "float32")


def _states(layers: list[int]) -> FlatStates:
    """What the 'encoder' returns: (6 tokens, len(layers), 8), a function of the layer."""
    states = torch.stack([torch.arange(48.0).reshape(6, 8) + 100 * i for i in layers], dim=1)
    return FlatStates(states, torch.tensor([[0, 2], [2, 1], [3, 3]]))


def _data_offset(data: bytes) -> int:
    """Where a safetensors file's tensor bytes begin (after its 8-byte length and header)."""
    return 8 + int.from_bytes(data[:8], "little")


def _corrupt_in_place(path: Path, at: int | None = None, span: int = 16) -> None:
    """Overwrite ``span`` tensor bytes with other bytes: same size, other contents."""
    data = bytearray(path.read_bytes())
    start = (_data_offset(data) + len(data)) // 2 if at is None else at
    data[start : start + span] = bytes(b ^ 0xFF for b in data[start : start + span])
    path.write_bytes(bytes(data))


def test_a_file_corrupted_in_place_is_rebuilt_with_a_warning_naming_it(tmp_path, caplog):
    store = FeatureStore(tmp_path)
    calls: list[list[int]] = []

    def build(layers: list[int]) -> FlatStates:
        calls.append(layers)
        return _states(layers)

    first, _ = store.get_layers(_key(), [4], N_EXAMPLES, build, extra=[3])
    path = store.path(_key(layers=(4,)))
    size = path.stat().st_size
    _corrupt_in_place(path)
    assert path.stat().st_size == size

    store = FeatureStore(tmp_path)  # the next cell
    with caplog.at_level(logging.WARNING, logger="bench.cache.store"):
        again, built = store.get_layers(_key(), [4], N_EXAMPLES, build, extra=[3])
    assert built == [4] and calls == [[3, 4], [4]]  # layer 3 was intact: not encoded again
    assert torch.equal(again.states, first.states)
    reason = "checksum mismatch: its contents changed after it was written"
    assert store.damaged == [{"file": str(path), "reason": reason}]
    (message,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert message == f"feature cache file {path} " + WARNING.format(reason=reason)
    builds = [json.loads(line) for line in (tmp_path / BUILD_LOG).read_text().splitlines()]
    assert [b["rebuilt"] for b in builds] == [[], [str(path.relative_to(tmp_path))]]
    # The rebuilt file verifies: the next reader takes it silently.
    store = FeatureStore(tmp_path)
    assert store.get_layers(_key(), [4], N_EXAMPLES, build)[1] == [] and store.damaged == []


@pytest.mark.parametrize("where", ["header", "index", "states"])
def test_an_altered_checksum_index_or_states_is_caught(tmp_path, where):
    store = FeatureStore(tmp_path)
    store.get_layers(_key(), [4], N_EXAMPLES, _states)
    path = store.path(_key(layers=(4,)))
    data = bytearray(path.read_bytes())
    offset = _data_offset(data)  # the index's 48 bytes (int64) come first, then the states
    if where == "header":  # one hex digit of the recorded checksum: the header still parses
        at = data.index(b'"sha256:') + 8
        data[at] = ord("0") if data[at] != ord("0") else ord("1")
        path.write_bytes(bytes(data))
    else:
        _corrupt_in_place(path, at=offset if where == "index" else len(data) - 4, span=4)
    store = FeatureStore(tmp_path)
    flat, built = store.get_layers(_key(), [4], N_EXAMPLES, _states)
    assert built == [4] and [d["reason"] for d in store.damaged] == [
        "checksum mismatch: its contents changed after it was written"
    ]
    assert torch.equal(flat.states, _states([4]).states)


def test_a_cell_whose_cache_file_was_corrupted_rebuilds_it_and_says_so(
    compose_cfg, data_dir, tmp_path, caplog
):
    """The real run: the result file of the cell that met the damage records the rebuild."""
    from bench.run.train import RESULT_FILE, run  # not at the top: spawned workers import us

    common = (
        "encoder=tiny_bert",
        "head=linear",
        "freeze=frozen",
        "task=rte",
        "data.train_size=32",
        f"data.dir={data_dir}",
        "trainer.max_epochs=1",
        "data.max_length=32",
        f"cache.dir={tmp_path / 'cache'}",
        "cache.dtype=float32",
        "cache.store_layers=head",
    )
    first = run(compose_cfg(*common, "seed=1"), tmp_path / "seed=1")
    assert first["status"] == "ok" and first["cache"]["rebuilt"] == []
    (entry,) = (tmp_path / "cache").rglob("train-L4-*.safetensors")
    _corrupt_in_place(entry)
    with caplog.at_level(logging.WARNING, logger="bench.cache.store"):
        second = run(compose_cfg(*common, "seed=2"), tmp_path / "seed=2")
    assert second["status"] == "ok", second.get("reason")
    stored = json.loads((tmp_path / "seed=2" / RESULT_FILE).read_text())["cache"]
    assert stored["misses"] == ["train"] and stored["hits"] == ["select", "dev"]
    assert [r["file"] for r in stored["rebuilt"]] == [str(entry)]
    assert any(
        str(entry) in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records
    )


def _worker(root: str, builds: str, out: str, start: multiprocessing.synchronize.Barrier) -> None:
    """One process of a sweep: ask for both splits' layers 3 and 4, as a cell would."""
    store = FeatureStore(root)
    got = {}
    for split in SPLITS:

        def build(layers: list[int], split: str = split) -> FlatStates:
            with open(builds, "a") as handle:  # a line per encoder pass
                handle.write(f"{split}\n")
            time.sleep(0.5)  # long enough for the other process to reach the lock
            return _states(layers)

        if split == SPLITS[0]:
            start.wait()  # both processes ask at the same moment
        flat, built = store.get_layers(_key(split), [3, 4], N_EXAMPLES, build)
        got[split] = {"states": flat.states, "built": built, "damaged": store.damaged}
    torch.save(got, out)


@pytest.mark.parametrize("state", ["empty", "corrupted"])
def test_two_processes_needing_one_entry_build_it_once(tmp_path, state):
    """Two spawned processes, one entry per split: one builds it, the other waits and reads it.

    ``corrupted``: both find the same damaged file; it is rebuilt once, by one of them.
    """
    root = tmp_path / "cache"
    if state == "corrupted":
        store = FeatureStore(root)
        for split in SPLITS:
            store.get_layers(_key(split), [3, 4], N_EXAMPLES, _states)
        damaged = [store.path(_key(split, (4,))) for split in SPLITS]
        for path in damaged:
            _corrupt_in_place(path)
    builds = tmp_path / "builds.txt"
    builds.touch()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    outs = [tmp_path / f"out{i}.pt" for i in range(2)]
    procs = [
        ctx.Process(target=_worker, args=(str(root), str(builds), str(out), start)) for out in outs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    results = [torch.load(out) for out in outs]
    assert sorted(builds.read_text().split()) == sorted(SPLITS)  # one encoder pass per split
    for split in SPLITS:
        a, b = (r[split] for r in results)
        assert torch.equal(a["states"], b["states"])
        assert torch.equal(a["states"], _states([3, 4]).states)
        expected = [3, 4] if state == "empty" else [4]  # a damaged layer alone is re-encoded
        assert sorted([a["built"], b["built"]]) == [[], expected], split
    if state == "corrupted":  # each damaged file reported once, by the process that rebuilt it
        reported = [d["file"] for r in results for d in r[SPLITS[-1]]["damaged"]]
        assert sorted(reported) == sorted(str(p) for p in damaged)
