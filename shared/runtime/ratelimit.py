"""Provider rate limits for readbacks: one token bucket per connection.

A readback asks its bucket for a token and is told how long to wait; it waits that long and
then reads, it never fails because of the limit. Taking a token is a *reservation*: when the
bucket is empty the caller still takes one (the level goes negative) and is told to wait until
it would have refilled, so concurrent callers queue in arrival order with one round trip each.

- :class:`RedisTokenBucket` keeps the buckets in Redis (one hash per key, updated by one Lua
  script, atomic across every worker process, using the Redis server's clock);
- :class:`LocalTokenBucket` keeps them in this process, for the embedded default with no Redis.

``bucket_for(settings)`` picks one from ``PROVELY_REDIS_URL``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol

from shared.runtime.settings import Settings

__all__ = [
    "LocalTokenBucket",
    "RateLimiter",
    "RedisTokenBucket",
    "bucket_for",
    "wait_for_token",
]

_KEY_PREFIX = "provely:rl:"

# KEYS[1] bucket key; ARGV[1] rate (tokens/s); ARGV[2] burst (bucket size).
# Returns the seconds to wait (as a string: Lua numbers become integers in replies).
_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local data = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(data[1])
local ts = tonumber(data[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
tokens = tokens - 1
local wait = 0
if tokens < 0 then
  wait = -tokens / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + wait) * 1000) + 1000)
return tostring(wait)
"""


class RateLimiter(Protocol):
    def reserve(self, key: str, *, rate_per_s: float, burst: float | None = None) -> float:
        """Take one token from ``key``'s bucket; return the seconds to wait before using it."""
        ...


def _burst(rate_per_s: float, burst: float | None) -> float:
    if rate_per_s <= 0:
        raise ValueError("rate_per_s must be positive")
    return max(1.0, burst if burst is not None else rate_per_s)


class RedisTokenBucket:
    """Token buckets shared by every process through Redis."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._script = client.register_script(_LUA)

    def reserve(self, key: str, *, rate_per_s: float, burst: float | None = None) -> float:
        size = _burst(rate_per_s, burst)
        reply = self._script(keys=[_KEY_PREFIX + key], args=[repr(rate_per_s), repr(size)])
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        return max(0.0, float(text))


class LocalTokenBucket:
    """Token buckets of this process only (embedded default, tests of the pure logic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def reserve(self, key: str, *, rate_per_s: float, burst: float | None = None) -> float:
        size = _burst(rate_per_s, burst)
        with self._lock:
            now = self._clock()
            tokens, ts = self._buckets.get(key, (size, now))
            tokens = min(size, tokens + max(0.0, now - ts) * rate_per_s) - 1
            self._buckets[key] = (tokens, now)
        return -tokens / rate_per_s if tokens < 0 else 0.0


def wait_for_token(
    limiter: RateLimiter,
    key: str,
    *,
    rate_per_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Reserve a token and sleep until it is usable; return the seconds waited."""
    wait = limiter.reserve(key, rate_per_s=rate_per_s)
    if wait > 0:
        sleep(wait)
    return wait


@lru_cache(maxsize=8)
def _redis_bucket(url: str) -> RedisTokenBucket:
    import redis

    return RedisTokenBucket(redis.Redis.from_url(url, socket_timeout=5))


_LOCAL = LocalTokenBucket()


def bucket_for(settings: Settings) -> RateLimiter:
    """The shared Redis buckets when ``PROVELY_REDIS_URL`` is set, else this process's own."""
    if settings.redis_url:
        return _redis_bucket(settings.redis_url)
    return _LOCAL
