"""Lua scripts of the Redis limiter (each registered once and run with EVALSHA).

Key layout (prefix `ezat:` by default; {…} are ids):

  ezat:rpm:{key}            HASH  w = current minute index, n = requests counted in it
                                  (PEXPIRE 2 min)
  ezat:org:{org}            HASH  base (available before holds), held (Σ live holds),
                                  kh:{key} (Σ live holds of one key), charged, gen, seeded_at
  ezat:org:{org}:hexp       ZSET  request id -> expiry ms (holds and settled markers)
  ezat:org:{org}:hold       HASH  request id -> "amount:key" (live hold) or "s" (settled marker)
  ezat:kmon:{key}:{YYYYMM}  HASH  spent (this month), charged, gen, seeded_at
                                  (EXPIRE a week after the month ends)
  ezat:slots:{deployment}   ZSET  request id -> lease end ms

Money amounts never go through Lua arithmetic on their way into Redis: they are passed as the
exact decimal strings from ARGV to HINCRBY (a Lua number would print as "1e+16" above 10^14).
Comparisons use Lua doubles, exact up to 2^53 nano-USD (~9 million USD) per value.

Every key a script touches is declared in KEYS, but a script touches an org's keys together with
a key's and several deployments' keys, so this layout targets one Redis (or a primary with
replicas / Sentinel), not Redis Cluster.

The time is Redis's TIME unless the caller passes `now_ms` (tests drive a fake clock), so every
gateway process agrees on minute windows and expiries whatever its own clock says.
"""

from __future__ import annotations

_PRELUDE = """
local t = redis.call('TIME')
local token = t[1] .. '.' .. t[2]
local function clock(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function release(org, value)
  local sep = string.find(value, ':', 1, true)
  local amount = string.sub(value, 1, sep - 1)
  local khf = 'kh:' .. string.sub(value, sep + 1)
  redis.call('HINCRBY', org, 'held', '-' .. amount)
  if redis.call('HINCRBY', org, khf, '-' .. amount) <= 0 then redis.call('HDEL', org, khf) end
end
"""

# KEYS: rpm, org, hexp, hold, kmon, slot...   ARGV: request id, key id, rpm limit,
# cap ("" = none), hold, hold ttl ms, reseed ms, kmon ttl s, now ms ("" = TIME), max per slot...
# Returns {status, count, reset_ms, now_ms, ...}: 1 rate limited; 4 need seed (+ bits 1 org |
# 2 key, org charged, gen, key charged, gen); 0 admitted, 2 funds, 3 capacity (+ detail: chosen
# slot index | 1 key_cap, 2 org_balance | 0, then the reseed claims: org flag, charged, gen, key
# flag, charged, gen).
ADMIT = (
    _PRELUDE
    + """
local rpm, org, hexp, holds, kmon = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local rid, kid = ARGV[1], ARGV[2]
local limit = tonumber(ARGV[3])
local cap = ARGV[4]
local hold_s = ARGV[5]
local hold = tonumber(hold_s)
local ttl = tonumber(ARGV[6])
local reseed = tonumber(ARGV[7])
local kmon_ttl = tonumber(ARGV[8])
local now = clock(ARGV[9])
local minute = math.floor(now / 60000)
local reset = (minute + 1) * 60000

local w = redis.call('HMGET', rpm, 'w', 'n')
local same = tonumber(w[1]) == minute
local count = 0
if same then count = tonumber(w[2]) or 0 end
if count >= limit then return {1, count, reset, now} end

local khf = 'kh:' .. kid
-- periodic reseed claims: {org flag, charged, gen, key flag, charged, gen}
local flags = {0, 0, '', 0, 0, ''}
local o, k
if hold > 0 then
  local expired = redis.call('ZRANGEBYSCORE', hexp, '-inf', now, 'LIMIT', 0, 256)
  for _, r in ipairs(expired) do
    local v = redis.call('HGET', holds, r)
    if v and v ~= 's' then release(org, v) end
    redis.call('HDEL', holds, r)
    redis.call('ZREM', hexp, r)
  end
  o = redis.call('HMGET', org, 'base', 'held', khf, 'charged', 'gen', 'seeded_at')
  k = {false, false, false, false}
  local need = 0
  if not o[1] then need = 1 end
  if cap ~= '' then
    k = redis.call('HMGET', kmon, 'spent', 'charged', 'gen', 'seeded_at')
    if not k[1] then need = need + 2 end
  end
  if need > 0 then
    local og, kg = '', ''
    if need % 2 == 1 then
      redis.call('HSETNX', org, 'gen', token)
      og = redis.call('HGET', org, 'gen')
    end
    if need >= 2 then
      if redis.call('HSETNX', kmon, 'gen', token) == 1 then redis.call('EXPIRE', kmon, kmon_ttl) end
      kg = redis.call('HGET', kmon, 'gen')
    end
    return {4, count, reset, now, need, tonumber(o[4]) or 0, og, tonumber(k[2]) or 0, kg}
  end
  -- Claimed whatever the outcome: an org refused for lack of money must still learn of
  -- credit granted elsewhere. seeded_at is bookkeeping, not something the request consumes.
  if now - (tonumber(o[6]) or 0) >= reseed then
    redis.call('HSET', org, 'seeded_at', now)
    flags[1], flags[2], flags[3] = 1, tonumber(o[4]) or 0, o[5] or ''
  end
  if cap ~= '' and now - (tonumber(k[4]) or 0) >= reseed then
    redis.call('HSET', kmon, 'seeded_at', now)
    flags[4], flags[5], flags[6] = 1, tonumber(k[2]) or 0, k[3] or ''
  end
  local held = tonumber(o[2]) or 0
  local kheld = tonumber(o[3]) or 0
  if cap ~= '' and tonumber(k[1]) + kheld + hold > tonumber(cap) then
    return {2, count, reset, now, 1, unpack(flags)}
  end
  if hold > tonumber(o[1]) - held then return {2, count, reset, now, 2, unpack(flags)} end
end

local chosen = 0
for i = 6, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) < tonumber(ARGV[i + 4]) then
    chosen = i - 5
    break
  end
end
if #KEYS > 5 and chosen == 0 then return {3, count, reset, now, 0, unpack(flags)} end

-- everything passed: commit rate, hold and slot together
if same then
  redis.call('HINCRBY', rpm, 'n', 1)
else
  redis.call('HSET', rpm, 'w', minute, 'n', 1)
end
redis.call('PEXPIRE', rpm, 120000)
if hold > 0 then
  local prev = redis.call('HGET', holds, rid)
  if prev and prev ~= 's' then release(org, prev) end
  redis.call('HSET', holds, rid, hold_s .. ':' .. kid)
  redis.call('ZADD', hexp, now + ttl, rid)
  redis.call('HINCRBY', org, 'held', hold_s)
  redis.call('HINCRBY', org, khf, hold_s)
end
if chosen > 0 then redis.call('ZADD', KEYS[chosen + 5], now + ttl, rid) end
return {0, count + 1, reset, now, chosen, unpack(flags)}
"""
)

# KEYS: org, hexp, hold, kmon (month of settle time)
# ARGV: request id, cost, marker ms, kmon ttl s, now ms ("" = TIME). Returns 1 settled, 0 no-op.
SETTLE = (
    _PRELUDE
    + """
local org, hexp, holds, kmon = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local rid, cost_s = ARGV[1], ARGV[2]
local now = clock(ARGV[5])
if KEYS[5] then redis.call('ZREM', KEYS[5], rid) end
local v = redis.call('HGET', holds, rid)
if v == 's' then return 0 end
if v then release(org, v) end
redis.call('HSET', holds, rid, 's')
redis.call('ZADD', hexp, now + tonumber(ARGV[3]), rid)
if tonumber(cost_s) > 0 then
  -- `charged` moves even before the state is seeded: an in-flight seed subtracts it
  redis.call('HSETNX', org, 'gen', token)
  redis.call('HINCRBY', org, 'charged', cost_s)
  if redis.call('HEXISTS', org, 'base') == 1 then
    redis.call('HINCRBY', org, 'base', '-' .. cost_s)
  end
  redis.call('HSETNX', kmon, 'gen', token)
  redis.call('HINCRBY', kmon, 'charged', cost_s)
  if redis.call('HEXISTS', kmon, 'spent') == 1 then
    redis.call('HINCRBY', kmon, 'spent', cost_s)
  end
  if redis.call('TTL', kmon) < 0 then redis.call('EXPIRE', kmon, tonumber(ARGV[4])) end
end
return 1
"""
)

# KEYS: the state hash. ARGV: field ("base" | "spent"), DB value, c0, gen, mode ("init" |
# "reseed"), sign of the correction ("-" for base, "" for spent), ttl s (0 = none), now ms.
# value = db ∓ (charged − c0), written only if gen is unchanged (see common.py).
SEED = (
    _PRELUDE
    + """
local h = KEYS[1]
local fld = ARGV[1]
if redis.call('HGET', h, 'gen') ~= ARGV[4] then return 0 end
local exists = redis.call('HEXISTS', h, fld)
if ARGV[5] == 'init' and exists == 1 then return 0 end
if ARGV[5] == 'reseed' and exists == 0 then return 0 end
local delta = (tonumber(redis.call('HGET', h, 'charged')) or 0) - tonumber(ARGV[3])
if delta < 0 then delta = 0 end
local d = string.format('%d', delta)
redis.call('HSET', h, fld, ARGV[2], 'charged', d, 'gen', token, 'seeded_at', clock(ARGV[8]))
if delta > 0 then redis.call('HINCRBY', h, fld, ARGV[6] .. d) end
if tonumber(ARGV[7]) > 0 then redis.call('EXPIRE', h, tonumber(ARGV[7])) end
return 1
"""
)

# KEYS: org. ARGV: amount. Bumps a seeded base and marks it stale (reread soon).
NOTIFY_CREDIT = """
if redis.call('HEXISTS', KEYS[1], 'base') == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'base', ARGV[1])
redis.call('HSET', KEYS[1], 'seeded_at', 0)
return 1
"""

# KEYS: slot. ARGV: request id, max concurrency, lease ms, now ms ("" = TIME). 1 taken, 0 full.
ACQUIRE_SLOT = (
    _PRELUDE
    + """
local now = clock(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not mine and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""
)

# KEYS: slots. ARGV: now ms ("" = TIME). Live leases per deployment, in KEYS order.
IN_FLIGHT = (
    _PRELUDE
    + """
local now = clock(ARGV[1])
local out = {}
for i = 1, #KEYS do out[i] = redis.call('ZCOUNT', KEYS[i], '(' .. now, '+inf') end
return out
"""
)
