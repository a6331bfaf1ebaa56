"""Lua scripts: every change to a model happens inside one of them, atomically.

Per model (all keys share the hash tag ``{name}``, so a script may touch them all):
``meta`` (hash: config, epoch, counters), ``snap`` (string: packed weights at version
``snapv``), ``log`` (list: update entries for versions ``snapv+1 .. version``) and one
``pending`` string per prediction awaiting its label.

The learning curve, ``curve`` (hash), holds the mistakes made up to every ``every``-th
labelled example: field ``<k>`` = mistakes among the first ``k`` labelled examples, for ``k`` a
multiple of ``every``, and field ``every``. It keeps at most ``CURVE_POINTS`` points: when one
more would not fit, ``every`` doubles and the points that are not multiples of it go. It is
written by the scripts that count mistakes, in the same step, so each point is exactly the
count the ``mistakes`` counter had after that example.

A pending prediction is ``"P" .. epoch(16) .. served(4 digits) .. bitmap .. payload`` where
``bitmap`` holds one ``0``/``1`` per class: whether learning that class updates the weights.
Once answered it becomes ``"A" .. epoch .. "|" .. t .. "|" .. mistake .. "|" .. updated ..
"|" .. version``. The record's layout is ``learner/codec.py``'s; scripts answer with the status
codes of ``service/protocol.py``'s ``Status``, and name the fields of ``meta`` and the counters
as ``protocol.Meta`` and ``protocol.COUNTERS`` declare them (``META_EPOCH``, ``COUNT_LEARNED``,
...): all reach the scripts as the Lua locals that ``protocol.LUA`` declares, and every script
starts with those (``tests/test_protocol.py`` finds any name written by hand).

``meta`` also keeps ``snaplen``, the length of ``snap`` (0: no snapshot, all zeros), and the
log always holds ``version - snapv`` entries: the scripts that sync a worker check both, so a
model whose keys were evicted or deleted by hand is refused, never served from zeros.
"""

from ..protocol import LUA as _CONSTANTS

# Shared by the scripts that answer with what a worker's copy (at version ``from``) lacks.
# A few entries come inline: {1, epoch, version, seen, from, 0, entries}. When there are more,
# or the copy needs the snapshot, the reply says where the log starts instead, {1, epoch,
# version, seen, snapv, 1, {}}, and the worker reads the keys itself with plain commands: a
# script copies and hashes every string it touches, which for a whole log costs ten times
# as much as a plain LRANGE.
_SYNC = """
local function lost(meta, snap, log)
  local st = redis.call('HMGET', meta, META_VERSION, META_SNAP_VERSION, META_SNAP_LENGTH)
  local snapv = tonumber(st[2])
  if redis.call('LLEN', log) ~= tonumber(st[1]) - snapv then
    return 'its update log is incomplete'
  end
  local snaplen = tonumber(st[3] or -1)
  local held = redis.call('STRLEN', snap)
  if (snaplen >= 0 and held ~= snaplen) or (snaplen < 0 and snapv > 0 and held == 0) then
    return 'its weights snapshot is missing'
  end
  return nil
end
local function sync(meta, snap, log, from)
  local why = lost(meta, snap, log)
  if why then return {STATE_LOST, why} end
  local st = redis.call('HMGET', meta, META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION)
  local snapv = tonumber(st[4])
  if from < snapv or tonumber(st[2]) - from > SYNC_INLINE then
    return {DONE, st[1], st[2], st[3], snapv, 1, {}}
  end
  return {DONE, st[1], st[2], st[3], from, 0, redis.call('LRANGE', log, from - snapv, -1)}
end
"""

# The registry (the set of model names) and a model change together: on one Redis, in the
# same script (KEYS then ends with the registry); under Redis Cluster, whose registry lives
# on another shard than the model, around it, in an order that leaves no model unlisted
# (``redis_store.py``).
_REGISTER = """
local function register(name)
  if ARGV[#ARGV] == '1' then redis.call('SADD', KEYS[#KEYS], name) end
end
"""

# KEYS[1] = meta (, registry)  /  ARGV[1] = config JSON, ARGV[2] = epoch, ARGV[3] = created
# (unix s), ARGV[4] = name, ARGV[5] = '1' when the registry is the last key
# returns {1} when created, {0, existing config JSON} when the name is taken, {-5, why} when
# the name is listed but its model's keys are gone (evicted, or deleted by hand): such a
# model is lost, never made anew from zeros under the name (a DELETE clears the name)
CREATE = (
    _CONSTANTS
    + _REGISTER
    + """
local cfg = redis.call('HGET', KEYS[1], META_CONFIG)
if cfg then return {0, cfg} end
if ARGV[#ARGV] == '1' and redis.call('SISMEMBER', KEYS[#KEYS], ARGV[4]) == 1 then
  return {STATE_LOST, 'it is listed but its keys are gone (evicted?)'}
end
redis.call('HSET', KEYS[1], META_CONFIG, ARGV[1], META_EPOCH, ARGV[2], META_CREATED, ARGV[3],
  META_VERSION, 0, META_SEEN, 0, META_SNAP_VERSION, 0, META_SNAP_LENGTH, 0)
register(ARGV[4])
return {1}
"""
)

# KEYS = the model's state keys (meta first), then its other keys (, registry)  /  ARGV[1] =
# name, ARGV[2] = how many state keys, ARGV[3] = '1' when the registry is the last key
# returns {state keys deleted (and 1 when only the name was listed: a lost model), the model's
# epoch ('' without one)}
DELETE = (
    _CONSTANTS
    + """
local epoch = redis.call('HGET', KEYS[1], META_EPOCH) or ''
local last, gone = #KEYS, 0
if ARGV[3] == '1' then
  gone = redis.call('SREM', KEYS[last], ARGV[1])
  last = last - 1
end
for i = 1, last do
  local n = redis.call('DEL', KEYS[i])
  if i <= tonumber(ARGV[2]) then gone = gone + n end
end
return {gone, epoch}
"""
)

# KEYS = meta, snap, log  /  ARGV[1] = version the caller holds (-1 for none)
# returns -1 without the model, else the sync reply
SYNC = (
    _CONSTANTS
    + _SYNC
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {NO_MODEL} end
return sync(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))
"""
)

# One writer per model (``writer.py``): the worker that holds ``writer`` (a lease, renewed
# while it works) learns every /learn of the model; the other workers hand their checked
# examples over and wait for the answer. A request waiting for the writer has its token in
# ``learns`` (a list, oldest first) and its bytes in ``reqs`` (a hash, token -> request); the
# writer moves the tokens it takes into ``taken`` (a set) and the commit that learns a request
# takes it out of both keys and pushes its answer, in one script (LEARN). A request leaves
# ``reqs`` once: learned and answered, answered with an error, withdrawn by its requester, or
# gone with its keys (the model deleted, a key evicted or expired), so it is learned at most
# once; its requester learns which, or (its answer gone too) that nobody can tell. A worker
# that takes the lease puts every taken token back at the head of the queue: the writer before
# it may have died with them; if it lives on, the commit of whichever learns a request first
# wins.

# Answer one request: it leaves the queue's keys and its answer waits ANSWER_TTL_S for its
# requester.
_ANSWER = """
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
_KEEP = """
local function keep(key, ms)
  if ms > 0 and redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
"""

# Take the lease; what an earlier writer took and did not answer goes back to be learned.
_ACQUIRE = (
    _KEEP
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
# mistakes, cells: {confusion field = count}, recent: entries, oldest first)
_RECORD = """
local function curve_add(curve, meta, seen, n, marks)
  local total = seen + n
  local every = tonumber(redis.call('HGET', curve, 'every') or 1)
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
  local points, at = {'every', string.format('%d', every)}, 0
  for k = (math.floor(seen / every) + 1) * every, total, every do
    local _, wrong = string.gsub(string.sub(marks, at + 1, k - seen), '1', '')
    m, at = m + wrong, k - seen
    points[#points + 1] = string.format('%d', k)
    points[#points + 1] = string.format('%d', m)
  end
  redis.call('HSET', curve, unpack(points))
end
local function record(meta, series, ring, recentkey, curve, bucket, keep, seen, n, marks,
    mistakes, cells, recent)
  curve_add(curve, meta, seen, n, marks)  -- before the mistakes counter counts these
  if #marks > WINDOW then marks = string.sub(marks, -WINDOW) end
  local start = (seen + n - #marks) % WINDOW
  local first = math.min(#marks, WINDOW - start)
  if first > 0 then redis.call('SETRANGE', ring, start, string.sub(marks, 1, first)) end
  if first < #marks then redis.call('SETRANGE', ring, 0, string.sub(marks, first + 1)) end
  for cell, c in pairs(cells) do redis.call('HINCRBY', meta, cell, c) end
  redis.call('HINCRBY', meta, META_SEEN, n)
  if mistakes > 0 then redis.call('HINCRBY', meta, COUNT_MISTAKES, mistakes) end
  local known = redis.call('HGET', series, 'last')
  local last = tonumber(known or bucket)
  if bucket > last then
    if bucket - last >= keep then
      redis.call('DEL', series)
    else
      for b = last - keep + 1, bucket - keep do
        redis.call('HDEL', series, b .. ':n', b .. ':m')
      end
    end
  end
  if bucket > last or not known then redis.call('HSET', series, 'last', bucket) end
  redis.call('HINCRBY', series, bucket .. ':n', n)
  if mistakes > 0 then redis.call('HINCRBY', series, bucket .. ':m', mistakes) end
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
end
"""

# Shared by the scripts that store or answer predictions: what each model holds pending,
# counted in bytes per creation bucket of ttl / PENDING_BUCKETS seconds, by Redis's clock.
# Hash ``pend``: field <bucket> = bytes made then and not answered yet, ``bytes`` = their
# sum, ``oldest`` = the oldest bucket held. Every key made in bucket b is gone by
# (b + 1) * width + ttl; a bucket is dropped then (a rescan, at most once per bucket width).
_PENDING = """
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function pending_width(ttl) return math.max(1, math.ceil(ttl / PENDING_BUCKETS)) end
local function pending_held(pend, ttl, now)
  local width = pending_width(ttl)
  local st = redis.call('HMGET', pend, 'bytes', 'oldest')
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
      redis.call('HSET', pend, 'bytes', bytes, 'oldest', oldest)
    else
      redis.call('DEL', pend)
    end
  end
  return math.max(0, bytes), oldest, width
end
local function pending_size(key, record) return #key + #record + PENDING_OVERHEAD end
"""

# KEYS = meta, snap, log, pend, pending_1 .. pending_n  /  ARGV[1] = epoch, ARGV[2] = version
# the predictions used, ARGV[3] = seen count they used ('' when it does not matter), ARGV[4]
# = '1' to store whatever the version, ARGV[5] = ttl seconds, ARGV[6] = largest squared
# feature norm among them, ARGV[7] = most bytes the model may hold pending (0: no limit),
# ARGV[7 + i] = pending record i
# returns {1} stored, the sync reply with status 0 when the copy was stale, -1, -2, -5, or
# {-6, seconds until some pending bytes lapse, bytes held, bytes of these predictions}
PREDICT = (
    _CONSTANTS
    + _SYNC
    + _PENDING
    + """
local st = redis.call('HMGET', KEYS[1], META_EPOCH, META_VERSION, META_SEEN, META_R2)
if not st[1] then return {NO_MODEL} end
if st[1] ~= ARGV[1] then return {STALE_EPOCH} end
local why = lost(KEYS[1], KEYS[2], KEYS[3])  -- never serve weights the store no longer has
if why then return {STATE_LOST, why} end
if ARGV[4] ~= '1' and (st[2] ~= ARGV[2] or (ARGV[3] ~= '' and st[3] ~= ARGV[3])) then
  local reply = sync(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
  if reply[1] == DONE then reply[1] = STALE_COPY end
  return reply
end
local ttl, cap, now = tonumber(ARGV[5]), tonumber(ARGV[7]), clock()
local held, oldest, width = pending_held(KEYS[4], ttl, now)
local size = 0
for i = 5, #KEYS do size = size + pending_size(KEYS[i], ARGV[i + 3]) end
if cap > 0 and held + size > cap then
  local wait = ttl
  if oldest then wait = math.ceil((oldest + 1) * width + ttl - now) end
  return {PENDING_FULL, math.max(1, wait), held, size}
end
for i = 5, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 3], 'EX', ttl)
end
local bucket = math.floor(now / width)
redis.call('HINCRBY', KEYS[4], bucket, size)
redis.call('HINCRBY', KEYS[4], 'bytes', size)
if not oldest then redis.call('HSET', KEYS[4], 'oldest', bucket) end
redis.call('HINCRBY', KEYS[1], COUNT_PREDICTIONS, #KEYS - 4)
if tonumber(ARGV[6]) > tonumber(st[4] or 0) then redis.call('HSET', KEYS[1], META_R2, ARGV[6]) end
return {DONE}
"""
)

# KEYS = meta, log, series, ring, recent, pend, curve, hold, pending_1 .. pending_n  /
# ARGV[1] = epoch of the caller's config, ARGV[2] = number of classes, ARGV[3] = time bucket,
# ARGV[4] = buckets kept, ARGV[5] = the model's feedback ttl, ARGV[5 + i] = true class index
# of prediction i (-1: a label that is none of the model's classes, answered BAD_LABEL if the
# prediction is the model's, else UNKNOWN: a prediction of a model deleted and made anew is
# not found, whatever its label). While the model's writer holds it (LEARN), nothing is
# applied: {-8, ms left}.
# An answer is kept ttl seconds after it was given, so that the same feedback
# sent again within that time is a duplicate; its prediction's bytes no longer count as
# pending.
# returns {-1} or {-2} for the whole call, else {version, log length, then per prediction:
# status (1 applied, 2 duplicate, -3 unknown or expired, -4 conflict, -9 bad label), mistake,
# updated, version (for -4: the class index given before)}
FEEDBACK = (
    _CONSTANTS
    + _RECORD
    + _PENDING
    + """
local st = redis.call('HMGET', KEYS[1], META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION)
local epoch = st[1]
if not epoch then return {NO_MODEL} end
if epoch ~= ARGV[1] then return {STALE_EPOCH} end
local held = redis.call('PTTL', KEYS[8])
if held > 0 then
  redis.call('INCR', KEYS[8])  -- one more waiting: the commit that lets go wakes each
  return {HELD, held}
end
if redis.call('LLEN', KEYS[2]) ~= tonumber(st[2]) - tonumber(st[4]) then
  return {STATE_LOST, 'its update log is incomplete'}  -- never extend a log that lost entries
end
local version, seen = tonumber(st[2]), tonumber(st[3])
local out, entries, marks, cells, recent = {}, {}, {}, {}, {}
local mistakes, n = 0, 0
local function answer(status, m, u, v)
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = status, m, u, v
  n = n + 4
end
local unknown, dups, conflicts = 0, 0, 0
local ttl, now, answered = tonumber(ARGV[5]), nil, {}
for i = 9, #KEYS do
  local t = ARGV[i - 3]
  local p = redis.call('GET', KEYS[i])
  if not p or string.sub(p, EPOCH_AT, EPOCH_END) ~= epoch then
    unknown = unknown + 1
    answer(UNKNOWN, 0, 0, 0)
  elseif t == '-1' then
    answer(BAD_LABEL, 0, 0, 0)
  elseif string.sub(p, 1, 1) == ANSWERED then
    local _, _, prev, m, u, v = string.find(p, '^A[^|]*|(%d+)|(%d)|(%d)|(%d+)$')
    if prev ~= t then
      conflicts = conflicts + 1
      answer(CONFLICT, 0, 0, tonumber(prev))
    else
      dups = dups + 1
      answer(DUPLICATE, tonumber(m), tonumber(u), tonumber(v))
    end
  else
    local served = tonumber(string.sub(p, SERVED_AT, SERVED_END))
    local ti = tonumber(t)
    local updated = (string.sub(p, BITMAP_AT + ti, BITMAP_AT + ti) == '1') and 1 or 0
    seen = seen + 1
    local entry = string.format('%d|%s|', seen, t) .. p
    recent[#recent + 1] = entry
    if updated == 1 then
      version = version + 1
      entries[#entries + 1] = entry
    end
    local m = (served ~= ti) and 1 or 0
    marks[#marks + 1] = (m == 1) and '1' or '0'
    mistakes = mistakes + m
    local cell = 'cm:' .. served .. ':' .. t
    cells[cell] = (cells[cell] or 0) + 1
    now = now or clock()
    local made = now - ttl + redis.call('PTTL', KEYS[i]) / 1000
    local b = math.floor(made / pending_width(ttl))
    answered[b] = (answered[b] or 0) + pending_size(KEYS[i], p)
    redis.call('SET', KEYS[i],
      ANSWERED .. epoch .. '|' .. t .. '|' .. m .. '|' .. updated .. '|' .. version, 'EX', ttl)
    answer(DONE, m, updated, version)
  end
end
-- Answered predictions no longer count as pending: their bytes leave their buckets.
for b, size in pairs(answered) do
  local held = tonumber(redis.call('HGET', KEYS[6], b))
  if held then
    if held <= size then
      redis.call('HDEL', KEYS[6], b)
    else
      redis.call('HSET', KEYS[6], b, held - size)
    end
    redis.call('HINCRBY', KEYS[6], 'bytes', -math.min(held, size))
  end
end
if unknown > 0 then redis.call('HINCRBY', KEYS[1], COUNT_UNKNOWN_FEEDBACK, unknown) end
if dups > 0 then redis.call('HINCRBY', KEYS[1], COUNT_DUPLICATES, dups) end
if conflicts > 0 then redis.call('HINCRBY', KEYS[1], COUNT_CONFLICTS, conflicts) end
if #marks > 0 then
  record(KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[7], tonumber(ARGV[3]), tonumber(ARGV[4]),
    seen - #marks, #marks, table.concat(marks), mistakes, cells, recent)
  redis.call('HINCRBY', KEYS[1], COUNT_FEEDBACK, #marks)
end
local log_length = -1
for i = 1, #entries, UNPACK_CHUNK do
  local upto = math.min(i + UNPACK_CHUNK - 1, #entries)
  log_length = redis.call('RPUSH', KEYS[2], unpack(entries, i, upto))
end
if #entries > 0 then redis.call('HSET', KEYS[1], META_VERSION, version) end
table.insert(out, 1, log_length)
table.insert(out, 1, version)
return out
"""
)

# KEYS = meta, snap, log, series, ring, recent, curve  /  ARGV[1] = epoch, ARGV[2] = version
# used, ARGV[3] = seen used ('' when it does not matter), ARGV[4] = time bucket, ARGV[5] =
# buckets kept, ARGV[6] = largest squared feature norm, ARGV[7] = examples n, ARGV[8] =
# mistakes, ARGV[9] = marks ('0'/'1' per example, all n of them), ARGV[10] = number c of
# confusion cells, then c (field, count) pairs, then the number u of updates and their log
# entries, then the recent examples' entries (oldest first). The caller formats the entries.
# The writer of a model (``HANDOFF`` below) also passes KEYS[8] = hold, KEYS[9] = taken,
# KEYS[10] = reqs, KEYS[11] = writer (the lease), KEYS[12] = wake and, for each handed-off
# request of the commit, its answer key as KEYS[13...]; and, after the recent examples, its id
# and the lease's ms, then each such request's (token, answer) as the last ARGV pairs. Only the
# lease's holder commits (else {NOT_WRITER}, nothing written), and each commit renews the
# lease. The commit learns each handed-off request only if it still waits for this commit,
# takes it off the queue's keys and pushes its answer, all at once, so a request is learned
# once and answered, or not learned, whatever worker dies or lease lapses. And a writer's
# commit that finds the model moved (by feedback) holds it: no feedback is applied until the
# writer's next commit, which is then sure to find its copy current once caught up (or until
# HOLD_MS pass, should the writer die). The hold counts the feedback calls that found it (one
# each, after its own 1); the commit that lets go pushes as many wake-ups to ``wake``.
# returns {1, version, seen, log length}, the sync reply with status 0 when stale, -1 or -2,
# -5, {-7, tokens} naming the handed-off requests that no longer wait, or {-10} (nothing
# written with these last two)
LEARN = (
    _CONSTANTS
    + _SYNC
    + _RECORD
    + _ANSWER
    + """
local st = redis.call('HMGET', KEYS[1], META_EPOCH, META_VERSION, META_SEEN, META_R2)
if not st[1] then return {NO_MODEL} end
if st[1] ~= ARGV[1] then return {STALE_EPOCH} end
local writer = #KEYS >= 12
local answers = writer and #KEYS - 12 or 0
local last = #ARGV - 2 * answers
-- (the lease is renewed after the commit's first write: a script's first write is the one
-- refused when Redis is full, and a renewal is not refused, so it must not come first)
if writer and redis.call('GET', KEYS[11]) ~= ARGV[last - 1] then return {NOT_WRITER} end
if st[2] ~= ARGV[2] or (ARGV[3] ~= '' and st[3] ~= ARGV[3]) then
  local reply = sync(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
  if reply[1] == DONE then
    reply[1] = STALE_COPY
    if writer then
      local waiting = redis.call('GET', KEYS[8]) or '1'
      redis.call('SET', KEYS[8], waiting, 'PX', HOLD_MS)
      redis.call('PEXPIRE', KEYS[11], ARGV[last])
    end
  end
  return reply
end
local why = lost(KEYS[1], KEYS[2], KEYS[3])  -- never extend a log that lost entries
if why then return {STATE_LOST, why} end
if answers > 0 then
  local gone = {}
  for a = 1, answers do
    local token = ARGV[last + 2 * a - 1]
    if redis.call('SISMEMBER', KEYS[9], token) == 0 or redis.call('HEXISTS', KEYS[10], token) == 0
    then gone[#gone + 1] = token end
  end
  if #gone > 0 then return {REQUESTS_GONE, unpack(gone)} end
end
local seen, version = tonumber(st[3]), tonumber(st[2])
local n, mistakes = tonumber(ARGV[7]), tonumber(ARGV[8])
local cells, i = {}, 11
for _ = 1, tonumber(ARGV[10]) do
  cells[ARGV[i]] = tonumber(ARGV[i + 1])
  i = i + 2
end
local updates = tonumber(ARGV[i])
local first = i + 1
local recent = {}
for j = first + updates, writer and last - 2 or last do recent[#recent + 1] = ARGV[j] end
record(KEYS[1], KEYS[4], KEYS[5], KEYS[6], KEYS[7], tonumber(ARGV[4]), tonumber(ARGV[5]),
  seen, n, ARGV[9], mistakes, cells, recent)
redis.call('HINCRBY', KEYS[1], COUNT_LEARNED, n)
local log_length, stop = -1, first + updates - 1
for j = first, stop, UNPACK_CHUNK do
  local upto = math.min(j + UNPACK_CHUNK - 1, stop)
  log_length = redis.call('RPUSH', KEYS[3], unpack(ARGV, j, upto))
end
if updates > 0 then version = redis.call('HINCRBY', KEYS[1], META_VERSION, updates) end
if tonumber(ARGV[6]) > tonumber(st[4] or 0) then redis.call('HSET', KEYS[1], META_R2, ARGV[6]) end
for a = 1, answers do
  answer(KEYS[9], KEYS[10], KEYS[12 + a], ARGV[last + 2 * a - 1], ARGV[last + 2 * a])
end
if writer then
  redis.call('PEXPIRE', KEYS[11], ARGV[last])
  local waiting = tonumber(redis.call('GET', KEYS[8]) or 1) - 1
  redis.call('DEL', KEYS[8])
  if waiting > 0 then
    for i = 1, waiting, UNPACK_CHUNK do
      local n = math.min(UNPACK_CHUNK, waiting - i + 1)
      local ones = {}
      for j = 1, n do ones[j] = '1' end
      redis.call('RPUSH', KEYS[12], unpack(ones))
    end
    redis.call('PEXPIRE', KEYS[12], HOLD_MS)
  end
end
return {DONE, version, seen + n, log_length}
"""
)

# KEYS = meta, snap, log, series, ring, recent, curve (, registry)  /  ARGV[1] = config JSON,
# ARGV[2] = new epoch, ARGV[3] = created, ARGV[4] = version, ARGV[5] = seen, ARGV[6] = packed
# weights at that version ('' for zeros), ARGV[7] = name, then counter field / value pairs,
# then '1' when the registry is the last key
# returns 1; the model's pending predictions become unknown (the epoch changed), though their
# keys, and so their count in ``pend``, stay until they expire
REPLACE = (
    _CONSTANTS
    + _REGISTER
    + """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
redis.call('HSET', KEYS[1], META_CONFIG, ARGV[1], META_EPOCH, ARGV[2], META_CREATED, ARGV[3],
  META_VERSION, ARGV[4], META_SEEN, ARGV[5], META_SNAP_VERSION, ARGV[4], META_SNAP_LENGTH, #ARGV[6])
for i = 8, #ARGV - 2, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if ARGV[6] ~= '' then redis.call('SET', KEYS[2], ARGV[6]) end
register(ARGV[7])
return 1
"""
)

# KEYS = pending predictions of one model  /  ARGV[1] = the epoch of a model deleted
# deletes those of that epoch (answered or not), not those of a model made anew since under
# the same name; returns how many
PURGE = (
    _CONSTANTS
    + """
local gone = 0
for i = 1, #KEYS do
  if redis.call('GETRANGE', KEYS[i], EPOCH_AT - 1, EPOCH_END - 1) == ARGV[1] then
    gone = gone + redis.call('DEL', KEYS[i])
  end
end
return gone
"""
)

# KEYS = meta, snap, log  /  ARGV[1] = epoch, ARGV[2] = version V of the snapshot,
# ARGV[3] = packed weights at V
# returns 1 when the snapshot replaced the log up to V, 0 when it was not newer
COMPACT = (
    _CONSTANTS
    + """
local st = redis.call('HMGET', KEYS[1], META_EPOCH, META_VERSION, META_SNAP_VERSION)
if st[1] ~= ARGV[1] then return 0 end
local v, snapv = tonumber(ARGV[2]), tonumber(st[3])
if v <= snapv or v > tonumber(st[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('LTRIM', KEYS[3], v - snapv, -1)
redis.call('HSET', KEYS[1], META_SNAP_VERSION, v, META_SNAP_LENGTH, #ARGV[3])
return 1
"""
)


# KEYS = writer, learns, taken, reqs, answer  /  ARGV[1] = this worker's id, ARGV[2] = lease
# ms, ARGV[3] = request token, ARGV[4] = request, ARGV[5] = ms the queue's keys must live for
# it (to its deadline, and a lease more), ARGV[6] = the answer that says it was not queued
# returns 1 when the caller holds, or just took, the lease (it learns the request itself;
# nothing queued, and the answer key says so twice: once for the wait sent with this script,
# which takes it at once, and once for a requester whose reply was lost, whose WITHDRAW then
# finds it never queued, not learned), 0 when the request was queued for the writer
HANDOFF = (
    _CONSTANTS
    + _ACQUIRE
    + """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])
  redis.call('RPUSH', KEYS[2], ARGV[3])
  keep(KEYS[4], tonumber(ARGV[5]))
  keep(KEYS[2], tonumber(ARGV[5]))
  return 0
end
if not holder then acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]) end
redis.call('RPUSH', KEYS[5], ARGV[6], ARGV[6])
redis.call('EXPIRE', KEYS[5], ANSWER_TTL_S)
redis.call('PEXPIRE', KEYS[1], ARGV[2])  -- (its holder's: renewed for its commit)
return 1
"""
)

# KEYS = writer, learns, taken  /  ARGV[1] = this worker's id, ARGV[2] = lease ms
# returns 0 when the caller took the lease (no worker held it), else the ms the holder's has
# left (1 when it has no limit)
CLAIM = (
    _CONSTANTS
    + _ACQUIRE
    + """
local left = redis.call('PTTL', KEYS[1])
if left ~= -2 then return math.max(left, 1) end
acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return 0
"""
)

# KEYS = writer, learns, taken, reqs  /  ARGV[1] = this worker's id, ARGV[2] = lease ms,
# ARGV[3] = most requests to take
# returns {1, requests...} and renews the lease while the caller holds it (or takes it when
# free); {0} when another worker holds it
TAKE = (
    _CONSTANTS
    + _ACQUIRE
    + """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {0} end
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
end
local taken = {1}
local tokens = redis.call('LPOP', KEYS[2], tonumber(ARGV[3]))
if not tokens then return taken end
for _, token in ipairs(tokens) do
  local data = redis.call('HGET', KEYS[4], token)
  if data then  -- else withdrawn by its requester
    redis.call('SADD', KEYS[3], token)
    taken[#taken + 1] = data
  end
end
keep(KEYS[3], redis.call('PTTL', KEYS[4]))
return taken
"""
)

# KEYS = writer, learns, taken  /  ARGV[1] = this worker's id, ARGV[2] = '1' to give it up even
# with requests waiting (the worker stops: what it took goes back to the queue)
# gives the lease up unless requests are waiting or taken; returns 1 when given up, 0 when kept
RELEASE = (
    _CONSTANTS
    + _ACQUIRE
    + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 1 end
if ARGV[2] ~= '1' and (redis.call('LLEN', KEYS[2]) > 0 or redis.call('SCARD', KEYS[3]) > 0) then
  return 0
end
give_back(KEYS[2], KEYS[3])
redis.call('DEL', KEYS[1])
return 1
"""
)

# KEYS = taken, reqs, answer  /  ARGV[1] = token, ARGV[2] = the answer
# answers a request the writer took without learning it (an error, or its requester gave up);
# returns 1, or 0 when it no longer waited (learned meanwhile, or withdrawn)
REFUSE = (
    _CONSTANTS
    + _ANSWER
    + """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
answer(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return 1
"""
)

# KEYS = learns, taken, reqs, answer, meta  /  ARGV[1] = token, ARGV[2] = the epoch of the model
# the request was made for
# the requester gives up: returns {0} when the request was not learned (and now never will
# be), {1, answer} when it was, or was answered with an error, meanwhile, {3} when it left the
# queue with its model (deleted or replaced: an answer outlives both, so it was not learned),
# and {2} when it left the queue with no answer to be found (a volatile-* policy evicted its
# answer, or a queue key that held it): learned or not, nobody can tell
WITHDRAW = (
    _CONSTANTS
    + """
if redis.call('HDEL', KEYS[3], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  redis.call('SREM', KEYS[2], ARGV[1])
  return {0}
end
local a = redis.call('LPOP', KEYS[4])
if a then return {1, a} end
if redis.call('HGET', KEYS[5], META_EPOCH) ~= ARGV[2] then return {3} end
return {2}
"""
)
