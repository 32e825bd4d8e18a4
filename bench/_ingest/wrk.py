"""The load tool: ``wrk`` with a Lua script that rotates pre-generated signed bodies (closed loop,
or paced on a schedule), and the figures read from its output."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LUA", "WrkResult", "run_wrk"]

LUA = r"""
-- A wall clock for the paced runs' schedule (LuaJIT's FFI: wrk's scripts have no other).
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk_id, bench_timespec *tp);
]]
local clock = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, clock)  -- CLOCK_MONOTONIC
  return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end

local bodies, sigs = {}, {}
local counter = 0
local next_id = 0
local interval, slot = 0, 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

-- Each thread loads only its own file of bodies (``<prefix>.<thread>``): wrk starts a thread
-- as soon as its init has run, so the first thread sends while the next one loads; smaller
-- files keep that head start short.
function init(args)
  local f = assert(io.open(args[1] .. "." .. tid, "r"))
  while true do
    local sig = f:read("*l")
    if not sig then break end
    local body = f:read("*l")
    table.insert(sigs, sig)
    table.insert(bodies, body)
  end
  f:close()
  interval = tonumber(args[2] or "0")
end

-- Paced runs (``interval`` > 0, in ms): the thread's requests start on a schedule, one per
-- interval; a connection whose response came waits for the next free start (a late one starts
-- at once, and the schedule goes on from there: the rate reached says if it kept up).
function delay()
  if interval <= 0 then return 0 end
  local now = now_ms()
  slot = math.max(slot + interval, now)
  return math.floor(slot - now + 0.5)
end

function request()
  local i = (counter % #bodies) + 1
  counter = counter + 1
  return wrk.format("POST", nil,
    {["Stripe-Signature"] = sigs[i], ["Content-Type"] = "application/json"}, bodies[i])
end
"""


@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(
    url: str,
    script: Path,
    bodies: Path,
    *,
    threads: int,
    connections: int,
    duration: int,
    interval_ms: float = 0,
) -> WrkResult:
    """wrk; each thread sends the bodies of its file in turn (``signed_bodies`` with as many
    ``threads``); with ``interval_ms`` it starts a request every that many ms (paced: its
    connections wait for their turn, see ``LUA``)."""
    out = subprocess.run(
        [
            "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency",
            "-s", str(script), url, "--", str(bodies), str(interval_ms),
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return WrkResult(rps, p50, p99, total, int(bad.group(1)) if bad else 0)
