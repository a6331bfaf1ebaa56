"""Lua scripts: every change to a model happens inside one of them, atomically.

Per model (all keys share the hash tag ``{name}``, so a script may touch them all):
``meta`` (hash: config, epoch, counters), ``snap`` (string: packed weights at version
``snapv``), ``log`` (list: update entries for versions ``snapv+1 .. version``) and one
``pending`` string per prediction awaiting its label.

A pending prediction is ``"P" .. epoch(16) .. served(4 digits) .. bitmap .. payload`` where
``bitmap`` holds one ``0``/``1`` per class: whether learning that class updates the weights.
Once answered it becomes ``"A" .. epoch .. "|" .. t .. "|" .. mistake .. "|" .. updated ..
"|" .. version``. Status codes: 1 done, 2 duplicate, 0 stale copy (sync data follows),
-1 no such model, -2 the caller's model epoch is stale, -3 unknown or expired prediction,
-4 conflicting feedback.
"""

# Shared by the scripts that answer with the entries a worker's copy lacks.
# returns {1, epoch, version, seen, base, has_snapshot, snapshot, entries}
_SYNC = """
local function sync(meta, snap, log, from)
  local st = redis.call('HMGET', meta, 'epoch', 'version', 'seen', 'snapv')
  local snapv = tonumber(st[4])
  local has, data = 0, ''
  if from < snapv then
    has, data, from = 1, (redis.call('GET', snap) or ''), snapv
  end
  local entries = redis.call('LRANGE', log, from - snapv, -1)
  return {1, st[1], st[2], st[3], from, has, data, entries}
end
"""

# KEYS[1] = meta  /  ARGV[1] = config JSON, ARGV[2] = epoch, ARGV[3] = created (unix s)
# returns {1} when created, {0, existing config JSON} when the name is taken
CREATE = """
local cfg = redis.call('HGET', KEYS[1], 'cfg')
if cfg then return {0, cfg} end
redis.call('HSET', KEYS[1], 'cfg', ARGV[1], 'epoch', ARGV[2], 'created', ARGV[3],
  'version', 0, 'seen', 0, 'snapv', 0)
return {1}
"""

# KEYS = meta, snap, log  /  ARGV[1] = version the caller holds (-1 for none)
# returns -1 without the model, else the sync reply
SYNC = (
    _SYNC
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
return sync(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))
"""
)

# KEYS = meta, snap, log, pending  /  ARGV[1] = epoch, ARGV[2] = version the prediction used,
# ARGV[3] = seen count it used ('' when it does not matter), ARGV[4] = '1' to store whatever
# the version, ARGV[5] = pending record, ARGV[6] = ttl seconds
# returns {1} stored, the sync reply with status 0 when the copy was stale, -1 or -2
PREDICT = (
    _SYNC
    + """
local st = redis.call('HMGET', KEYS[1], 'epoch', 'version', 'seen')
if not st[1] then return {-1} end
if st[1] ~= ARGV[1] then return {-2} end
if ARGV[4] ~= '1' and (st[2] ~= ARGV[2] or (ARGV[3] ~= '' and st[3] ~= ARGV[3])) then
  local reply = sync(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
  reply[1] = 0
  return reply
end
redis.call('SET', KEYS[4], ARGV[5], 'EX', ARGV[6])
redis.call('HINCRBY', KEYS[1], 'predictions', 1)
return {1}
"""
)

# KEYS = meta, log, pending  /  ARGV[1] = epoch of the caller's config, ARGV[2] = true class
# index, ARGV[3] = number of classes
# returns {1 or 2, mistake, updated, version, log length} or {-1..-4, previous label index}
FEEDBACK = """
local p = redis.call('GET', KEYS[3])
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then return {-1} end
if not p or string.sub(p, 2, 17) ~= epoch then
  redis.call('HINCRBY', KEYS[1], 'unknown_feedback', 1)
  return {-3}
end
if epoch ~= ARGV[1] then return {-2} end
local t = ARGV[2]
if string.sub(p, 1, 1) == 'A' then
  local _, _, prev, m, u, v = string.find(p, '^A[^|]*|(%d+)|(%d)|(%d)|(%d+)$')
  if prev ~= t then
    redis.call('HINCRBY', KEYS[1], 'conflicts', 1)
    return {-4, tonumber(prev)}
  end
  redis.call('HINCRBY', KEYS[1], 'duplicates', 1)
  return {2, tonumber(m), tonumber(u), tonumber(v), redis.call('LLEN', KEYS[2])}
end
local served = tonumber(string.sub(p, 18, 21))
local k = tonumber(ARGV[3])
local ti = tonumber(t)
local mistake = (served ~= ti) and 1 or 0
local updated = (string.sub(p, 22 + ti, 22 + ti) == '1') and 1 or 0
local seen = redis.call('HINCRBY', KEYS[1], 'seen', 1)
redis.call('HINCRBY', KEYS[1], 'feedback', 1)
redis.call('HINCRBY', KEYS[1], 'mistakes', mistake)
redis.call('HINCRBY', KEYS[1], 'cm:' .. served .. ':' .. t, 1)
local version
if updated == 1 then
  version = redis.call('HINCRBY', KEYS[1], 'version', 1)
  redis.call('RPUSH', KEYS[2], string.format('%d|%s|', seen, t) .. string.sub(p, 22 + k))
else
  version = tonumber(redis.call('HGET', KEYS[1], 'version'))
end
redis.call('SET', KEYS[3],
  'A' .. epoch .. '|' .. t .. '|' .. mistake .. '|' .. updated .. '|' .. version, 'KEEPTTL')
return {1, mistake, updated, version, redis.call('LLEN', KEYS[2])}
"""

# KEYS = meta, snap, log  /  ARGV[1] = epoch, ARGV[2] = version used, ARGV[3] = seen used
# ('' when it does not matter), ARGV[4] = true class index, ARGV[5] = served class index,
# ARGV[6] = '1' when the example updates the weights, ARGV[7] = payload
# returns {1, version, seen, log length}, the sync reply with status 0 when stale, -1 or -2
LEARN = (
    _SYNC
    + """
local st = redis.call('HMGET', KEYS[1], 'epoch', 'version', 'seen')
if not st[1] then return {-1} end
if st[1] ~= ARGV[1] then return {-2} end
if st[2] ~= ARGV[2] or (ARGV[3] ~= '' and st[3] ~= ARGV[3]) then
  local reply = sync(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
  reply[1] = 0
  return reply
end
local seen = redis.call('HINCRBY', KEYS[1], 'seen', 1)
redis.call('HINCRBY', KEYS[1], 'learned', 1)
if ARGV[4] ~= ARGV[5] then redis.call('HINCRBY', KEYS[1], 'mistakes', 1) end
redis.call('HINCRBY', KEYS[1], 'cm:' .. ARGV[5] .. ':' .. ARGV[4], 1)
local version = tonumber(st[2])
if ARGV[6] == '1' then
  version = redis.call('HINCRBY', KEYS[1], 'version', 1)
  redis.call('RPUSH', KEYS[3], string.format('%d|%s|', seen, ARGV[4]) .. ARGV[7])
end
return {1, version, seen, redis.call('LLEN', KEYS[3])}
"""
)

# KEYS = meta, snap, log  /  ARGV[1] = epoch, ARGV[2] = version V of the snapshot,
# ARGV[3] = packed weights at V
# returns 1 when the snapshot replaced the log up to V, 0 when it was not newer
COMPACT = """
local st = redis.call('HMGET', KEYS[1], 'epoch', 'version', 'snapv')
if st[1] ~= ARGV[1] then return 0 end
local v, snapv = tonumber(ARGV[2]), tonumber(st[3])
if v <= snapv or v > tonumber(st[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('LTRIM', KEYS[3], v - snapv, -1)
redis.call('HSET', KEYS[1], 'snapv', v)
return 1
"""
