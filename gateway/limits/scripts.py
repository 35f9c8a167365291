"""Lua scripts of the Redis limiter (each registered once and run with EVALSHA).

Key layout ({…} are ids; the prefix, `ezat:` by default, is written as the hash tag `{ezat}:`,
see below):

  ezat:rpm:{key}            HASH  w = current minute index, n = requests counted in it
                                  (PEXPIRE 2 min)
  ezat:org:{org}            HASH  base (available before holds), held (Σ live holds),
                                  kh:{key} (Σ live holds of one key), charged, gen, seeded_at
  ezat:org:{org}:hexp       ZSET  request id -> expiry ms (holds and settled markers)
  ezat:org:{org}:hold       HASH  request id -> "amount:key" (live hold) or "s" (settled marker)
  ezat:kmon:{key}:{YYYYMM}  HASH  spent (this month), charged, gen, seeded_at
                                  (EXPIRE a week after the month ends)
  ezat:kmon:{key}:{YYYYMMDD}  HASH  the same for a key capped per UTC day (EXPIRE two days
                                  after the day ends); only keys with a daily cap have one
  ezat:kmon:{key}:total     HASH  the same for a key capped in total (EXPIRE 35 days: then
                                  reseeded from the database)
  ezat:slots:{deployment}   ZSET  request id -> lease end ms
  ezat:slots:{deployment}:o:{org}  ZSET  the org's request ids there -> lease end ms
  ezat:slots:{deployment}:orgs     ZSET  org -> latest lease end of its slots there
  ezat:slots:{deployment}:ref      ZSET  org -> end of "active" after it was refused a slot there
  ezat:conc:k:{key}         ZSET  request id -> lease end ms (key concurrency, when limited)
  ezat:conc:o:{org}         ZSET  request id -> lease end ms (org concurrency, when limited)

Leases (slots and concurrency) last EZAT_SLOT_LEASE_SECONDS and are extended by their process's
heartbeat (HEARTBEAT, one call per process per beat, off the request path); every script that
counts a set first drops the members whose lease ended, and every lease set carries a PEXPIRE of
two leases, so a dead process's leases stop counting at their lease end and idle sets vanish.

Money amounts never go through Lua arithmetic on their way into Redis: they are passed as the
exact decimal strings from ARGV to HINCRBY (a Lua number would print as "1e+16" above 10^14).
Comparisons use Lua doubles, exact up to 2^53 nano-USD (~9 million USD) per value.

Every key a script touches is declared in KEYS, and a script touches an org's keys together with
a key's and several deployments' keys (a deployment's slots are shared by every org). So every
key carries one hash tag, the prefix (`{ezat}:`, ezat/redis_clients.tag): on Redis Cluster all of
the limiter lives on one slot, hence one primary, and each call stays one round trip. Tagging by
org would spread orgs over primaries but split the deployments' capacity keys off the admission
script (a second round trip per request, and no atomic slot-and-hold): not done.

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
-- Drop a request's leases: KEYS[from..] are lease sets holding `rid`, except the ":orgs" sets,
-- which follow the org's own slot set of the same deployment and hold `orgid`: the org leaves it
-- when its last slot there goes, else keeps the latest lease end of its remaining slots.
local function drop_leases(from, rid, orgid, now)
  for i = from, #KEYS do
    local k = KEYS[i]
    if string.sub(k, -5) == ':orgs' then
      local mine = KEYS[i - 1]
      redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
      local last = redis.call('ZRANGE', mine, -1, -1, 'WITHSCORES')
      if last[2] then redis.call('ZADD', k, last[2], orgid) else redis.call('ZREM', k, orgid) end
    else
      redis.call('ZREM', k, rid)
    end
  end
end
-- Whether `org` may take a slot on a deployment (its 4 keys from KEYS[b]): 0 room, 1 full,
-- 2 its share is in use (then also its cap there and 1 if other orgs are active).
-- "Active" on a deployment: an org holds a live slot there (:orgs score = its latest lease end
-- > now), or was refused a slot there in the last EZAT_FAIR_SHARE_ACTIVE_SECONDS (:ref). The
-- asking org counts itself, so "two or more orgs active" = another org is.
local function verdict(b, orgid, mx, sc, lc, now)
  redis.call('ZREMRANGEBYSCORE', KEYS[b], '-inf', now)
  if redis.call('ZCARD', KEYS[b]) >= mx then return 1, mx, 0 end
  if lc >= mx then return 0, mx, 0 end
  local ok, rk = KEYS[b + 2], KEYS[b + 3]
  redis.call('ZREMRANGEBYSCORE', ok, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', rk, '-inf', now)
  local others = redis.call('ZCARD', ok) + redis.call('ZCARD', rk)
  if redis.call('ZSCORE', ok, orgid) then others = others - 1 end
  if redis.call('ZSCORE', rk, orgid) then others = others - 1 end
  local cap, shared = lc, 0
  if others > 0 then cap, shared = sc, 1 end
  redis.call('ZREMRANGEBYSCORE', KEYS[b + 1], '-inf', now)
  if redis.call('ZCARD', KEYS[b + 1]) >= cap then return 2, cap, shared end
  return 0, cap, shared
end
local function take_slot(b, rid, orgid, untl, keep)
  redis.call('ZADD', KEYS[b], untl, rid)
  redis.call('ZADD', KEYS[b + 1], untl, rid)
  redis.call('ZADD', KEYS[b + 2], 'GT', untl, orgid)
  for j = b, b + 2 do redis.call('PEXPIRE', KEYS[j], keep) end
end
"""

# KEYS: rpm, org, hexp, hold, kmon (of the key's cap period), key conc, org conc, then 4 per
# candidate deployment: slots, the org's slots there, its :orgs, its :ref.
# ARGV: request id, key id, rpm limit, cap ("" = none), hold, hold ttl ms, reseed ms, kmon ttl s,
# now ms ("" = TIME), key conc limit ("" = none), org conc limit ("" = none), org id, lease ms,
# active window ms, then 3 per candidate: max concurrency, cap when shared, cap when alone.
# Returns {status, count, reset_ms, now_ms, ...}: 1 rate limited; 4 need seed (+ bits 1 org |
# 2 key, org charged, gen, key charged, gen); 0 admitted, 2 funds, 3 capacity, 5 concurrency,
# 6 fair share (+ detail: chosen slot index | 1 key_cap, 2 org_balance | 0 | 1 key, 2 org | the
# org's cap, then the reseed claims: org flag, charged, gen, key flag, charged, gen; status 6
# adds the candidate index and 1 if other orgs were active there; status 0 adds the org's
# balance (base, a decimal string) it was admitted against, or '' when no money was checked).
ADMIT = (
    _PRELUDE
    + """
local rpm, org, hexp, holds, kmon = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local rid, kid, orgid = ARGV[1], ARGV[2], ARGV[12]
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
  -- the money check: settlement.money_refusal
  local held = tonumber(o[2]) or 0
  local kheld = tonumber(o[3]) or 0
  if cap ~= '' and tonumber(k[1]) + kheld + hold > tonumber(cap) then
    return {2, count, reset, now, 1, unpack(flags)}
  end
  if hold > tonumber(o[1]) - held then return {2, count, reset, now, 2, unpack(flags)} end
end

local function reply(status, detail, ...)
  local out = {status, count, reset, now, detail}
  for _, f in ipairs(flags) do out[#out + 1] = f end
  for _, x in ipairs({...}) do out[#out + 1] = x end
  return out
end

local lease = tonumber(ARGV[13])
local keep = 2 * lease
local conc = {}
for i, scope in ipairs({6, 7}) do
  local lim = ARGV[9 + i]
  if lim ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[scope], '-inf', now)
    if redis.call('ZCARD', KEYS[scope]) >= tonumber(lim) then return reply(5, i) end
    conc[#conc + 1] = KEYS[scope]
  end
end

local n = (#KEYS - 7) / 4
local chosen, share_at, share_cap, share_shared = 0, 0, 0, 0
for i = 1, n do
  local a = 15 + 3 * (i - 1)
  local v, c, sh = verdict(4 + 4 * i, orgid, tonumber(ARGV[a]), tonumber(ARGV[a + 1]),
    tonumber(ARGV[a + 2]), now)
  if v == 0 then
    chosen = i
    break
  end
  if v == 2 and share_at == 0 then share_at, share_cap, share_shared = i, c, sh end
end
if n > 0 and chosen == 0 then
  local active = now + tonumber(ARGV[14])
  for i = 1, n do
    redis.call('ZADD', KEYS[7 + 4 * i], active, orgid)
    redis.call('PEXPIRE', KEYS[7 + 4 * i], tonumber(ARGV[14]) + keep)
  end
  if share_at > 0 then return reply(6, share_cap, share_at, share_shared) end
  return reply(3, 0)
end

-- everything passed: commit rate, hold, slot and concurrency together
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
if chosen > 0 then take_slot(4 + 4 * chosen, rid, orgid, now + lease, keep) end
for _, k in ipairs(conc) do
  redis.call('ZADD', k, now + lease, rid)
  redis.call('PEXPIRE', k, keep)
end
count = count + 1
-- the org's balance (base) it was admitted against, '' when no money was checked
local balance = ''
if hold > 0 then balance = o[1] end
return reply(0, chosen, balance)
"""
)

# One request's money settle (settlement.settle on Redis's storage), shared by SETTLE and the
# flusher's batch settle (gateway/limits/batch.py): returns 1 settled, 0 no-op (settled already).
_SETTLE_ONE = """
local function settle_one(org, hexp, holds, kmon, kday, ktotal, rid, cost_s, marker_ms, ttl, now)
  local v = redis.call('HGET', holds, rid)
  if v == 's' then return 0 end
  if v then release(org, v) end
  redis.call('HSET', holds, rid, 's')
  redis.call('ZADD', hexp, now + marker_ms, rid)
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
    if redis.call('TTL', kmon) < 0 then redis.call('EXPIRE', kmon, ttl) end
    for _, k in ipairs({kday, ktotal}) do
      if redis.call('EXISTS', k) == 1 then
        redis.call('HINCRBY', k, 'charged', cost_s)
        if redis.call('HEXISTS', k, 'spent') == 1 then
          redis.call('HINCRBY', k, 'spent', cost_s)
        end
      end
    end
  end
  return 1
end
"""

# KEYS: org, hexp, hold, kmon (month of settle time), kmon of the day of settle time, kmon
# "total", then the request's lease sets (drop_leases).
# ARGV: request id, cost, marker ms, month kmon ttl s, now ms ("" = TIME), org id.
# The month's state is always charged (created if missing); the day's and the total's only when
# they exist: they exist for keys capped per day or in total (an initial seed creates the hash,
# with its gen, before it reads the database, so a seed in flight is never missed).
# Returns 1 settled, 0 no-op. The arithmetic is settlement.settle's (tests/gateway/limits/
# test_limits_settlement.py runs one table through this script and through that function).
SETTLE = (
    _PRELUDE
    + _SETTLE_ONE
    + """
local now = clock(ARGV[5])
drop_leases(7, ARGV[1], ARGV[6], now)
return settle_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[2],
  tonumber(ARGV[3]), tonumber(ARGV[4]), now)
"""
)

# KEYS: org, hexp, hold, then the request's lease sets (drop_leases).
# ARGV: request id, cost (> 0), hold ttl ms, now ms ("" = TIME), org id, key id.
# The request's usage row is in the local log, not yet in the database (Limiter.hold_unflushed):
# its leases go, its hold becomes its cost (nothing is charged: the flusher's SETTLE does that
# once the row is stored). Returns 1, or 0 when the request was settled already.
HOLD_UNFLUSHED = (
    _PRELUDE
    + """
local org, hexp, holds = KEYS[1], KEYS[2], KEYS[3]
local rid, cost_s, kid = ARGV[1], ARGV[2], ARGV[6]
local now = clock(ARGV[4])
drop_leases(4, rid, ARGV[5], now)
local v = redis.call('HGET', holds, rid)
if v == 's' then return 0 end
if v then release(org, v) end
redis.call('HSET', holds, rid, cost_s .. ':' .. kid)
redis.call('ZADD', hexp, now + tonumber(ARGV[3]), rid)
redis.call('HINCRBY', org, 'held', cost_s)
redis.call('HINCRBY', org, 'kh:' .. kid, cost_s)
return 1
"""
)

# KEYS: the state hash. ARGV: field ("base" | "spent"), DB value, c0, gen, mode ("init" |
# "reseed"), sign of the correction ("-" for base, "" for spent), ttl s (0 = none), now ms.
# value = db ∓ (charged − c0), written only if gen is unchanged (see common.py): settlement.seed.
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

# KEYS: the deployment's 4 keys (slots, the org's slots, :orgs, :ref). ARGV: request id, max
# concurrency, lease ms, now ms ("" = TIME), org id, cap when shared, cap when alone, active
# window ms. 1 taken, 0 full or the org's share in use (the org is then marked as waiting).
ACQUIRE_SLOT = (
    _PRELUDE
    + """
local now = clock(ARGV[4])
local rid, orgid = ARGV[1], ARGV[5]
local keep = 2 * tonumber(ARGV[3])
if not redis.call('ZSCORE', KEYS[1], rid) then
  local v = verdict(1, orgid, tonumber(ARGV[2]), tonumber(ARGV[6]), tonumber(ARGV[7]), now)
  if v ~= 0 then
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[8]), orgid)
    redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[8]) + keep)
    return 0
  end
end
take_slot(1, rid, orgid, now + tonumber(ARGV[3]), keep)
return 1
"""
)

# KEYS: lease sets (drop_leases). ARGV: request id, org id, now ms ("" = TIME).
RELEASE = (
    _PRELUDE
    + """
drop_leases(1, ARGV[1], ARGV[2], clock(ARGV[3]))
return 1
"""
)

# KEYS: lease sets of this process's live requests; ARGV: now ms ("" = TIME), lease ms, then one
# member per key (a request id, or the org id for a ":orgs" set). Extends leases that still
# exist (XX: a request settled meanwhile is not brought back; GT: never shortens an org's
# latest lease end). Returns how many leases were lost (lapsed before this beat).
HEARTBEAT = (
    _PRELUDE
    + """
local now = clock(ARGV[1])
local untl = now + tonumber(ARGV[2])
local keep = 2 * tonumber(ARGV[2])
local lost = 0
for i, k in ipairs(KEYS) do
  local m = ARGV[i + 2]
  if string.sub(k, -5) == ':orgs' then
    redis.call('ZADD', k, 'XX', 'GT', untl, m)
  else
    local score = redis.call('ZSCORE', k, m)
    if score and tonumber(score) > now then
      redis.call('ZADD', k, 'XX', untl, m)
    else
      lost = lost + 1
    end
  end
  redis.call('PEXPIRE', k, keep)
end
return lost
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
