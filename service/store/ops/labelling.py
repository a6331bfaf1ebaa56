"""Lua functions shared by the scripts that label pending predictions (feedback.py,
defaults.py): each label counted, logged and answered once."""

from service.store.ops import challenger_states, drift, parts

# Labelling pending predictions, shared by feedback and the default sweep (``defaults.py``;
# uses RECORD and PENDING). A state ``s`` from labels_begin (the model's version, examples
# seen, its drift detector: RECORD's, and Meta.SEEN_OFFSET: an entry's ordinal is the served
# learner's count; the model's hash and its background learner, ``blog``: a detector that
# retrains is fed each label as it comes, and at a drift the entries of RETRAIN put the
# background learner in the served one's place, the offset then its count) gathers what each
# label adds;
# label_one learns record ``p`` (kept at ``key`` for ``life`` seconds) with class index ``t``
# (a string) and answers it, ``by`` '' or DEFAULTED (counted apart); labels_end writes it all
# and returns the log's length (-1: no entry added).
LABEL = """
local function labels_begin(version, seen, detector, offset, meta, blog)
  local s = {version = version, seen = seen, entries = {}, marks = {}, cells = {}, recent = {},
    answered = {}, mistakes = 0, updates = 0, defaulted = 0, dmistakes = 0, dupdates = 0,
    detector = detector, offset = tonumber(offset or '0')}
  if string.find(detector, ' retrain', 1, true) then  -- (fed one label at a time: RETRAIN)
    s.meta, s.blog, s.dstate, s.devents, s.befores = meta, blog,
      redis.call('HGET', meta, META_DRIFT_STATE) or '', {}, {}
    s.offset_was = s.offset
  end
  return s
end
local function label_one(s, key, p, t, provenance, epoch, life, by)
  local served, ti = tonumber(string.sub(p, SERVED_AT, SERVED_END)), tonumber(t)
  local updated = (string.sub(p, BITMAP_AT + ti, BITMAP_AT + ti) == '1') and 1 or 0
  local m = (served ~= ti) and 1 or 0
  s.seen = s.seen + 1
  local act = '0'
  if s.blog then
    local events
    s.dstate, events, act = drift.feed(s.detector, s.dstate, (m == 1) and '1' or '0')
    for j = 1, #events, 2 do
      s.devents[#s.devents + 1], s.devents[#s.devents + 2] = #s.marks + 1, events[j + 1]
    end
  end
  local entry = string.format('%d', s.seen - s.offset) .. ENTRY_SEP .. t .. ENTRY_SEP
    .. provenance .. p
  s.recent[#s.recent + 1] = entry
  if act == '2' then  -- the background learner serves from here, this example its last learned
    s.befores[#s.marks + 1] = s.version
    local swap = retrain.entries(s.meta, s.blog, entry)
    for j = 1, #swap do s.entries[#s.entries + 1] = swap[j] end
    s.version, s.offset, updated = s.version + #swap, s.seen - #swap, 1
  else
    if act == '1' then retrain.keep(s.meta, s.blog, entry) end
    if updated == 1 then
      s.version = s.version + 1
      s.entries[#s.entries + 1] = entry
    end
  end
  s.updates = s.updates + updated
  s.marks[#s.marks + 1] = (m == 1) and '1' or '0'
  s.mistakes = s.mistakes + m
  if by ~= '' then
    s.defaulted, s.dmistakes, s.dupdates = s.defaulted + 1, s.dmistakes + m, s.dupdates + updated
  end
  local cell = FIELD_CELL .. served .. ':' .. t
  s.cells[cell] = (s.cells[cell] or 0) + 1
  s.now = s.now or clock()
  local made = s.now - life + redis.call('PTTL', key) / 1000
  local b = math.floor(made / pending_width(life))
  s.answered[b] = (s.answered[b] or 0) + pending_size(key, p)
  redis.call('SET', key,
    ANSWERED .. epoch .. '|' .. t .. '|' .. m .. '|' .. updated .. '|' .. s.version .. by,
    'EX', life)
  return m, updated, s.version
end
local function labels_end(s, meta, series, ring, recentkey, curve, pend, log, bucket, keep)
  -- Answered predictions no longer count as pending: their bytes leave their buckets.
  for b, size in pairs(s.answered) do
    local held = tonumber(redis.call('HGET', pend, b))
    if held then
      if held <= size then
        redis.call('HDEL', pend, b)
      else
        redis.call('HSET', pend, b, held - size)
      end
      redis.call('HINCRBY', pend, FIELD_BYTES, -math.min(held, size))
    end
  end
  if s.defaulted > 0 then
    redis.call('HINCRBY', meta, COUNT_DEFAULTED, s.defaulted)
    redis.call('HINCRBY', meta, COUNT_DEFAULTED_MISTAKES, s.dmistakes)
  end
  if #s.marks > 0 then
    record(meta, series, ring, recentkey, curve, bucket, keep, s.seen - #s.marks, #s.marks,
      table.concat(s.marks), s.mistakes, s.cells, s.recent, s.blog and '' or s.detector)
  end
  if s.blog and #s.marks > 0 then
    drift.keep(meta, s.dstate, s.devents, s.seen - #s.marks, s.befores)
    if s.offset ~= s.offset_was then redis.call('HSET', meta, META_SEEN_OFFSET, s.offset) end
  end
  local log_length = -1
  for i = 1, #s.entries, UNPACK_CHUNK do
    local upto = math.min(i + UNPACK_CHUNK - 1, #s.entries)
    log_length = redis.call('RPUSH', log, unpack(s.entries, i, upto))
  end
  if #s.entries > 0 then redis.call('HSET', meta, META_VERSION, s.version) end
  return log_length
end
"""

# Every Lua part a labelling script is made of, in the order each needs the ones before.
PARTS = (
    drift.DRIFT,
    drift.RETRAIN,
    parts.RECORD,
    parts.PENDING,
    parts.OURS,
    LABEL,
    challenger_states.LOG_LABELS,
)
