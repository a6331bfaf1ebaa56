"""One source for the store protocol: the Lua scripts get their constants from
service/protocol.py, and read a pending record at the offsets of learner/codec.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
import redis

from service.learner import ModelConfig
from service.learner.codec import pack_payload, pack_record
from service.learner.features import encode
from service.protocol import COUNTERS, LUA, Meta, Status
from service.store import scripts

SCRIPTS = {
    name: text
    for name, text in vars(scripts).items()
    if name.isupper() and not name.startswith("_") and isinstance(text, str)
}


def test_no_script_writes_a_status_code_as_a_number() -> None:
    """The scripts that answer with a Status (the others answer yes or no, 1 or 0)."""
    for name in ("SYNC", "PREDICT", "FEEDBACK", "LEARN"):
        for pattern in (r"return \{-?\d", r"answer\(-?\d", r"reply\[1\] = -?\d"):
            assert not re.findall(pattern, SCRIPTS[name]), (name, pattern)


def test_every_script_that_names_a_constant_declares_it() -> None:
    declared = set(re.findall(r"local (\w+) =", LUA))
    for name, text in SCRIPTS.items():
        used = {c for c in declared if re.search(rf"\b{c}\b", text.replace(LUA, ""))}
        if used:
            assert text.startswith(LUA), (name, used)


def test_no_script_writes_a_stored_name_by_hand() -> None:
    """The model hash's fields and the counters are declared once (protocol.Meta, COUNTERS);
    a script names them by the locals LUA generates from those, never as a literal, and uses
    no such local that is not declared."""
    stored = set(Meta.fields().values()) | {c.name for c in COUNTERS}
    declared = set(re.findall(r"local (\w+) =", LUA))
    for name, text in SCRIPTS.items():
        body = text.replace(LUA, "")
        literals = set(re.findall(r"'([^'\n]*)'", body)) | set(re.findall(r'"([^"\n]*)"', body))
        assert not literals & stored, (name, literals & stored)
        used = set(re.findall(r"\b(?:META|COUNT)_\w+", body))
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


def test_every_view_of_the_counters_is_the_protocols() -> None:
    from service.api.schemas import Counters
    from service.export_format import COUNTERS as EXPORTED
    from service.metrics.prometheus import COUNTERS as SCRAPED
    from service.protocol import COUNTERS

    names = {c.name for c in COUNTERS}
    assert set(Counters.model_fields) == names
    assert set(SCRAPED) | {"updates"} == names
    assert set(EXPORTED) == {c.name for c in COUNTERS if c.exported} | {"r2"}


def test_every_field_of_a_models_configuration_is_in_the_api_schema() -> None:
    import dataclasses

    from service.api.schemas import ModelSpec
    from service.learner import ModelConfig

    assert set(ModelSpec.model_fields) == {f.name for f in dataclasses.fields(ModelConfig)}
