"""The drift detectors in Lua, for the scripts that count a learner's mistakes: the same
floating-point operations, in the same order, as ``learner/drift_detectors.py`` (River's), so
that a model's detector decides alike whichever script or worker feeds it.

``drift.feed(spec, state, marks)``: the detector ``spec`` names (``"ddm <warm_start>
<warning_threshold> <drift_threshold>"`` or ``"eddm <warm_start> <alpha> <beta>"``, its numbers
as ``%.17g``) fed ``marks`` ('1' a mistake, '0' not, in order) from ``state`` (its numbers as
``%.17g``, which reads back exactly, separated by spaces; '' for a fresh one); returns the new
state, so written, the events: for each example that raised a flag, its place in ``marks``
(from 1) and ``1`` (a warning) or ``2`` (a drift), flattened; and what a retraining does at each
example, one character each (River's ``DriftRetrainingClassifier``): ``1`` the background
learner learns it (River's warning flag is up), ``2`` the background learner replaces the served
one (a drift, without the warning flag), ``0`` neither.

``drift.record(meta, spec, seen, marks)``: the model's detector fed a commit's marks (the
model had counted ``seen`` examples before them), its state kept in the model's hash, each
event counted and kept (``Meta.DRIFT_EVENTS``, the last DRIFT_EVENTS_KEPT); returns the acts.
``drift.keep(meta, state, events, seen, befores)`` keeps a state and events fed apart: a
retraining's (a spec that ends in `` retrain``, ``"on_drift": "retrain"``), fed label by label
where it swaps, whose drift at which the served learner was replaced is marked ``retrained
<the model's version just before>`` (``befores``: that version, by the event's place).

RETRAIN (``retrain.keep``, ``retrain.entries``): the background learner, kept as the examples it
learned (the ``blog`` list, each an entry without its ordinal), and the entries that put it in
the served learner's place at a drift: its examples then the drift's, to be learned afresh by
every replica (``codec.RESTARTED`` the first, ``codec.RELEARNED`` the others, each with its
ordinal in the new learner).
"""

from service.contract.store_values import Background
from service.store.keys import keys_of
from service.store.script import Runner, Script, raw, status_of, text

DRIFT = """
local drift = {ACTS = {'0', '1', '2'}}
function drift.ddm(st, marks, warm, wt, dt, events, acts)
  local status, n, mean, pmin, smin, psmin = st[1], st[2], st[3], st[4], st[5], st[6]
  for i = 1, #marks do
    local before = status
    if status == 2 then status, n, mean, pmin, smin, psmin = 0, 0, 0, 0, 0, math.huge end
    local x = (string.byte(marks, i) == 49) and 1 or 0
    n = n + 1.0
    mean = mean + (1.0 / n) * (x - mean)
    local p, s = mean, math.sqrt(mean * (1 - mean) / n)
    if n > warm then
      if p + s <= psmin then
        pmin, smin = p, s
        psmin = pmin + smin
      end
      status = (p + s > pmin + wt * smin) and 1 or 0
      if p + s > pmin + dt * smin then status = 2 end
    end
    if status ~= before and status > 0 then
      events[#events + 1] = i
      events[#events + 1] = status
    end
    acts[i] = drift.ACTS[status + 1]
  end
  return {status, n, mean, pmin, smin, psmin}
end
function drift.eddm(st, marks, warm, alpha, beta, events, acts)
  local status, n, last, errors, count, mean, sq, most, warned =
    st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8], st[9]
  for i = 1, #marks do
    local was_warned, was_drift = warned == 1, status == 2
    if status == 2 then
      status, n, last, errors, count, mean, sq, most, warned = 0, 0, 0, 0, 0, 0, 0, -1, 0
    end
    n = n + 1.0
    if string.byte(marks, i) == 49 then
      errors = errors + 1.0
      local distance, old = n - last, mean
      count = count + 1.0
      mean = mean + (1.0 / count) * (distance - mean)
      sq = sq + 1.0 * (distance - old) * (distance - mean)
      if n > warm then
        local deviation = (count > 1) and (sq / (count - 1)) ^ 0.5 or 0.0
        local p2s = mean + 2 * deviation
        if p2s > most then
          most = p2s
        elseif errors > warm then
          local level = p2s / most
          if level < beta then
            status = 2
          elseif level < alpha then
            warned = 1
          else
            warned = 0
          end
        end
      end
      last = n
    end
    if status ~= 2 then status = (warned == 1) and 1 or 0 end
    if warned == 1 and not was_warned then
      events[#events + 1] = i
      events[#events + 1] = 1
    end
    if status == 2 and not was_drift then
      events[#events + 1] = i
      events[#events + 1] = 2
    end
    acts[i] = (warned == 1) and '1' or ((status == 2) and '2' or '0')
  end
  return {status, n, last, errors, count, mean, sq, most, warned}
end
function drift.feed(spec, state, marks)
  local kind, warm, a, b = string.match(spec, '^(%l+) (%S+) (%S+) (%S+)')
  warm, a, b = tonumber(warm), tonumber(a), tonumber(b)
  local feed, size = drift.ddm, 6
  if kind == 'eddm' then feed, size = drift.eddm, 9 end
  local st = {}
  for v in string.gmatch(state, '%S+') do st[#st + 1] = tonumber(v) end
  if #st ~= size then
    st = (kind == 'ddm') and {0, 0, 0, 0, 0, math.huge} or {0, 0, 0, 0, 0, 0, 0, -1, 0}
  end
  local events, acts = {}, {}
  st = feed(st, marks, warm, a, b, events, acts)
  for i = 1, size do st[i] = string.format('%.17g', st[i]) end
  return table.concat(st, ' '), events, table.concat(acts)
end
function drift.keep(meta, state, events, seen, befores)
  redis.call('HSET', meta, META_DRIFT_STATE, state)
  if #events == 0 then return end
  local now = redis.call('TIME')
  local ms = string.format(' %d', now[1] * 1000 + math.floor(now[2] / 1000))
  local lines = {redis.call('HGET', meta, META_DRIFT_EVENTS) or ''}
  for i = 1, #events, 2 do
    local warned = events[i + 1] == 1
    local before = (not warned) and befores and befores[events[i]]
    lines[#lines + 1] = string.format('%d', seen + events[i]) .. (warned and ' warning' or ' drift')
      .. ms .. (before and string.format(' retrained %d', before) or '') .. '\\n'
    redis.call('HINCRBY', meta, warned and COUNT_DRIFT_WARNINGS or COUNT_DRIFTS, 1)
    if before then redis.call('HINCRBY', meta, COUNT_RETRAINS, 1) end
  end
  local log = table.concat(lines)
  local _, held = string.gsub(log, '\\n', '')
  for _ = 1, held - DRIFT_EVENTS_KEPT do
    log = string.sub(log, string.find(log, '\\n', 1, true) + 1)
  end
  redis.call('HSET', meta, META_DRIFT_EVENTS, log)
end
function drift.record(meta, spec, seen, marks)
  local new, events, acts = drift.feed(spec, redis.call('HGET', meta, META_DRIFT_STATE) or '',
    marks)
  drift.keep(meta, new, events, seen, nil)
  return acts
end
"""

RETRAIN = """
local retrain = {}
function retrain.keep(meta, blog, entry)  -- (BACKGROUND_BYTES at most, all of them)
  local item = string.sub(entry, string.find(entry, ENTRY_SEP, 1, true) + 1)
  local held = tonumber(redis.call('HGET', meta, META_BLOG_BYTES) or '0')
  if held + #item > BACKGROUND_BYTES then return end
  redis.call('RPUSH', blog, item)
  redis.call('HSET', meta, META_BLOG_BYTES, held + #item)
end
function retrain.relearned(item, k, mark)
  local at = string.find(item, ENTRY_SEP, 1, true)  -- (past the true class, and the provenance)
  if string.sub(item, at + 1, at + 1) == SOURCE_MARK then
    at = string.find(item, ENTRY_SEP, string.find(item, ENTRY_SEP, at + 2, true) + 1, true)
  end
  return string.format('%d', k) .. ENTRY_SEP .. string.sub(item, 1, at) .. mark
    .. string.sub(item, at + 2)
end
function retrain.push(log, list, from, to, length)
  for j = from, to, UNPACK_CHUNK do
    length = redis.call('RPUSH', log, unpack(list, j, math.min(j + UNPACK_CHUNK - 1, to)))
  end
  return length
end
function retrain.entries(meta, blog, entry)
  local items = redis.call('LRANGE', blog, 0, -1)
  items[#items + 1] = string.sub(entry, string.find(entry, ENTRY_SEP, 1, true) + 1)
  for i = 1, #items do
    items[i] = retrain.relearned(items[i], i, (i == 1) and RESTARTED or RELEARNED)
  end
  redis.call('DEL', blog)
  redis.call('HDEL', meta, META_BLOG_BYTES)
  return items
end
"""


# What a model's writer learns a commit of a model that retrains from (``Background``), read
# at once: {DONE, version, the served learner's count, the detector's state, the background
# learner's examples}, or NO_MODEL.
READ = Script(
    "read_background",
    keys=("meta", "blog"),
    args=(),
    body="""
local st = redis.call('HMGET', META, META_VERSION, META_SEEN, META_SEEN_OFFSET, META_DRIFT_STATE,
  META_BLOG_BYTES)
if not st[1] then return {NO_MODEL} end
return {DONE, st[1], tonumber(st[2]) - tonumber(st[3] or '0'), st[4] or '',
  redis.call('LRANGE', BLOG, 0, -1), tonumber(st[5] or '0')}
""",
)


async def read_background(store: Runner, name: str) -> Background:
    """The model's detector and background learner, with the version and count they go with."""
    reply = await store.run(READ, READ.key_list(keys_of(name)), READ.arg_list())
    status_of(store, name, reply)
    items = [raw(v) for v in reply[4]]
    return Background(int(reply[1]), int(reply[2]), text(reply[3]), items, int(reply[5]))
