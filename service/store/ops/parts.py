"""Lua functions shared by the store's scripts (each script says which it uses)."""

# Shared by the scripts that answer with what a worker's copy (at version ``from``) lacks.
# A few entries come inline: {1, epoch, version, seen, from, 0, entries}. When there are more,
# or the copy needs the snapshot, the reply says where the log starts instead, {1, epoch,
# version, seen, snapv, 1, {}}, and the worker reads the keys itself with plain commands: a
# script copies and hashes every string it touches, which for a whole log costs ten times
# as much as a plain LRANGE.
SYNC = """
local function lost(meta, snap, log)
  local st = redis.call('HMGET', meta, META_VERSION, META_SNAP_VERSION, META_SNAP_LENGTH)
  local snapv = tonumber(st[2])
  if redis.call('LLEN', log) ~= tonumber(st[1]) - snapv then
    return 'its update log is incomplete'
  end
  local snaplen = tonumber(st[3] or -1)
  -- the bytes held: a list of chunks as recorded (blobs.py), a string written before its own
  local kind, held = redis.call('TYPE', snap).ok, snaplen
  if kind == 'none' then held = 0
  elseif kind == 'string' then held = redis.call('STRLEN', snap) end
  if (snaplen >= 0 and held ~= snaplen) or (snaplen < 0 and snapv > 0 and held == 0) then
    return 'its weights snapshot is missing'
  end
  return nil
end
local function sync(meta, snap, log, from)
  local why = lost(meta, snap, log)
  if why then return {STATE_LOST, why} end
  local st = redis.call('HMGET', meta, META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION,
    META_SEEN_OFFSET)
  st[3] = string.format('%d', tonumber(st[3]) - tonumber(st[5] or '0'))  -- (the learner's count)
  local snapv = tonumber(st[4])
  if from < snapv or tonumber(st[2]) - from > SYNC_INLINE then
    return {DONE, st[1], st[2], st[3], snapv, 1, {}}
  end
  return {DONE, st[1], st[2], st[3], from, 0, redis.call('LRANGE', log, from - snapv, -1)}
end
"""


# Answer one request: it leaves the queue's keys and its answer waits ANSWER_TTL_S for its
# requester.
ANSWER = """
local function answer(taken, reqs, key, token, data)
  redis.call('SREM', taken, token)
  redis.call('HDEL', reqs, token)
  redis.call('RPUSH', key, data)
  redis.call('EXPIRE', key, ANSWER_TTL_S)
end
"""


# The queue's keys (``learns``, ``taken``, ``reqs``) live until the last deadline of the
# requests in them, and QUEUE_KEEP_S more: a request past its deadline is never learned (its
# requester withdraws it, a writer refuses it), so keys that outlive every requester and
# writer (all of them killed, Redis restarted) expire instead of staying forever.
KEEP = """
local function keep(key, ms)
  if ms > 0 and redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
"""


# Take the lease; what an earlier writer took and did not answer goes back to be learned.
ACQUIRE = (
    KEEP
    + """
local function give_back(learns, taken)
  local back = redis.call('SMEMBERS', taken)
  local left = redis.call('PTTL', taken)
  for i = 1, #back, UNPACK_CHUNK do
    redis.call('LPUSH', learns, unpack(back, i, math.min(i + UNPACK_CHUNK - 1, #back)))
  end
  keep(learns, left)
  redis.call('DEL', taken)
end
local function acquire(writer, learns, taken, me, ms)
  redis.call('SET', writer, me, 'PX', ms)
  give_back(learns, taken)
end
"""
)


# Shared by the scripts that count labelled examples: counters, the confusion matrix, the
# ring of the last WINDOW outcomes (one byte each, '1' for a mistake), mistake and example
# counts per time bucket (buckets older than the retention are dropped), the learning curve,
# and the most recent labelled examples (as log entries, "k|t|" .. payload).
# record(..., seen before, n examples, marks: '0'/'1' per example in order, all n of them,
# mistakes, cells: {meta field = count to add}, recent: entries, oldest first, the model's
# drift detector: ``ModelConfig.drift_spec``, '' none), whose functions (``drift.DRIFT``) go
# before.
RECORD = """
local function curve_add(curve, meta, seen, n, marks)
  local total = seen + n
  local every = tonumber(redis.call('HGET', curve, FIELD_EVERY) or 1)
  if math.floor(total / every) == math.floor(seen / every) then return end
  local held = math.max(0, redis.call('HLEN', curve) - 1)
  while held + math.floor(total / every) - math.floor(seen / every) > CURVE_POINTS do
    every = every * 2
    local gone = {}
    for _, field in ipairs(redis.call('HKEYS', curve)) do
      local k = tonumber(field)
      if k and k % every ~= 0 then gone[#gone + 1] = field end
    end
    for i = 1, #gone, UNPACK_CHUNK do
      redis.call('HDEL', curve, unpack(gone, i, math.min(i + UNPACK_CHUNK - 1, #gone)))
    end
    held = math.max(0, redis.call('HLEN', curve) - 1)
  end
  local m = tonumber(redis.call('HGET', meta, COUNT_MISTAKES) or 0)
  local points, at = {FIELD_EVERY, string.format('%d', every)}, 0
  for k = (math.floor(seen / every) + 1) * every, total, every do
    local _, wrong = string.gsub(string.sub(marks, at + 1, k - seen), '1', '')
    m, at = m + wrong, k - seen
    points[#points + 1] = string.format('%d', k)
    points[#points + 1] = string.format('%d', m)
  end
  redis.call('HSET', curve, unpack(points))
end
local function record(meta, series, ring, recentkey, curve, bucket, keep, seen, n, marks,
    mistakes, cells, recent, detector)
  curve_add(curve, meta, seen, n, marks)  -- before the mistakes counter counts these
  local acts = (detector ~= '') and drift.record(meta, detector, seen, marks) or ''
  if #marks > WINDOW then marks = string.sub(marks, -WINDOW) end
  local start = (seen + n - #marks) % WINDOW
  local first = math.min(#marks, WINDOW - start)
  if first > 0 then redis.call('SETRANGE', ring, start, string.sub(marks, 1, first)) end
  if first < #marks then redis.call('SETRANGE', ring, 0, string.sub(marks, first + 1)) end
  for cell, c in pairs(cells) do redis.call('HINCRBY', meta, cell, c) end
  redis.call('HINCRBY', meta, META_SEEN, n)
  if mistakes > 0 then redis.call('HINCRBY', meta, COUNT_MISTAKES, mistakes) end
  local known = redis.call('HGET', series, FIELD_LAST)
  local last = tonumber(known or bucket)
  if bucket > last then
    if bucket - last >= keep then
      redis.call('DEL', series)
    else
      for b = last - keep + 1, bucket - keep do
        redis.call('HDEL', series, b .. FIELD_EXAMPLES, b .. FIELD_MISTAKES)
      end
    end
  end
  if bucket > last or not known then redis.call('HSET', series, FIELD_LAST, bucket) end
  redis.call('HINCRBY', series, bucket .. FIELD_EXAMPLES, n)
  if mistakes > 0 then redis.call('HINCRBY', series, bucket .. FIELD_MISTAKES, mistakes) end
  local kept = {}
  for i = math.max(1, #recent - RECENT_KEPT + 1), #recent do
    if #recent[i] <= RECENT_MAX_BYTES then kept[#kept + 1] = recent[i] end
  end
  if #kept > 0 then
    local length = redis.call('LPUSH', recentkey, unpack(kept))
    if length > RECENT_KEPT + RECENT_KEPT / 2 then
      redis.call('LTRIM', recentkey, 0, RECENT_KEPT - 1)
    end
  end
  return acts
end
"""


# Shared by the scripts that store or answer predictions: what each model holds pending,
# counted in bytes per creation bucket of ttl / PENDING_BUCKETS seconds, by Redis's clock.
# Hash ``pend``: field <bucket> = bytes made then and not answered yet, ``bytes`` = their
# sum, ``oldest`` = the oldest bucket held. Every key made in bucket b is gone by
# (b + 1) * width + ttl; a bucket is dropped then (a rescan, at most once per bucket width).
PENDING = """
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function pending_width(ttl) return math.max(1, math.ceil(ttl / PENDING_BUCKETS)) end
local function pending_held(pend, ttl, now)
  local width = pending_width(ttl)
  local st = redis.call('HMGET', pend, FIELD_BYTES, FIELD_OLDEST)
  local bytes, oldest = tonumber(st[1] or 0), tonumber(st[2])
  if oldest and (oldest + 1) * width + ttl <= now then
    local all = redis.call('HGETALL', pend)
    bytes, oldest = 0, nil
    for i = 1, #all, 2 do
      local b = tonumber(all[i])
      if b then
        if (b + 1) * width + ttl <= now then
          redis.call('HDEL', pend, all[i])
        else
          bytes = bytes + tonumber(all[i + 1])
          if not oldest or b < oldest then oldest = b end
        end
      end
    end
    if oldest then
      redis.call('HSET', pend, FIELD_BYTES, bytes, FIELD_OLDEST, oldest)
    else
      redis.call('DEL', pend)
    end
  end
  return math.max(0, bytes), oldest, width
end
local function pending_size(key, record) return #key + #record + PENDING_OVERHEAD end
"""


# The registry (the set of model names) and a model change together: on one Redis, in the
# same script (KEYS then ends with the registry, and LISTED is '1'); under Redis Cluster, whose
# registry lives on another shard than the model, around it, in an order that leaves no model
# unlisted (``ops/create.py``, ``ops/replace.py``, ``ops/delete.py``).
REGISTER = """
local function register(listed, registry, name)
  if listed == '1' then redis.call('SADD', registry, name) end
end
"""


# Packed weights move between keys by RENAME, whatever their size, never through a script's
# hands (``ops/blobs.py``): lists of chunks, staged by the caller, whose chunks a script counts
# before it renames them into place (a key ``<ck>:<id>`` for a checkpoint's; ``ck`` itself, a
# hash, holds those of checkpoints made before). UNLINK lets them go: Redis frees a list of
# many chunks off its main thread.
WEIGHTS = """
local function weights_key(ck, id) return ck .. ':' .. id end
local function let_go(key) redis.call('UNLINK', key) end
-- Whether ``key`` holds ``n`` chunks (0: it need not exist, and does not).
local function staged(key, n)
  if n <= 0 then return redis.call('EXISTS', key) == 0 end
  return redis.call('TYPE', key).ok == 'list' and redis.call('LLEN', key) == n
end
-- What ``from`` holds (none: zeros) becomes ``to``'s, whose old value is let go.
local function move_weights(from, to)
  let_go(to)
  if redis.call('EXISTS', from) == 1 then
    redis.call('RENAME', from, to)
    redis.call('PERSIST', to)  -- (a staged key expires, and a rename keeps its time to live)
  end
end
-- The bytes of the weights at ``key``: ``known`` (as recorded), else a string's own.
local function weights_bytes(key, known)
  if known then return tonumber(known) end
  if redis.call('TYPE', key).ok == 'string' then return redis.call('STRLEN', key) end
  return 0
end
-- Whether a restore's weights are staged whole: the restored ones at ``stage`` (``n``
-- chunks) and, when it starts the retained log at the snapshot (``starts``), the copy of the
-- snapshot at ``start`` (``start_n`` chunks of ``start_length`` bytes, as ``snap`` holds,
-- ``snaplen`` recorded).
local function restore_staged(stage, n, starts, start, start_n, start_length, snap, snaplen)
  return staged(stage, n) and (not starts or (staged(start, start_n)
    and weights_bytes(snap, snaplen) == start_length))
end
-- A checkpoint's weights let go, wherever they are kept.
local function drop_weights(ck, id)
  redis.call('HDEL', ck, id)
  let_go(weights_key(ck, id))
end
"""


# A checkpoint (ops/history.py): packed weights at version ``base`` (``size`` bytes, moved from
# key ``from``, which then no longer exists; none: zeros) and a tail of the log entries after
# them up to ``version``; its record (protocol.Checkpoint) says when, why, the labelled examples
# the model had at ``version`` (``seen_then``; nil: the model as it is now; false: an earlier
# state whose count is not known, the model's now said) and the mistakes among the last of them
# (the ring's; none known of an earlier state). Returns its id. (Uses WEIGHTS.)
CHECKPOINT = """
local function checkpoint(meta, ck, ckinfo, cktail, ring, from, size, tail, base, version, ms,
    reason, seen_then)
  local id = redis.call('HINCRBY', meta, META_CHECKPOINTS, 1)
  local st = redis.call('HMGET', meta, META_SEEN, META_CONFIG, META_PAST_IN, META_SEEN_OFFSET)
  local counted = tonumber(st[1] or '0')  -- (the ring holds the last outcomes counted)
  st[1] = string.format('%d', seen_then or counted - tonumber(st[4] or '0'))  -- its learner's
  local window = (seen_then == nil) and math.min(counted, WINDOW) or 0
  local mistakes = 0
  if window > 0 then
    local marks = redis.call('GET', ring) or ''  -- (min(seen, WINDOW) marks, some unknown)
    local _, m = string.gsub(marks, '1', '')
    local _, right = string.gsub(marks, '0', '')
    mistakes, window = m, math.min(window, m + right)
  end
  local parts = {}
  for i = 1, #tail do parts[i] = #tail[i] .. TAIL_SEP .. tail[i] end
  local joined = table.concat(parts)
  move_weights(from, weights_key(ck, id))
  if #joined > 0 then redis.call('HSET', cktail, id, joined) end
  local record = {}
  record[CK_VERSION], record[CK_BASE], record[CK_SEEN], record[CK_MS] = version, base,
    st[1] or '0', ms
  record[CK_REASON], record[CK_MISTAKES], record[CK_WINDOW] = reason, mistakes, window
  record[CK_BYTES], record[CK_PAST_IN], record[CK_CONFIG] = size + #joined, st[3] or '0',
    st[2]
  redis.call('HSET', ckinfo, id, table.concat(record, CHECKPOINT_SEP))
  return id
end
-- Where field ``n`` of a checkpoint's record starts and ends.
local function record_span(record, n)
  local at = 1
  for _ = 2, n do at = string.find(record, CHECKPOINT_SEP, at, true) + 1 end
  local stop = string.find(record, CHECKPOINT_SEP, at, true)
  return at, (stop or #record + 1) - 1
end
local function record_field(record, n)
  return string.sub(record, record_span(record, n))
end
-- Move the log's first ``n`` entries to the end of the retained log, and count their bytes.
local function retain(meta, log, past, n)
  if n <= 0 then return end
  local moved, bytes = redis.call('LRANGE', log, 0, n - 1), 0
  for i = 1, #moved, UNPACK_CHUNK do
    local upto = math.min(i + UNPACK_CHUNK - 1, #moved)
    for j = i, upto do bytes = bytes + #moved[j] end
    redis.call('RPUSH', past, unpack(moved, i, upto))
  end
  redis.call('LTRIM', log, n, -1)
  redis.call('HINCRBY', meta, META_PAST_IN, bytes)
end
-- Mark as left the scheduled checkpoints made after ``base`` of versions ``from`` on, which
-- a rollback or an undo took the model off (``before``: the one it made first).
local function left_behind(ckinfo, base, before, from)
  local infos = redis.call('HGETALL', ckinfo)
  for i = 1, #infos, 2 do
    local id, record = tonumber(infos[i]), infos[i + 1]
    if id > tonumber(base) and id ~= before
        and tonumber(record_field(record, CK_VERSION)) >= from
        and record_field(record, CK_REASON) == REASON_SCHEDULED then
      local at, stop = record_span(record, CK_REASON)
      redis.call('HSET', ckinfo, infos[i],
        string.sub(record, 1, at - 1) .. REASON_LEFT .. string.sub(record, stop + 1))
    end
  end
end
"""


# Shared by the scripts that start a retained log (compact.py, rollback.py, undo.py), after
# CHECKPOINT.
RETAINED = """
-- The labelled examples the model had at the version its ``log`` follows: one fewer than the
-- ordinal of the log's first entry (its leading digits), which the version after it learned;
-- nil when the log is empty (the model as it is now), false when its learner is not averaged
-- (whose count no update is logged in order with: not known), or when the entry starts a
-- retrained learner afresh (its ordinal is the new learner's).
local function seen_before(meta, log)
  local first = redis.call('LINDEX', log, 0)
  if not first then return nil end
  local config = redis.call('HGET', meta, META_CONFIG) or ''
  if not string.find(config, '"averaged": true', 1, true) then return false end
  local at = string.find(first, ENTRY_SEP, string.find(first, ENTRY_SEP, 1, true) + 1, true)
  if string.sub(first, at + 1, at + 1) == SOURCE_MARK then
    at = string.find(first, ENTRY_SEP, string.find(first, ENTRY_SEP, at + 2, true) + 1, true)
  end
  if string.sub(first, at + 1, at + 1) == RESTARTED then return false end
  return tonumber(string.match(first, '^%d+')) - 1
end
-- The checkpoint the retained log starts from, and its version: when there is none yet, the
-- snapshot's weights (moved from key ``from``, which holds them) are kept as one, and the
-- retained log starts at it (the model's ``log`` follows the snapshot).
local function retained_base(meta, log, from, ck, ckinfo, cktail, ring, ms)
  local st = redis.call('HMGET', meta, META_PAST_BASE, META_PAST_VERSION, META_SNAP_VERSION,
    META_SNAP_LENGTH)
  if st[1] then return st[1], tonumber(st[2]) end
  local id = checkpoint(meta, ck, ckinfo, cktail, ring, from, weights_bytes(from, st[4]), {},
    st[3], st[3], ms, REASON_START, seen_before(meta, log))
  redis.call('HSET', meta, META_PAST_BASE, id, META_PAST_VERSION, st[3])
  return id, tonumber(st[3])
end
"""


# Shared by the scripts that take pending records (feedback.py, defaults.py, purge.py): whether
# a record of epoch ``e`` is the model's, of its ``epoch`` or of one before a promotion whose
# records may still live (``previous``: meta's PREV_EPOCH; false or nil without one).
OURS = """
local function ours(e, epoch, previous)
  if e == epoch then return true end
  return type(previous) == 'string' and string.find(previous, e .. ':', 1, true) ~= nil
end
"""

# Shared by the scripts that let go of a model's ``hold`` (learn.py, promote.py): wake the
# ``waiting`` calls that found it (feedback, waiting on ``wake``).
WAKE = """
local function wake(wakekey, waiting)
  for i = 1, waiting, UNPACK_CHUNK do
    local ones = {}
    for j = 1, math.min(UNPACK_CHUNK, waiting - i + 1) do ones[j] = '1' end
    redis.call('RPUSH', wakekey, unpack(ones))
  end
  if waiting > 0 then redis.call('PEXPIRE', wakekey, HOLD_MS) end
end
"""
