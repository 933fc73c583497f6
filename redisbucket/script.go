package redisbucket

import "github.com/redis/go-redis/v9"

// src is the one script every decision runs, atomically, on the node that
// owns the key. It decides all of the call's limits together: one key, one
// round trip, the server's clock.
//
// The key holds a string of records, one per limit Name the key is not full
// under, joined by newlines:
//
//	<len(name)>:<name> <cap> <per> <m> <q> <d> <t>
//
// (Names are printable ASCII, so never hold a newline; the length prefix lets
// them hold spaces and colons.) cap (capacity in units), per (units per
// token), m (units per tick) and q (µs per tick) are the limit's parameters,
// so a record is never misread by a call that brings other ones for its Name.
// d is the bucket's debt, capacity minus balance, in units, as of t, the
// server time in ticks of q microseconds at which it was last written. Debt
// shrinks by m units per tick of server time; a Name without a record has no
// debt (a full bucket). Refill happens at whole ticks, so a reading inside a
// tick counts only up to its start, and an admission inside a tick is booked
// at the tick's end (t = now+1): the next boundary, a part of a tick later,
// credits nothing. Refill is never more than the true one; on ticks coarser
// than 1 µs each admission forgoes under one tick of it.
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
// reply naming the limit's index and the stored parameters, nothing written)
// or carries the balance over (limits chosen per call): the record is
// advanced to now under its old parameters, its balance converted to the new
// units rounding down, clamped to the new capacity, and its time moved to the
// new tick's end. A conversion is written even by a peek or a denial, so
// that the old parameters stop applying at the call that changed them.
//
// A clock reading at or before t refills nothing and never moves t back, so
// a server clock stepped backwards (or a failover to a node whose clock is
// behind) cannot add tokens. A reject writes nothing but conversions: the
// next call recomputes the same refill from the same (d, t). Numbers are
// written through string.format('%d'), never Lua's default number
// formatting, which may use an exponent.
//
// A write drops the records that are full, which is exact (a full bucket and
// a Name without a record answer alike), deletes the key when none is left,
// and sets PX to the moment the last record would be full; a record with no
// refill, or a moment 2^50 µs (35 years) or more away, leaves no TTL (a
// plain SET clears one an earlier write set), which is exact too. One GET
// and one SET with PX: a hash and a separate PEXPIRE cost more commands per
// decision.
//
// ARGV: n (tokens asked; 0 peeks), want (tokens to take from every limit
// when each holds at least n, >= n; batching asks for more than n), strict
// ("1" or "0"), then five arguments per limit: its record's head
// "<len>:<name> <cap> <per> <m> <q>", then cap, per, m and q on their own
// (read with tonumber, cheaper than matching them out of the head).
//
// The cost is in the server's CPU, which a Redis serves every client with:
// records are read in the call's order first, where one comparison of the
// head and two finds read a record (a key written by the same limits, the
// common case); only a record out of order, of another Name or with other
// parameters is parsed in full.
//
// It returns {allowed, remaining, retry, reset, taken, idx}: remaining the
// deciding limit's whole tokens after the decision; retry the µs until every
// limit holds n (0 when allowed, -1 never); reset the µs until every limit is
// full (0 when full, -1 never); taken the tokens consumed from each limit;
// idx the deciding limit's position in ARGV, from 1. Allowed, the deciding
// limit is the one with the fewest whole tokens left; denied, the one that
// needs the longest (ties: the first). Waits are exact to the µs, rounded
// up.
const src = `
local n = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local strict = ARGV[3] == '1'
local k = (#ARGV - 3) / 5
local NEVER = 9007199254740992
local function idiv(a, b)
  if b == 1 then return a end
  local r = math.floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
local function cdiv(a, b) return idiv(a + b - 1, b) end
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
-- upto is the µs from now until ticks after tick t (t >= now), on ticks of
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
  return upto(t, cdiv(d, m), q)
end
-- advance refills debt d from tick t to now under (m, q).
local function advance(d, t, m, q)
  local now = idiv(us, q)
  if now > t then
    if m > 0 then
      local dt = now - t
      if dt > math.floor(d / m) + 1 then d = 0 else d = math.max(0, d - dt * m) end
    end
    t = now
  end
  return d, t
end
-- tagof is a head's "<len>:<name>", or nil.
local function tagof(h)
  local c = string.find(h, ':', 1, true)
  local len = c and tonumber(string.sub(h, 1, c - 1))
  if not len then return nil end
  return string.sub(h, 1, c + len), c + len
end
-- The call's limits: head, parameters; D and T their stored debt and time
-- (nil: no record).
local H, C, P, M, Q, D, T = {}, {}, {}, {}, {}, {}, {}
for j = 1, k do
  local b = 3 + 5 * (j - 1)
  H[j], C[j], P[j], M[j], Q[j] = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
end
local changed = false
local others = {} -- stored records of Names outside the call, as stored
local s = redis.call('GET', KEYS[1])
if s then
  local i, j = 1, 1
  while i <= #s do
    local e = string.find(s, '\n', i, true)
    local last = (e or #s + 1) - 1
    local h = H[j]
    if h and string.byte(s, i + #h) == 32 and string.sub(s, i, i + #h - 1) == h then
      -- The common case: the record of the call's next limit, with its
      -- parameters.
      local sp = string.find(s, ' ', i + #h + 1, true)
      D[j], T[j] = advance(tonumber(string.sub(s, i + #h + 1, sp - 1)), tonumber(string.sub(s, sp + 1, last)), M[j], Q[j])
      j = j + 1
    else
      local r = string.sub(s, i, last)
      local tag, te = tagof(r)
      local p, d, t
      if tag then p, d, t = string.match(string.sub(r, te + 2), '^(%d+ %d+ %d+ %d+) (%d+) (%d+)$') end
      if not p then return redis.error_reply('ADMITFORMAT ' .. s) end
      d, t = tonumber(d), tonumber(t)
      local jj
      for x = 1, k do
        if D[x] == nil and tagof(H[x]) == tag then jj = x end
      end
      if not jj then
        others[#others + 1] = r
      elseif H[jj] == tag .. ' ' .. p then
        D[jj], T[jj] = advance(d, t, M[jj], Q[jj])
      elseif strict then
        return redis.error_reply('ADMITPARAMS ' .. jj .. ' ' .. p)
      else
        -- Carry over: advanced under the old parameters, converted to the
        -- new units rounding down, clamped to the new capacity.
        local oc, oper, om, oq = string.match(p, '^(%d+) (%d+) (%d+) (%d+)$')
        oc, oper, om, oq = tonumber(oc), tonumber(oper), tonumber(om), tonumber(oq)
        local od, ot = advance(d, t, om, oq)
        local bal = oc - od
        local whole = idiv(bal, oper)
        if whole >= idiv(C[jj], P[jj]) then
          D[jj] = 0
        else
          -- The fraction of a token, f/oper·per units, rounded down:
          -- exactly while f·per is exact, else less one unit for the
          -- double's rounding.
          local f = bal - whole * oper
          local part
          if f * P[jj] < NEVER then part = idiv(f * P[jj], oper) else part = math.max(0, math.floor(f / oper * P[jj]) - 1) end
          D[jj] = C[jj] - (whole * P[jj] + part)
        end
        T[jj] = math.max(cdiv(ot * oq, Q[jj]), cdiv(us, Q[jj]))
        changed = true
      end
    end
    i = last + 2
  end
end
-- Decide.
local ok, taken, retry, worst, avail = 1, 0, 0, 1, want
for j = 1, k do
  if D[j] == nil then D[j], T[j] = 0, idiv(us, Q[j]) end
  local a = C[j] - D[j]
  if a < n * P[j] then
    ok = 0
    local w = NEVER
    if M[j] > 0 then w = upto(T[j], cdiv(n * P[j] - a, M[j]), Q[j]) end
    if w > retry then retry, worst = w, j end
  else
    avail = math.min(avail, idiv(a, P[j]))
  end
end
if ok == 1 and n > 0 then
  taken = avail
  for j = 1, k do
    D[j] = D[j] + taken * P[j]
    -- Taken inside tick now: the debt refills from the tick's end, so the
    -- next boundary credits nothing for a part of a tick.
    local now = idiv(us, Q[j])
    if T[j] == now and us > now * Q[j] then T[j] = now + 1 end
  end
end
-- The Decision's numbers, and the write: the call's records that are not
-- full, then the other Names' records that are not.
local rem, fewest, reset = nil, 1, 0
local out, ttl = {}, 0
for j = 1, k do
  local w = idiv(C[j] - D[j], P[j])
  if rem == nil or w < rem then rem, fewest = w, j end
  local f = full(D[j], T[j], M[j], Q[j])
  reset = math.max(reset, f)
  if D[j] > 0 then out[#out + 1] = H[j] .. string.format(' %d %d', D[j], T[j]) end
end
if ok == 1 then worst = fewest end
if taken > 0 or changed then
  ttl = reset
  for _, r in ipairs(others) do
    local _, te = tagof(r)
    local c, per, m, q, d, t = string.match(string.sub(r, te + 2), '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
    m, q = tonumber(m), tonumber(q)
    d, t = advance(tonumber(d), tonumber(t), m, q)
    if d > 0 then
      out[#out + 1] = r
      ttl = math.max(ttl, full(d, t, m, q))
    end
  end
  if #out == 0 then
    redis.call('DEL', KEYS[1])
  elseif ttl < 1125899906842624 then
    redis.call('SET', KEYS[1], table.concat(out, '\n'), 'PX', string.format('%d', cdiv(ttl, 1000)))
  else
    redis.call('SET', KEYS[1], table.concat(out, '\n'))
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
