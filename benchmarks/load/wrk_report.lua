-- wrk script: optional POST body from the environment, and a JSON summary line at the end.
-- Environment: CQ_WRK_METHOD (GET or POST), CQ_WRK_BODY_FILE (a JSON file for POST).
-- CQ_WRK_VARY=1: every occurrence of the token __CQ_VARY__ in the body is replaced, per
-- request, by a new random integer, so every request sends a body the server has not seen.
local method = os.getenv("CQ_WRK_METHOD") or "GET"
local vary = os.getenv("CQ_WRK_VARY") == "1"
local template = nil
wrk.method = method
if method == "POST" then
  local f = assert(io.open(os.getenv("CQ_WRK_BODY_FILE"), "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/json"
  template = wrk.body
end

if vary then
  local counter = 0
  init = function(args)
    math.randomseed(os.time())
  end
  request = function()
    counter = counter + 1
    local value = tostring(math.random(1000000, 999999999) * 1000 + counter % 1000)
    local body = string.gsub(template, "__CQ_VARY__", value)
    return wrk.format(method, nil, nil, body)
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'CQ_WRK_JSON {"requests": %d, "duration_us": %d, "connect_errors": %d, ' ..
    '"read_errors": %d, "write_errors": %d, "status_errors": %d, "timeouts": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
