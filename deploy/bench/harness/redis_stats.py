"""Redis's own account of a run: a model's counters, INFO commandstats and INFO cpu."""

from __future__ import annotations

from typing import Any

import redis

# Commands run inside a script are counted on their own too (and inside EVALSHA's usec): the
# total counts top-level commands only.
NESTED = {
    "set",
    "get",
    "hget",
    "hmget",
    "hset",
    "hincrby",
    "setbit",
    "hdel",
    "lpush",
    "ltrim",
    "rpush",
    "llen",
    "lrange",
    "del",
    "exists",
    "config|resetstat",
}
MAIN_THREAD = ("used_cpu_sys_main_thread", "used_cpu_user_main_thread")


def meta(r: redis.Redis, name: str) -> dict[str, int]:
    """A model's integer counters (version, learned, feedback, snapv...) from its meta hash."""
    raw = r.hgetall(f"pcp:{{{name}}}:meta")
    out = {}
    for k, v in raw.items():
        try:
            out[k.decode() if isinstance(k, bytes) else k] = int(v)
        except ValueError:
            pass
    return out


def before(r: redis.Redis, model: str) -> dict[str, Any]:
    """Reset INFO commandstats; note ``model``'s counters and Redis's CPU."""
    r.config_resetstat()
    cpu = r.info("cpu")
    return {"meta": meta(r, model), "cpu": cpu}


def after(
    r: redis.Redis, model: str, since: dict[str, Any], counter: str = "feedback"
) -> dict[str, float]:
    """Redis work per request served since ``before``; ``counter``: the model's counter of
    requests served (feedback, predictions, learned)."""
    stats = r.info("commandstats")
    cpu = r.info("cpu")
    m = meta(r, model)
    fb = m.get(counter, 0) - since["meta"].get(counter, 0)
    upd = m.get("version", 0) - since["meta"].get("version", 0)
    ev_calls = ev_usec = total = 0.0
    for name, st in stats.items():
        cmd = name.removeprefix("cmdstat_")
        if cmd in ("evalsha", "eval"):
            ev_calls += st["calls"]
            ev_usec += st["usec"]
        if cmd not in NESTED:
            total += st["usec"]
    cpu_s = sum(float(cpu[k]) - float(since["cpu"][k]) for k in MAIN_THREAD)
    lrange = stats.get("cmdstat_lrange", {}).get("calls", 0)
    return {
        "feedbacks": fb,
        "updates": upd,
        "lrange_calls": lrange,
        "evalsha_calls": ev_calls,
        "evalsha_calls_per_feedback": ev_calls / fb if fb else 0.0,
        "evalsha_usec_per_call": ev_usec / ev_calls if ev_calls else 0.0,
        "evalsha_usec_per_feedback": ev_usec / fb if fb else 0.0,
        "total_usec_per_feedback": total / fb if fb else 0.0,
        "cpu_usec_per_feedback": cpu_s * 1e6 / fb if fb else 0.0,
    }


def cpu_seconds(r: redis.Redis) -> float:
    """Redis's user + sys CPU seconds, all threads (INFO cpu)."""
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
