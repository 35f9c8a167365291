"""The suite's shards (tests/shards.py, scripts/test_shards.sh) put every test file in exactly
one shard, in the order a one-process run collects them."""

from __future__ import annotations

import pytest

from tests import shards


def test_every_test_file_is_in_exactly_one_shard() -> None:
    assigned = shards.assignment()
    files = [file for got in assigned.values() for file in got]
    assert sorted(files) == sorted(shards.test_files())
    assert len(files) == len(set(files))
    assert list(assigned)[-1] == shards.REST


def test_each_shard_runs_its_files_in_collection_order() -> None:
    order = {file: index for index, file in enumerate(shards.test_files())}
    for name, files in shards.assignment().items():
        assert [order[file] for file in files] == sorted(order[file] for file in files), name


def test_a_directory_is_collected_where_its_name_sorts() -> None:
    # pytest sorts a directory's files and subdirectories together by name.
    files = shards.test_files()
    assert files.index("tests/gateway/handlers/test_chat_errors.py") < files.index(
        "tests/gateway/test_checkpoints.py"
    )


def test_a_file_in_two_shards_or_a_dead_pattern_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"a": ("tests/x/test_*.py",), "b": ("tests/x/test_one.py",), "c": ("tests/none/*",)}
    monkeypatch.setattr(shards, "SHARDS", {**table, shards.REST: ()})
    with pytest.raises(shards.ShardError) as raised:
        shards.assignment(["tests/x/test_one.py", "tests/y/test_two.py"])
    assert "tests/x/test_one.py is in shards a, b" in str(raised.value)
    assert "shard c: tests/none/* names no test file" in str(raised.value)


def test_a_file_no_shard_names_lands_in_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "SHARDS", {"a": ("tests/x/test_*.py",), shards.REST: ()})
    got = shards.assignment(["tests/x/test_one.py", "tests/new/test_new.py"])
    assert got == {"a": ["tests/x/test_one.py"], shards.REST: ["tests/new/test_new.py"]}
