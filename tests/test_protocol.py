"""One source for the store protocol: the Lua scripts get their constants from
service/contract/store_protocol.py and their KEYS and ARGV from their slots (store/script.py),
and read a pending record at the offsets of learner/codec.py."""

from __future__ import annotations

import asyncio
import inspect
import re

import fakeredis
import numpy as np
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from service.contract.sources import parse_source, source_counts, source_fields
from service.contract.store_protocol import (
    COUNTERS,
    LUA,
    RECORD_CALL_BYTES,
    Field,
    Meta,
    Status,
    cell_field,
    parse_cell,
)
from service.learner import ModelConfig
from service.learner.codec import entry_head, pack_payload, pack_record, unpack_entry
from service.learner.features import encode
from service.store import ModelKeys
from service.store import ops as store_ops
from service.store.ops import SCRIPTS as OPS
from service.store.ops.predict import spans
from service.store.redis_store import Store
from service.store.script import Script

SCRIPTS = {op.name: op.lua for op in OPS}


def test_every_script_answers_a_status_by_its_name() -> None:
    """Every script answers a table that starts with a Status, named, never a number."""
    for op in OPS:
        returns = re.findall(r"return (.*)", op.body)
        assert returns, op.name
        for r in returns:
            named = r"\{[A-Z_]+\b|\{refused\b|sync\(|reply\b|taken\b|out\b"
            assert re.match(named, r), (op.name, r)
        for pattern in (r"answer\(-?\d", r"reply\[1\] = -?\d"):
            assert not re.findall(pattern, op.body), (op.name, pattern)


def test_every_script_reads_its_keys_and_arguments_by_the_names_of_its_slots() -> None:
    """No script indexes KEYS or ARGV by a number of its own: the header made from its
    slots does, once; and every slot it declares, it uses."""
    for op in OPS:
        code = op.body + "".join(op.parts)
        assert not re.findall(r"(?:KEYS|ARGV)\[\d", code), op.name
        assert op.lua.startswith(op.constants + op.header), op.name
        slots = [line.split()[1] for line in op.header.splitlines()]
        assert len(slots) == len(op.keys) + len(op.args) + bool(op.rest_keys) + bool(
            op.rest_args
        ), op.name
        for slot in slots:  # (or a rest of keys read back from the end)
            used = re.search(rf"\b{slot}\b", op.body) or "#KEYS" in op.body
            assert used, (op.name, slot)


def test_a_key_slot_is_named_after_the_models_key_it_holds() -> None:
    """So the caller's keys come from ModelKeys by the slot's name (key_list): the order is
    declared once. Only a request's answer key and the keys staged for a call (ops/blobs.py,
    ``ModelKeys.stage``; a challenger's weights, ``ModelKeys.challenger_weights``) are given by
    name."""
    staged = callable(ModelKeys.stage) and callable(ModelKeys.challenger_weights)
    for op in OPS:
        for key in op.keys:
            given = (
                key == "answer" or (key.startswith("stage") or key.endswith("weights")) and staged
            )
            assert given or isinstance(getattr(ModelKeys, key, None), property), (
                op.name,
                key,
            )


def test_a_call_gives_every_slot_by_name_and_no_other() -> None:
    op = Script("t", keys=("meta", "log"), args=("epoch", "n#"), body="return {DONE}")
    keys = ModelKeys("m")
    assert op.key_list(keys) == [keys.meta, keys.log]
    assert op.key_list(keys, {"log": "x"}) == [keys.meta, "x"]
    assert op.arg_list(epoch="e", n=3) == ["e", 3]
    with pytest.raises(KeyError):
        op.arg_list(epoch="e", m=3)
    with pytest.raises(ValueError):
        op.arg_list(epoch="e")
    with pytest.raises(ValueError):
        op.arg_list(["more"], epoch="e", n=3)  # no rest_args declared
    with pytest.raises(ValueError):
        op.key_list(keys, {"pend": "x"})
    with pytest.raises(ValueError, match="clash"):
        Script("t", keys=("meta",), args=("done",), body="")  # DONE is a Status


def test_exactly_the_scripts_sent_behind_a_wait_are_declared_so() -> None:
    """A new connection loads the scripts declared ``waited`` (store/connect.py): one sent
    behind a wait and not declared so would fail with NOSCRIPT after a Redis restart, once
    its wait had run its course; one declared and never so sent costs every connection."""
    for module in (m for m in store_ops.MODULES if hasattr(m, "SCRIPT")):
        assert ("run_with_wait" in inspect.getsource(module)) == module.SCRIPT.waited, module


def test_a_script_not_declared_waited_is_not_sent_behind_a_wait() -> None:
    op = Script("t", keys=(), args=(), body="return {DONE}")
    store = Store(fakeredis.FakeAsyncRedis(), embedded=True)
    with pytest.raises(ValueError, match="not declared waited"):
        asyncio.run(store.run_with_wait(op, [], [], after=("BLPOP", "k", 0.01)))


@pytest.mark.in_process  # on fakeredis's Lua and on a real redis-server
def test_every_script_compiles_and_reads_its_slots(redis_client: redis.Redis) -> None:
    for op in OPS:
        assert redis_client.script_load(op.lua)
    op = Script(
        "t",
        keys=("meta", "log"),
        args=("epoch", "n#"),
        rest_args="more",
        body="return {META, LOG, EPOCH, N + 1, MORE_AT, ARGV[MORE_AT]}",
    )
    keys = ModelKeys("m")
    got = redis_client.eval(op.lua, 2, *op.key_list(keys), *op.arg_list(["x"], epoch="e", n=2))
    assert got == [keys.meta.encode(), keys.log.encode(), b"e", 3, 3, b"x"]


def test_every_script_declares_the_constants_it_names_and_no_other() -> None:
    declared = set(re.findall(r"local (\w+) =", LUA))
    for op in OPS:
        code = op.lua.removeprefix(op.constants)
        used = {c for c in declared if re.search(rf"\b{c}\b", code)}
        own = set(re.findall(r"local (\w+) =", op.constants))
        assert own == used, (op.name, own ^ used)
        assert set(op.constants.splitlines()) <= set(LUA.splitlines()), op.name


# Lua 5.1 allows 200 local variables in one function, the main chunk included; a script holds
# its top-level locals (constants, slots, shared functions, its own) to this, with room to grow.
MOST_LOCALS = 120


def test_every_script_keeps_its_top_level_locals_far_from_luas_limit() -> None:
    counts = {op.name: len(re.findall(r"^local ", op.lua, re.M)) for op in OPS}
    assert max(counts.values()) <= MOST_LOCALS, sorted(counts.items(), key=lambda kv: -kv[1])[:3]


def test_no_script_writes_a_stored_name_by_hand() -> None:
    """The model hash's fields and the counters are declared once (protocol.Meta, COUNTERS);
    a script names them by the locals LUA generates from those, never as a literal, and uses
    no such local that is not declared."""
    stored = set(Meta.fields().values()) | {c.name for c in COUNTERS}
    stored |= set(Field.fields().values())
    declared = set(re.findall(r"local (\w+) =", LUA))
    for op in OPS:
        name, body = op.name, op.lua.removeprefix(op.constants)
        literals = set(re.findall(r"'([^'\n]*)'", body)) | set(re.findall(r'"([^"\n]*)"', body))
        assert not literals & stored, (name, literals & stored)
        used = set(re.findall(r"\b(?:META|COUNT|FIELD)_\w+", body))
        assert used <= declared, (name, used - declared)


@pytest.mark.in_process  # on fakeredis's Lua (the fast layer) and on a real redis-server
def test_the_lua_constants_are_pythons(redis_client: redis.Redis) -> None:
    names = [s.name for s in Status] + [f"META_{k}" for k in Meta.fields()]
    got = redis_client.eval(LUA + "return {" + ", ".join(names) + "}", 0)
    assert got == [int(s) for s in Status] + [v.encode() for v in Meta.fields().values()]
    counted = [c.name for c in COUNTERS if f"COUNT_{c.name.upper()}" in LUA]
    got = redis_client.eval(
        LUA + "return {" + ", ".join(f"COUNT_{c.upper()}" for c in counted) + "}", 0
    )
    assert got == [c.encode() for c in counted] and counted


@pytest.mark.in_process
def test_the_scripts_write_fields_and_log_entries_as_python_reads_them(
    redis_client: redis.Redis,
) -> None:
    """A confusion field and a log entry's head, built in Lua (ops/feedback.py) and read in
    Python; the other fields are the same strings on both sides (FIELD_*)."""
    got = redis_client.eval(
        LUA
        + "return {FIELD_CELL .. 12 .. ':' .. 3, "
        + "string.format('%d', 1234567) .. ENTRY_SEP .. '2' .. ENTRY_SEP}",
        0,
    )
    assert got[0].decode() == cell_field(12, 3) and parse_cell(got[0].decode()) == (12, 3)
    assert got[1] == entry_head(1234567, 2)
    config = ModelConfig(classes=("a", "b", "c"), n_features=2)
    x = encode(config, [1.5, -2.0])
    record = pack_record("e" * 16, 2, [True, False, True], pack_payload(np.zeros(3), x))
    k, t, _, back = unpack_entry(config, got[1] + record)
    assert (k, t) == (1234567, 2) and back.values.tolist() == [1.5, -2.0]
    assert parse_cell("cm:x:1") is None and parse_cell("seen") is None


@pytest.mark.in_process
def test_the_scripts_read_a_record_where_the_codec_wrote_it(redis_client: redis.Redis) -> None:
    config = ModelConfig(classes=("a", "b", "c"), n_features=2)
    x = encode(config, [1.5, -2.0])
    record = pack_record("e" * 16, 2, [True, False, True], pack_payload(np.zeros(3), x))
    read = redis_client.eval(
        LUA
        + """
local p = ARGV[1]
return {string.sub(p, 1, 1), string.sub(p, EPOCH_AT, EPOCH_END),
  tonumber(string.sub(p, SERVED_AT, SERVED_END)), string.sub(p, BITMAP_AT, BITMAP_AT + 2)}
""",
        0,
        record,
    )
    assert read == [b"P", b"e" * 16, 2, b"101"]


@pytest.mark.in_process
def test_a_keys_count_fields_are_the_same_in_lua_and_python(redis_client: redis.Redis) -> None:
    """ops/feedback.py builds them in Lua; engine/learn_commits.py with ``source_fields``."""
    got = redis_client.eval(
        LUA
        + "local s = FIELD_SOURCE .. ARGV[1] "
        + "return {s .. FIELD_EXAMPLES, s .. FIELD_MISTAKES, s .. FIELD_UPDATES}",
        0,
        "alice",
    )
    assert tuple(f.decode() for f in got) == source_fields("alice")
    assert [parse_source(f) for f in source_fields("")] == [("", ":n"), ("", ":m"), ("", ":u")]
    assert parse_source("src:alice:x") is None and parse_source("cm:0:1") is None


@given(
    st.lists(
        st.tuples(st.sampled_from(["", "alice", "key-0a1b2c3d"]), st.booleans(), st.booleans())
    )
)
def test_per_key_counts_are_a_tally_of_each_example(
    examples: list[tuple[str, bool, bool]],
) -> None:
    """Against a plain tally: labelled, mistakes (served != true) and updates, per source."""
    sources = [s for s, _, _ in examples]
    served = [int(m) for _, m, _ in examples]  # served 1 for a mistake, the true class 0
    updated = [u for _, _, u in examples]
    expected: dict[str, int] = {}
    for source, mistake, update in examples:
        for field, happened in zip(source_fields(source), (True, mistake, update), strict=True):
            expected[field] = expected.get(field, 0) + happened
    counted = source_counts(sources, served, [0] * len(sources), updated)
    assert counted == {f: c for f, c in expected.items() if c}


def test_every_view_of_the_counters_is_the_protocols() -> None:
    from service.api.schemas.model_schemas import Counters
    from service.contract.export_format import COUNTERS as EXPORTED
    from service.contract.store_protocol import COUNTERS
    from service.metrics.prometheus import COUNTERS as SCRAPED

    names = {c.name for c in COUNTERS}
    assert set(Counters.model_fields) == names
    assert set(SCRAPED) | {"updates"} == names
    assert set(EXPORTED) == {c.name for c in COUNTERS if c.exported} | {"r2"}


def test_every_field_of_a_models_configuration_is_in_the_api_schema() -> None:
    from service.api.schemas.model_schemas import ModelSpec
    from service.learner import ModelConfig

    assert set(ModelSpec.model_fields) == ModelConfig.field_names()


def test_predictions_are_stored_a_mebibyte_of_records_a_call() -> None:
    """A batch of wide predictions goes to Redis in calls of RECORD_CALL_BYTES past the
    first record each (a record over it alone in its call), every record once, in order."""
    mib = RECORD_CALL_BYTES
    assert spans([b"x" * (mib // 2)] * 5) == [(0, 2), (2, 4), (4, 5)]
    assert spans([b"x" * (2 * mib), b"y", b"z" * mib]) == [(0, 1), (1, 3)]
    assert spans([b"r"] * 1000) == [(0, 1000)]
    assert spans([]) == [(0, 0)]
