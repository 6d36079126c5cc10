-- wrk script: optional POST body from the environment, and a JSON summary line at the end.
-- Environment: CQ_WRK_METHOD (GET or POST), CQ_WRK_BODY_FILE (a JSON file for POST).
local method = os.getenv("CQ_WRK_METHOD") or "GET"
wrk.method = method
if method == "POST" then
  local f = assert(io.open(os.getenv("CQ_WRK_BODY_FILE"), "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/json"
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
