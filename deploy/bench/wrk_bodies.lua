-- wrk script: POST JSON bodies read from a file, one body per line.
--
--   wrk -t2 -c64 -d5s -s wrk_bodies.lua http://127.0.0.1:8000/predict -- FILE [cycle|once] [KEY]
--
-- FILE may contain "%d": each wrk thread then reads its own file (%d = thread index 0..t-1),
-- which is how /feedback gets a distinct fresh prediction_id per request.
-- cycle: go round the bodies (each thread starts at another offset).
-- once: send each body once; when a thread runs out it sends a body the service answers
--       with 404, so that running out shows as non-2xx responses instead of duplicates.
-- KEY: an API key, sent as "Authorization: Bearer KEY".
-- WRK_PAUSE_MS (environment): each connection waits this many ms after an answer before its
--       next request, so that the load is about connections / (pause + latency) requests a
--       second, not as many as the service can answer (unset or 0: no pause, and wrk's
--       loop is the same as without this script's delay).
-- Responses other than 200 are counted by status.
-- done() prints one line "BENCH {json}" with the counts and latency percentiles (us).

local counter = 0
local threads = {}

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  threads[#threads + 1] = thread
end

function init(args)
  local path = args[1]
  mode = args[2] or "cycle"
  local file = string.gsub(path, "%%d", tostring(tid))
  local headers = { ["Content-Type"] = "application/json" }
  if args[3] and #args[3] > 0 then
    headers["Authorization"] = "Bearer " .. args[3]
  end
  reqs = {}
  for line in io.lines(file) do
    if #line > 0 then
      reqs[#reqs + 1] = wrk.format("POST", nil, headers, line)
    end
  end
  exhausted = wrk.format("POST", nil, headers,
    '{"prediction_id":"exhausted:AAAAAAAAAAAAAAAAAAAA","label":1}')
  statuses = {}
  n = #reqs
  i = 0
  if mode == "cycle" and n > 0 then
    i = (tid * 7919) % n
  end
end

function request()
  i = i + 1
  if i > n then
    if mode == "once" then
      return exhausted
    end
    i = 1
  end
  return reqs[i]
end

local pause = tonumber(os.getenv("WRK_PAUSE_MS") or "0") or 0
if pause > 0 then
  function delay()
    return pause
  end
end

function response(status, headers, body)
  if status ~= 200 then
    statuses[status] = (statuses[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  local counts = {}
  for _, t in ipairs(threads) do
    for status, k in pairs(t:get("statuses") or {}) do
      counts[status] = (counts[status] or 0) + k
    end
  end
  local parts = {}
  for status, k in pairs(counts) do
    parts[#parts + 1] = string.format('"%d":%d', status, k)
  end
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"bytes":%d,"status_errors":%d,' ..
    '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,"statuses":{%s}}\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read,
    e.write, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean, table.concat(parts, ",")))
end
