"""The drift detectors in Lua, for the scripts that count a learner's mistakes: the same
floating-point operations, in the same order, as ``learner/drift_detectors.py`` (River's), so
that a model's detector decides alike whichever script or worker feeds it.

``drift_feed(spec, state, marks)``: the detector ``spec`` names (``"ddm <warm_start>
<warning_threshold> <drift_threshold>"`` or ``"eddm <warm_start> <alpha> <beta>"``, its numbers
as ``%.17g``) fed ``marks`` ('1' a mistake, '0' not, in order) from ``state`` (its numbers as
``%.17g``, which reads back exactly, separated by spaces; '' for a fresh one); returns the new
state, so written, and the events: for each example that raised a flag, its place in ``marks``
(from 1) and ``1`` (a warning) or ``2`` (a drift), flattened.

``drift_record(meta, spec, seen, marks)``: the model's detector fed a commit's marks (the
served learner had seen ``seen`` examples before them), its state kept in the model's hash,
each event counted and kept (``Meta.DRIFT_EVENTS``, the last DRIFT_EVENTS_KEPT).
"""

DRIFT = """
local function drift_ddm(st, marks, warm, wt, dt, events)
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
  end
  return {status, n, mean, pmin, smin, psmin}
end
local function drift_eddm(st, marks, warm, alpha, beta, events)
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
  end
  return {status, n, last, errors, count, mean, sq, most, warned}
end
local function drift_feed(spec, state, marks)
  local kind, warm, a, b = string.match(spec, '^(%l+) (%S+) (%S+) (%S+)$')
  warm, a, b = tonumber(warm), tonumber(a), tonumber(b)
  local feed, size = drift_ddm, 6
  if kind == 'eddm' then feed, size = drift_eddm, 9 end
  local st = {}
  for v in string.gmatch(state, '%S+') do st[#st + 1] = tonumber(v) end
  if #st ~= size then
    st = (kind == 'ddm') and {0, 0, 0, 0, 0, math.huge} or {0, 0, 0, 0, 0, 0, 0, -1, 0}
  end
  local events = {}
  st = feed(st, marks, warm, a, b, events)
  for i = 1, size do st[i] = string.format('%.17g', st[i]) end
  return table.concat(st, ' '), events
end
local function drift_record(meta, spec, seen, marks)
  local state = redis.call('HGET', meta, META_DRIFT_STATE) or ''
  local new, events = drift_feed(spec, state, marks)
  redis.call('HSET', meta, META_DRIFT_STATE, new)
  if #events == 0 then return end
  local now = redis.call('TIME')
  local ms = string.format(' %d\\n', now[1] * 1000 + math.floor(now[2] / 1000))
  local lines = {redis.call('HGET', meta, META_DRIFT_EVENTS) or ''}
  for i = 1, #events, 2 do
    local warned = events[i + 1] == 1
    lines[#lines + 1] = string.format('%d', seen + events[i]) .. (warned and ' warning' or ' drift')
      .. ms
    redis.call('HINCRBY', meta, warned and COUNT_DRIFT_WARNINGS or COUNT_DRIFTS, 1)
  end
  local log = table.concat(lines)
  local _, held = string.gsub(log, '\\n', '')
  for _ = 1, held - DRIFT_EVENTS_KEPT do
    log = string.sub(log, string.find(log, '\\n', 1, true) + 1)
  end
  redis.call('HSET', meta, META_DRIFT_EVENTS, log)
end
"""
