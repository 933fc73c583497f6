package redisbucket

import "github.com/redis/go-redis/v9"

// src is the one script every decision runs, atomically, on the node that
// owns the key. It decides all of the call's limits together: one key, one
// round trip, the server's clock.
//
// The key holds the records of the limit Names the key is not full under:
// first every record's head, back to back, then every record's state, in
// the same order:
//
//	<len(name)>:<name><cap><per><m><q>  ...  <d><t>  ...
//
// where the numbers are little-endian IEEE 754 doubles, 8 bytes each
// (struct.pack('<d'), which holds every integer below 2^53 exactly). The
// length prefix delimits the name, whatever bytes it holds; a head is the
// prefix, the name and 32 bytes, a state 16 bytes, so the heads end where
// the bytes left are 16 per head read. cap (capacity in units), per (units
// per token), m (units per tick) and q (µs per tick) are the limit's
// parameters, so a record is never misread by a call that brings other
// ones for its Name. d is the bucket's debt, capacity minus balance, in
// units, as of t, the server time in ticks of q microseconds at which it
// was last written. Debt shrinks by m units per tick of server time; a Name
// without a record has no debt (a full bucket). Refill happens at whole
// ticks, so a reading inside a tick counts only up to its start, and an
// admission inside a tick is booked at the tick's end (t = now+1): the next
// boundary, a part of a tick later, credits nothing. Refill is never more
// than the true one; on ticks coarser than 1 µs each admission forgoes
// under one tick of it.
//
// The layout is for the script's cost, which is Redis's: one thread runs
// every client's scripts, so each limit's share of a call bounds the
// throughput of several limits. A key last written by the same limits (the
// usual case) holds exactly the call's heads, which the client sends
// concatenated, then their states: one comparison and one struct.unpack
// read them all, and one struct.pack writes them back. Measured inside
// Redis 7.0's Lua on the project's machine (testdata/luacost.lua, whose
// runs are in the repository's results): struct.unpack of four numbers
// 64–80 ns, a string.match of four 280–360 ns and tonumber 80–130 ns each,
// struct.pack of two 60–90 ns, string.format of two 170–210 ns, and a call
// of a small Lua function about 40 ns, so the per-limit loops write idiv,
// advance and full out for their common cases.
//
// Every value the script stores or computes is an integer below 2^53, which
// a Lua double holds exactly; newParams guarantees cap + 2·m < 2^53:
//   - the time in µs is about 1.8e15, below 2^53 until the year 2255;
//   - 0 <= d <= cap <= 2^52;
//   - dt·m is computed only for dt <= ⌊d/m⌋+2, so it is at most d + 2m;
//   - idiv's q·b and (q+1)·b are at most a + b <= 2·cap;
//   - a wait in µs at or above 2^53 (285 years) is returned as -1, never.
//
// A call's limit whose Name has a record with other parameters either
// refuses (strict, the limiter's own fixed limits: an ADMITPARAMS error
// reply naming the limit's index and the stored parameters as decimal
// text, nothing written) or carries the balance over (limits chosen per
// call): the record is advanced to now under its old parameters; if it is
// full there it is full under the new ones (a full record answers like no
// record, which is what a write or the key's expiry leaves of it, so a
// balance never depends on when the record was last written); else its
// balance is converted to the new units rounding down, clamped to the new
// capacity, and its time moved to the new tick's end. A conversion is
// written even by a peek or a denial, so that the old parameters stop
// applying at the call that changed them.
//
// A clock reading at or before t refills nothing and never moves t back, so
// a server clock stepped backwards (or a failover to a node whose clock is
// behind) cannot add tokens. A reject writes nothing but conversions: the
// next call recomputes the same refill from the same (d, t). A value that
// does not parse as records (one this package did not write) is an
// ADMITFORMAT error reply with the value's length and first 64 bytes (a
// value may be megabytes), and nothing is written.
//
// A write drops the records that are full, which is exact (a full bucket and
// a Name without a record answer alike), deletes the key when none is left,
// and sets PX to the moment the last record would be full; a record with no
// refill, or a moment 2^50 µs (35 years) or more away, leaves no TTL (a
// plain SET clears one an earlier write set), which is exact too. One GET
// and one SET with PX: a hash and a separate PEXPIRE cost more commands per
// decision.
//
// One limit is the common case, and its call is decided before any of the
// general code runs: a call with one limit on 1 µs ticks whose key is
// absent or holds exactly that limit's record (its head, then its state)
// reads, refills, decides and writes it with a few locals, the same steps
// as the general code for k = 1 on 1 µs ticks, and returns. The general
// code makes its helpers (closures) and tables afresh on every call, which
// a one-limit call does not need; the server time saved is in the
// package's results (docs/redis.md, Measured). Any other key (records of
// other Names beside the limit's, the Name with other parameters, a value
// this package did not write) or a coarser tick falls through to the
// general code on the same GET and TIME, so a key moves freely between
// one limit and several: both write the same layout. FuzzFastPath runs
// this source with and without the fast path on the same values at the
// same server time and requires identical replies, values and expiry.
//
// A call brings at most MaxLimits limits (the client checks), but a key
// may hold records of any number of Names, left by calls that brought
// different ones: parsed records are matched through an index by Name, and
// states packs them in chunks, since struct.pack takes its numbers as
// arguments and Lua's stack holds about 8 000 (a key of 4 000 Names failed
// with "too many results to unpack").
//
// ARGV: n (tokens asked; 0 peeks), want (tokens to take from every limit
// when each holds at least n, >= n; batching asks for more than n), strict
// ("1" or "0"), the call's record heads back to back, and the call's
// parameters packed, four numbers per limit (the same numbers as in the
// heads, to be unpacked at once). A value that is not the call's heads and
// states (records of other Names, another order, other parameters, fewer
// records) is parsed into records and matched by Name; a value that does
// not parse at all is an ADMITFORMAT error reply, and nothing is written.
//
// It returns {allowed, remaining, retry, reset, taken, idx}: remaining the
// deciding limit's whole tokens after the decision; retry the µs until every
// limit holds n (0 when allowed, -1 never); reset the µs until every limit is
// full (0 when full, -1 never); taken the tokens consumed from each limit;
// idx the deciding limit's position among the call's limits, from 1.
// Allowed, the deciding limit is the one with the fewest whole tokens left;
// denied, the one that needs the longest (ties: the first). Waits are exact
// to the µs, rounded up.
const src = `
local n = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local Hc, Pc = ARGV[4], ARGV[5]
local NEVER = 9007199254740992
local floor, sub, sunpack, spack = math.floor, string.sub, struct.unpack, struct.pack
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local s = redis.call('GET', KEYS[1])
-- One limit on 1 µs ticks, its key absent or holding exactly its record:
-- decided here, without the general code's helpers and tables (closures
-- and tables are made afresh on every call; the measured difference is in
-- the package's results). Any other key falls through to the general code
-- below, which reads and writes the same layout, so a key moves freely
-- between the two. The steps are those of the general code for k = 1, q = 1.
if #Pc == 32 and (not s or #s == #Hc + 16 and sub(s, 1, #Hc) == Hc) then
  local cap, per, m, q = sunpack('<dddd', Pc)
  if q == 1 then
    local d, t = 0, us
    if s then
      d, t = sunpack('<dd', s, #Hc + 1)
      if not (d >= 0 and d <= cap and t >= 0 and t < NEVER) then return redis.error_reply('ADMITFORMAT ' .. #s .. ' ' .. sub(s, 1, 64)) end
      if us > t then
        if m == 1 then
          d = d - (us - t)
        elseif m > 0 then
          if us - t > floor(d / m) + 1 then d = 0 else d = d - (us - t) * m end
        end
        if d < 0 then d = 0 end
        t = us
      end
    end
    local a = cap - d
    -- w: the whole tokens held, idiv(a, per) written out.
    local w = a
    if per ~= 1 then
      w = floor(a / per)
      if w * per > a then w = w - 1 elseif (w + 1) * per <= a then w = w + 1 end
    end
    local ok, take, retry = 1, 0, 0
    if w < n then
      -- Denied: n tokens exist once the refill covers the shortfall.
      ok, retry = 0, -1
      if m > 0 then
        local x = n * per - a + m - 1
        local ticks = floor(x / m)
        if ticks * m > x then ticks = ticks - 1 elseif (ticks + 1) * m <= x then ticks = ticks + 1 end
        retry = t - us + ticks
        if retry >= NEVER then retry = -1 end
      end
    elseif n > 0 then
      take = want
      if w < take then take = w end
      d = d + take * per
    end
    -- reset: the µs until debt d at t is gone (the general code's full).
    local reset = 0
    if d > 0 then
      reset = NEVER
      if m > 0 then
        local ticks = d
        if m ~= 1 then
          local x = d + m - 1
          ticks = floor(x / m)
          if ticks * m > x then ticks = ticks - 1 elseif (ticks + 1) * m <= x then ticks = ticks + 1 end
        end
        reset = t - us + ticks
        if reset >= NEVER then reset = NEVER end
      end
    end
    if take > 0 then
      if reset < 1125899906842624 then
        redis.call('SET', KEYS[1], Hc .. spack('<dd', d, t), 'PX', floor((reset + 999) / 1000))
      else
        redis.call('SET', KEYS[1], Hc .. spack('<dd', d, t))
      end
    end
    if reset >= NEVER then reset = -1 end
    return {ok, w - take, retry, reset, take, 1}
  end
end
s = s or ''
-- The general code: any number of limits, any tick, any stored value.
local strict = ARGV[3] == '1'
local k = #Pc / 32
-- Library functions as locals: a global lookup costs more, per limit.
local max, min, tunpack = math.max, math.min, unpack
-- P: the call's parameters, four per limit (cap, per, m, q), in one unpack.
local P = {sunpack('<' .. string.rep('dddd', k), Pc)}
local function idiv(a, b)
  if b == 1 then return a end
  local r = floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
-- upto is the µs from now until ticks after tick t (t >= now) on ticks of
-- q µs, counted from the current tick's start so that every product stays
-- near the wait itself; NEVER at or beyond 2^53.
local function upto(t, ticks, q)
  local now = idiv(us, q)
  local w = (t - now + ticks) * q - (us - now * q)
  if w >= NEVER then return NEVER end
  return w
end
-- full is the µs until debt d at tick t is gone under (m, q): 0 when full,
-- NEVER when it never is.
local function full(d, t, m, q)
  if d == 0 then return 0 end
  if m == 0 then return NEVER end
  if q == 1 and m == 1 then return min(t - us + d, NEVER) end
  return upto(t, idiv(d + m - 1, m), q)
end
-- advance refills debt d from tick t to tick now under m.
local function advance(d, t, m, now)
  if now > t then
    if m > 0 then
      local dt = now - t
      if dt > floor(d / m) + 1 then d = 0 else d = max(0, d - dt * m) end
    end
    t = now
  end
  return d, t
end
-- booked is the tick an admission at tick t is booked at on ticks of q µs
-- (q > 1): taken inside tick now, the debt refills from the tick's end, so
-- the next boundary credits nothing for a part of a tick.
local function booked(t, q)
  local now = idiv(us, q)
  if t == now and us > now * q then return now + 1 end
  return t
end
-- good reports whether a stored debt d and time t can be the script's
-- (false for NaN, infinities, fractions, negatives, debt above cap).
local function good(d, t, cap)
  return d >= 0 and d <= cap and d % 1 == 0 and t >= 0 and t < NEVER and t % 1 == 0
end
-- heads splits the call's heads, for the paths that match limits one by one.
local function heads()
  local out, i = {}, 1
  for j = 1, k do
    local c = string.find(Hc, ':', i, true)
    local e = c + tonumber(sub(Hc, i, c - 1))
    out[j] = sub(Hc, i, e + 32)
    i = e + 33
  end
  return out
end
-- records parses a stored value, heads then states, into records {tag (the
-- "<len>:<name>" part), p (the 32 packed bytes of the parameters), head,
-- cap, m, q, d, t}, and an index of them by tag, or returns nil if it does
-- not parse (a Name twice included: this script never writes that). The
-- index keeps matching a call's limits linear in the records, however many
-- Names earlier calls left on the key.
local function records(s)
  local list, byTag, i = {}, {}, 1
  while #s - i + 1 > 16 * #list do
    local c = string.find(s, ':', i, true)
    local digits = c and sub(s, i, c - 1)
    if not digits or not string.match(digits, '^%d+$') then return nil end
    local e = c + tonumber(digits) -- the name's last byte
    if e + 32 > #s then return nil end
    local cap, per, m, q = sunpack('<dddd', s, e + 1)
    if not (cap >= 1 and cap < NEVER and cap % 1 == 0 and per >= 1 and per % 1 == 0 and m >= 0 and m % 1 == 0 and q >= 1 and q % 1 == 0) then return nil end
    local r = {tag = sub(s, i, e), p = sub(s, e + 1, e + 32), head = sub(s, i, e + 32), cap = cap, m = m, q = q}
    if byTag[r.tag] then return nil end
    list[#list + 1], byTag[r.tag] = r, r
    i = e + 33
  end
  if #s - i + 1 ~= 16 * #list then return nil end
  for x, r in ipairs(list) do
    r.d, r.t = sunpack('<dd', s, i + 16 * (x - 1))
    if not good(r.d, r.t, r.cap) then return nil end
  end
  return list, byTag
end
-- states packs the numbers of O, two per record. struct.pack takes them as
-- arguments and Lua's C stack holds at most about 8 000, so a key holding
-- thousands of Names (each call brings at most 64, but calls may bring
-- different ones) is packed in chunks.
local function states(O)
  if #O <= 512 then return spack('<' .. string.rep('d', #O), tunpack(O)) end
  local parts = {}
  for i = 1, #O, 512 do
    local j = min(i + 511, #O)
    parts[#parts + 1] = spack('<' .. string.rep('d', j - i + 1), tunpack(O, i, j))
  end
  return table.concat(parts)
end
-- D and T: each limit's debt and time, refilled to now. The common case is
-- a key last written by the same limits: its value is the call's heads,
-- byte for byte, then their states, read with one comparison and one
-- unpack. A key not held has no debt. Anything else (records of other
-- Names, in another order, with other parameters, or fewer) is parsed
-- into list and matched by Name.
local D, T = {}, {}
local list, hs, changed = nil, nil, false
if s == '' then
  for j = 1, k do
    local q = P[4 * j]
    D[j], T[j] = 0, idiv(us, q)
  end
elseif #s == #Hc + 16 * k and sub(s, 1, #Hc) == Hc then
  local S = {sunpack('<' .. string.rep('dd', k), s, #Hc + 1)}
  for j = 1, k do
    local x = 4 * j
    local cap, m, q = P[x - 3], P[x - 1], P[x]
    local d, t = S[2 * j - 1], S[2 * j]
    -- The heads matched, so the value is this script's: a range check
    -- against a corrupted value is enough.
    if not (d >= 0 and d <= cap and t >= 0 and t < NEVER) then return redis.error_reply('ADMITFORMAT ' .. #s .. ' ' .. sub(s, 1, 64)) end
    -- advance(d, t, m, now), written out: this loop runs once per limit
    -- on every call, and a Lua call costs as much as the arithmetic.
    local now = us
    if q ~= 1 then now = idiv(us, q) end
    if now > t then
      if m == 1 then
        d = d - (now - t)
        if d < 0 then d = 0 end
      elseif m > 0 then
        d = advance(d, t, m, now)
      end
      t = now
    end
    D[j], T[j] = d, t
  end
else
  local byTag
  list, byTag = records(s)
  if not list then return redis.error_reply('ADMITFORMAT ' .. #s .. ' ' .. sub(s, 1, 64)) end
  hs = heads()
  for j = 1, k do
    local x = 4 * j
    local cap, per, m, q = P[x - 3], P[x - 2], P[x - 1], P[x]
    local h = hs[j]
    local tag = sub(h, 1, #h - 32)
    local now = idiv(us, q)
    local d, t = 0, now
    local r = byTag[tag]
    if r then
      r.call = true
      if r.head == h then
        d, t = advance(r.d, r.t, m, now)
      elseif strict then
        return redis.error_reply('ADMITPARAMS ' .. j .. ' ' .. string.format('%d %d %d %d', sunpack('<dddd', r.p)))
      else
        -- Carry over: advanced under the old parameters; full there, full
        -- here (a full record equals no record, which the next write or
        -- the key's expiry would have left); else converted to the new
        -- units rounding down, clamped to the new capacity.
        local oc, oper, om, oq = sunpack('<dddd', r.p)
        local od, ot = advance(r.d, r.t, om, idiv(us, oq))
        local bal = oc - od
        local whole = idiv(bal, oper)
        if od == 0 or whole >= idiv(cap, per) then
          d = 0
        else
          -- The fraction of a token, f/oper·per units, rounded down:
          -- exactly while f·per is exact, else less one unit for the
          -- double's rounding.
          local f = bal - whole * oper
          local part
          if f * per < NEVER then part = idiv(f * per, oper) else part = max(0, floor(f / oper * per) - 1) end
          d = cap - (whole * per + part)
        end
        t = max(idiv(ot * oq + q - 1, q), idiv(us + q - 1, q))
        changed = true
      end
    end
    D[j], T[j] = d, t
  end
end
-- Decide: every limit must hold n; an admission takes the same number of
-- tokens, at most want, from each. An unbatched call (want == n) that
-- takes would take n from each, so this loop also works out, as it goes,
-- what the call leaves if it is admitted (rem, fewest, reset, and the
-- states to write in O), and the loop after it runs only for a denial, a
-- peek or a batch: one pass per limit in the common case.
local ok, retry, worst, avail = 1, 0, 1, want
local fused = want == n and n > 0
local rem, fewest, reset, O, all = nil, 1, 0, {}, true
for j = 1, k do
  local x = 4 * j
  local cap, per, m, q = P[x - 3], P[x - 2], P[x - 1], P[x]
  local d, t = D[j], T[j]
  local a = cap - d
  if a < n * per then
    ok = 0
    local w = NEVER
    if m > 0 then w = upto(t, idiv(n * per - a + m - 1, m), q) end
    if w > retry then retry, worst = w, j end
  else
    -- w = idiv(a, per), written out: the whole tokens the limit holds.
    local w = floor(a / per)
    if w * per > a then w = w - 1 elseif (w + 1) * per <= a then w = w + 1 end
    if w < avail then avail = w end
    if fused and ok == 1 then
      -- If admitted: n tokens taken, w - n left, debt d + n·per (> 0).
      if rem == nil or w - n < rem then rem, fewest = w - n, j end
      d = d + n * per
      if q ~= 1 then t = booked(t, q) end
      local f
      if q == 1 and m == 1 then
        f = t - us + d
        if f >= NEVER then f = NEVER end
      else
        f = full(d, t, m, q)
      end
      if f > reset then reset = f end
      O[#O + 1] = d
      O[#O + 1] = t
    end
  end
end
local taken = 0
if ok == 1 and n > 0 then taken = avail end
if fused and ok == 1 then
  -- taken == n. D and T, for the write when it merges other records.
  if list then
    for j = 1, k do
      D[j], T[j] = O[2 * j - 1], O[2 * j]
    end
  end
else
  -- Take, the Decision's numbers, and the states of the call's limits
  -- that are not full (O, two numbers each; all is false if one is full).
  rem, fewest, reset, O = nil, 1, 0, {}
  for j = 1, k do
    local x = 4 * j
    local cap, per, m, q = P[x - 3], P[x - 2], P[x - 1], P[x]
    local d, t = D[j], T[j]
    if taken > 0 then
      d = d + taken * per
      if q ~= 1 then t = booked(t, q) end
      D[j], T[j] = d, t
    end
    -- Not the common path (a denial, a peek, a batch): the helpers serve.
    local w = idiv(cap - d, per)
    if rem == nil or w < rem then rem, fewest = w, j end
    if d > 0 then
      reset = max(reset, full(d, t, m, q))
      O[#O + 1] = d
      O[#O + 1] = t
    else
      all = false
    end
  end
end
if ok == 1 then worst = fewest end
-- Write: the call's records that are not full, and the other Names'.
if taken > 0 or changed then
  local ttl, v = reset, nil
  if all and not list then
    v = Hc .. spack('<' .. string.rep('dd', k), tunpack(O))
  else
    hs = hs or heads()
    local H = {}
    for j = 1, k do
      if D[j] > 0 then H[#H + 1] = hs[j] end
    end
    for _, r in ipairs(list or {}) do
      if not r.call then
        local d, t = advance(r.d, r.t, r.m, idiv(us, r.q))
        if d > 0 then
          -- Written as it was read: the refill since is recomputed from it.
          H[#H + 1] = r.head
          O[#O + 1] = r.d
          O[#O + 1] = r.t
          ttl = max(ttl, full(d, t, r.m, r.q))
        end
      end
    end
    if #H > 0 then v = table.concat(H) .. states(O) end
  end
  if not v then
    redis.call('DEL', KEYS[1])
  elseif ttl < 1125899906842624 then
    redis.call('SET', KEYS[1], v, 'PX', string.format('%d', idiv(ttl + 999, 1000)))
  else
    redis.call('SET', KEYS[1], v)
  end
end
if retry >= NEVER then retry = -1 end
if reset >= NEVER then reset = -1 end
return {ok, rem, retry, reset, taken, worst}
`

// script is shared by every Limiter: go-redis runs it with EVALSHA and, on
// NOSCRIPT (a restarted or flushed server, a new Cluster node), with EVAL,
// which also loads it.
var script = redis.NewScript(src)
