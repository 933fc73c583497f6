package redisstore

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// src decides a request's buckets in one atomic step on one Redis node,
// with the arithmetic of package rls/internal/tick.
//
// KEYS are the buckets; ARGV holds eleven values per key: capU (capacity in
// units; 0 for a limit of zero, which has no bucket and holds only a cost
// of 0), per (units per token), m (units refilled per tick, 0 for none), q
// (microseconds per tick), n (tokens asked: 0 checks, a negative n gives
// tokens back), flags (1: shadow, the key may lack n without refusing; 2:
// debt, the key is charged n whatever the outcome; 4: the request is
// refused already; 8: unused (until 2026-12-07, a give-back's take from a
// bucket full only by a clamp); 16 and 32, a give-back only: the decision wrote the bucket marked, a refused
// request leaves it marked; 64: track the key, below), sig, the parameters
// as "capU:per:m:q", and, for a give-back only, d1, t1, dref and vd: the
// debt the take left, its tick, the debt a refused request leaves, and the
// version the decision wrote.
//
// A bucket is stored as the string "d t sig": its debt d (capacity minus
// balance, in units; up to 2·capU, a balance of minus one burst)
// as of tick t of the server clock (TIME), and the parameters it was
// written with (compared as a string, parsed only when they differ: the
// common case costs two string.find). An absent key has no debt: a full
// bucket. A sig followed by ":c" (and d = 0) marks a bucket full only
// because a carry clamped its balance to this smaller capacity (below); a
// script from before the mark reads it as another limit's full bucket, as
// it read such a bucket before, and never as more than full. Debt shrinks by m units per tick; a clock reading at or before t
// refills nothing and never moves t back. Every number is an integer below
// 2^53 (the Go side checks the debt bound against 2^52 and caps n at one
// burst more than the debt allows), so Lua's doubles hold them exactly;
// the refill computes dt·m only for dt ≤ ⌈d/m⌉, so the product stays
// below d + m.
//
// Changed parameters (a changed rule or override) are carried over: the
// bucket is refilled under the old ones, then its balance, fraction
// included, is converted to the new units (exactly while fraction × per
// stays below 2^53, else rounded down by at most two units) and clamped to
// [−capacity, capacity], so a balance below zero stays owed under the new
// limit, whether or not it charges; a full bucket stays full, as an absent
// one would be. A balance that a clamp to a smaller capacity made full is
// not a full bucket (one key under two limits would refill: 10 with 5 left
// is full under 5, and read back under 10 as full, or deleted and read as
// absent, it had 10 again): carried again, within the request or from the
// store, it carries its balance, this capacity; it is stored marked
// ("0 t sig:c"), full under these parameters, and expires when a bucket of them would be
// full again from empty. The carry-over is
// written back whatever the request's outcome, so a raised limit reaches a
// client whose requests are still being refused (but not by a give-back,
// below).
//
// All or nothing: every key is read, carried over and refilled, then each
// hit, in order, checks the running balance (so two hits of one key need
// both costs): it holds n when n·per ≤ capU − d, which a bucket in debt
// never satisfies, not even for n = 0. An ordinary hit that holds takes;
// one that lacks, unless shadow, refuses the request. A debt hit is
// charged n (up to the debt bound) in any case. Two running debts are kept
// per key: with every take, written if the request is admitted, and with
// the debt charges only, written if it is refused. Keys that nothing
// changed are not written. Writing is SET with PX until the bucket is full
// again, or DEL when it is full. The script runs atomically, so no other
// request sees a state in between.
//
// Tracked keys (flag 64, a Cluster's store): a write also stores the key's
// version, max(µs now, last version + 1), and its points: the debt at
// each write since, "age:debt" with age its version's distance from the
// key's, as a list of suffix minima (each below every later one). A write
// adds min(the debt it found, the debt it leaves), or 0 when it carried
// the bucket to other parameters, cut a debt charge at the bound, or found
// the key present but untracked. Points older than the horizon (10 s) are
// dropped, and past keep (8) the two closest neighbours merge into the
// lower. After the points, receipts: the versions of the decisions given
// back (ages, newest last, the last keep within the horizon): a give-back
// whose decision is among them is a client's retry (go-redis retries a
// script on EOF) and changes nothing. A marked key keeps its version
// ("0 t sig ver:c"), no points or receipts: its debt is 0, so nothing
// would come back. An older script reads a tracked key's sig as
// another's and carries the bucket into the same parameters: the same
// balance.
//
// A give-back (the split path's, for a refused request) first compares the
// key with what the decision wrote (d1, t1, vd, and flag 16 if it wrote a
// mark): if nothing changed it since, it sets the state a refused request
// leaves, which the decision reported (dref, the tenth value of ARGV, and
// flag 32 if that state is marked), refilled from t1 to now: exact, with
// the debt charges, carries and marks of the request standing and its
// takes undone, as on one Redis. Otherwise the take's -n·per units count
// as far as the bucket's debt stayed above them since: the give-back
// returns the least of -n·per, d1 − dref (what the takes still added when
// the decision ended: its own request's clamps and cut charges absorb
// them too), the debt now, and every point after vd
// (the debt between writes only falls by refill, so its low points are
// at writes and now). A refill to full, a clamp or a carry, a cut charge
// or another give-back after the decision absorbed what a point records;
// returning more could lift the bucket above what it would hold had the
// request never taken. The give-back then lowers the points after vd by
// what it returned (for the give-backs still to come: their points had
// this take in them). It returns nothing to a key absent (full since), to
// one whose version is below vd (rewritten untracked), and later than the
// horizon. A bucket whose parameters changed since is given nothing back,
// and not written: carrying it back would undo the later request's limit.
// A give-back that returns nothing writes nothing. One that brings the
// key back to full deletes it, or marks it if the key's run of debt began
// at a mark: a tracked key's version carries the bit ("ver" then "m"),
// set when a write leaves debt on a key read marked, clamped full by a
// carry, or untracked in debt (unknown: the cautious reading). A run
// begun at a mark that refill brings back to full is the mark again (a
// mark's debt is 0, so refill never ended one); read under another limit
// it is carried as the mark (its balance, not a full bucket) within the
// horizon of the key's last write, where a take in it may still wait for
// its give-back (a review's TestMarkedRunCarriedAsMark: a refused take
// from a mark, refilled, carried as full, 16 through a burst of 10), and
// as full after it, as in memory. Its key lives at
// least as long as the mark would have (PX no shorter than the key's, if
// read marked or in such a run, or than a fill from empty for a mark the
// request made; not the PTTL of a plain bucket the request clamped): else a refused
// take from a mark, refilled before its give-back, would leave a full
// bucket where the mark was.
//
// It returns {admitted, then per hit: ok, remaining, reset, sub, d, t,
// dref, marked, refmark, ver},
// each of the bucket right after that hit, as the decision leaves it (the
// running debt with every take if admitted, with the debt charges only if
// refused), so that two hits of one key report the first's take, then
// both, as the last of a key reports the bucket after the decision:
// remaining in whole tokens (negative in debt), reset the ticks from the
// current tick's start until the bucket is full (0 when full, -1 never),
// sub the microseconds already gone of the current tick, d and t the
// bucket's debt and tick (a give-back's d1 and t1, from a key's last hit);
// and of the key after the decision: dref the
// debt a refused request leaves, marked 1 if the decision wrote it marked,
// refmark 1 if a refused request leaves it marked (for a give-back), ver
// the version the script wrote (0 if it wrote none or the key is not
// tracked).
const src = `
local function idiv(a, b)
  local r = math.floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
local function cdiv(a, b) return idiv(a + b - 1, b) end
local function refill(d, t, m, now)
  if now > t then
    if m > 0 then
      local dt = now - t
      if dt > cdiv(d, m) then d = 0 else d = math.max(0, d - dt * m) end
    end
    t = now
  end
  return d, t
end
local function maxdebt(s) return 2 * s.capU end
-- horizon: a give-back later than this after its decision (µs) gets
-- nothing back; points older than it are dropped. keep: points per key.
local horizon, keep = 10000000, 8
-- points returns the points a tracked key keeps after a write of version
-- nv and debt d at time us (see "Tracked keys" above).
local function points(s, nv, d, us)
  -- pv, ph: the points kept, oldest first, their debts rising
  local pv, ph, n = {}, {}, 0
  local sv, sh = s.pv, s.ph
  if sv then
    for j = 1, #sv do
      if sv[j] >= us - horizon then n = n + 1; pv[n], ph[n] = sv[j], sh[j] end
    end
  end
  if s.gb then
    -- what the take given back left in the points after its decision,
    -- then only those below every later one (reversed into sv, sh)
    local lo, m = math.huge, 0
    for j = n, 1, -1 do
      local h = ph[j]
      if pv[j] > s.gb.vd then h = math.max(0, h - s.gb.g) end
      if h < lo then m = m + 1; sv[m], sh[m] = pv[j], h; lo = h end
    end
    for j = 1, m do pv[j], ph[j] = sv[m + 1 - j], sh[m + 1 - j] end
    n = m
  end
  local p = math.min(s.pre, d)
  if s.conv or s.sat or (s.raw and not sv) then p = 0 end
  while n > 0 and ph[n] >= p do n = n - 1 end
  n = n + 1
  pv[n], ph[n] = nv, p
  while n > keep do
    -- merge the two closest neighbours, keeping the lower point: a
    -- give-back between them gets less back, never more
    local bi, bd = 1, math.huge
    for j = 1, n - 1 do
      if ph[j + 1] - ph[j] < bd then bi, bd = j, ph[j + 1] - ph[j] end
    end
    ph[bi + 1] = ph[bi]
    for j = bi, n - 1 do pv[j], ph[j] = pv[j + 1], ph[j + 1] end
    n = n - 1
  end
  local out = {}
  for j = 1, n do out[j] = string.format('%d:%d', nv - pv[j], ph[j]) end
  -- the receipts within the horizon, newest last, at most keep
  local rc = {}
  for _, v in ipairs(s.rc or {}) do
    if v >= us - horizon then rc[#rc + 1] = v end
  end
  if s.newrc then rc[#rc + 1] = s.newrc end
  if #rc == 0 then return table.concat(out, ',') end
  local r = {}
  for j = math.max(1, #rc - keep + 1), #rc do r[#r + 1] = string.format('%d', nv - rc[j]) end
  return table.concat(out, ',') .. ' ' .. table.concat(r, ',')
end
-- carry converts debt d of a bucket of capacity ocap units, oper units a
-- token, into the units of s.
local function carry(d, ocap, oper, s, full)
  if d == 0 and full then return 0 end
  local b = ocap - d
  local whole = idiv(b, oper)
  local frac = b - whole * oper
  local capacity = idiv(s.capU, s.per)
  if whole >= capacity then return 0 end
  if whole < -capacity then return maxdebt(s) end
  local f
  if frac < math.floor(9007199254740992 / s.per) - 1 then
    f = idiv(frac * s.per, oper)
  else
    f = math.max(0, math.floor(frac / oper * s.per) - 2)
  end
  local nb = whole * s.per + f
  if nb > s.capU then nb = s.capU end
  return s.capU - nb
end
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local st, okv, hs, all = {}, {}, {}, 1
for i = 1, #KEYS do
  local b = (i - 1) * 11
  local capU, per, m, q = tonumber(ARGV[b+1]), tonumber(ARGV[b+2]), tonumber(ARGV[b+3]), tonumber(ARGV[b+4])
  local n, flags, sig = tonumber(ARGV[b+5]), tonumber(ARGV[b+6]), ARGV[b+7]
  local shadow, debt = flags % 2 == 1, math.floor(flags / 2) % 2 == 1
  if math.floor(flags / 4) % 2 == 1 then all = 0 end
  local ok = 0
  if capU == 0 then
    if n == 0 then ok = 1 elseif not shadow then all = 0 end
  else
    local k = KEYS[i]
    local s = st[k]
    local now = idiv(us, q)
    if not s then
      s = {d = 0, t = now, capU = capU, per = per, m = m, q = q, sig = sig, now = now, sub = us - now * q, full = true, rver = 0}
      local v = redis.call('GET', k)
      s.raw = v
      if v then
        local a = string.find(v, ' ', 1, true)
        local c = string.find(v, ' ', a + 1, true)
        local d, t = tonumber(string.sub(v, 1, a - 1)), tonumber(string.sub(v, a + 1, c - 1))
        local vsig = string.sub(v, c + 1)
        -- a sig ending in :c marks a bucket full only by a clamp, which
        -- carries its balance (an older script, reading another sig,
        -- carries it as a full bucket, as it always did)
        local clamped = string.sub(vsig, -2) == ':c'
        if clamped then vsig, d = string.sub(vsig, 1, -3), 0 end
        -- a tracked key's version and points follow its sig
        local e = string.find(vsig, ' ', 1, true)
        if e then
          local rest = string.sub(vsig, e + 1)
          vsig = string.sub(vsig, 1, e - 1)
          local f = string.find(rest, ' ', 1, true)
          if f then
            local pv, ph, n = {}, {}, 0
            local vt = string.sub(rest, 1, f - 1)
            -- m: the key's run of debt began at a clamp's mark
            if string.sub(vt, -1) == 'm' then vt, s.runm = string.sub(vt, 1, -2), true end
            s.rver, s.pv, s.ph = tonumber(vt), pv, ph
            local g = string.find(rest, ' ', f + 1, true)
            local pts = string.sub(rest, f + 1, (g or 0) - 1)
            for a, h in string.gmatch(pts, '(%d+):(%d+)') do
              n = n + 1
              pv[n], ph[n] = s.rver - tonumber(a), tonumber(h)
            end
            if g then
              -- receipts: the decisions given back, newest last
              s.rc = {}
              for a in string.gmatch(string.sub(rest, g + 1), '%d+') do s.rc[#s.rc + 1] = s.rver - tonumber(a) end
            end
          else
            s.rver = tonumber(rest)
          end
        end
        s.rd, s.rt, s.rsig, s.rcl = d, t, vsig, clamped
        -- a mark begins a run clamped; so does an untracked key in debt,
        -- whose start is unknown (the cautious reading)
        if clamped or not s.pv then s.runm = true end
        -- the run bit as read: the key's own expiry is then the mark's
        s.rm = s.runm
        if vsig == sig then
          s.d, s.t = refill(d, t, m, now)
          s.full = s.d == 0 and not clamped
        else
          local f = {}
          for w in string.gmatch(vsig, '%d+') do f[#f + 1] = tonumber(w) end
          d = refill(d, t, f[3], idiv(us, f[4]))
          -- a tracked run begun at a mark, refilled to full within the
          -- horizon of its last write (a take in it may wait for its
          -- give-back), is the mark again (below) under another limit
          -- too: it carries its balance, not a full bucket
          local mk = clamped or d == 0 and s.runm and s.pv ~= nil and us - s.rver <= horizon
          s.d, s.carried, s.conv, s.full = carry(d, f[1], f[2], s, not mk), true, true, d == 0 and not mk
          if s.d == 0 and not s.full then s.runm, s.runc = true, true end
        end
        -- Refilled to full: a new run from a full bucket, unless the run
        -- began at a mark (its key lives at least as long as the mark
        -- would have, below): then it is the mark again. (A refused
        -- take from a mark, refilled before its give-back, would else
        -- turn the mark into a full bucket.)
        if s.full and s.runm and s.pv then s.full = false end
        if s.full then s.runm = false end
      end
      s.all, s.dbt, s.fa, s.fd, s.pre = s.d, s.d, s.full, s.full, s.d
      st[k] = s
    elseif s.sig ~= sig then
      -- one key under two limits in one request
      local ocap, oper = s.capU, s.per
      s.capU, s.per, s.m, s.q, s.sig = capU, per, m, q, sig
      s.all, s.dbt = carry(s.all, ocap, oper, s, s.fa), carry(s.dbt, ocap, oper, s, s.fd)
      if s.all == 0 and not s.fa or s.dbt == 0 and not s.fd then s.runm, s.runc = true, true end
      s.t, s.now, s.sub, s.carried, s.conv = now, now, us - now * q, true, true
    end
    if math.floor(flags / 64) % 2 == 1 then s.track = true end
    local c = n * s.per
    if n < 0 then
      ok, s.gback = 1, true
      local d1, t1, dref, vd = tonumber(ARGV[b+8]), tonumber(ARGV[b+9]), tonumber(ARGV[b+10]), tonumber(ARGV[b+11])
      local same
      if math.floor(flags / 16) % 2 == 1 then
        same = s.rcl
      else
        same = not s.rcl and d1 > 0 and s.rd == d1
      end
      same = same and s.raw and s.rsig == sig and s.rt == t1 and s.rver == vd
      local dup = false
      for _, v in ipairs(s.rc or {}) do
        if v == vd then dup = true end
      end
      if vd > 0 and not s.carried then s.newrc = vd end
      if dup then
        -- a give-back done already, sent again (the store's clients
        -- do not resend a script; a client or proxy that does): nothing
        s.newrc = nil
      elseif same then
        -- untouched since the decision wrote it: set the state a refused
        -- request leaves, which the decision computed (its debt charges,
        -- its carries and marks; no take)
        s.all, s.t = refill(dref, t1, s.m, s.now)
        s.taken, s.full, s.carried = true, true, false
        s.fa = math.floor(flags / 32) % 2 == 0
      elseif not s.carried then
        -- the take still counts as far as the bucket's debt stayed
        -- above it at every point since the decision (none for a key not
        -- tracked since)
        local g = 0
        if vd > 0 and s.rver >= vd and vd <= us and us - vd <= horizon then
          -- no more than the take still added when its decision ended
          -- (its own request's clamps and cut charges absorb it too)
          g = math.min(-c, s.all, math.max(0, d1 - dref))
          for j, v in ipairs(s.pv or {}) do
            if v > vd and s.ph[j] < g then g = s.ph[j] end
          end
        end
        if g > 0 then
          s.gb = {vd = vd, g = g}
          s.all, s.taken = s.all - g, true
          -- Given back to full, the key is full again if its run of debt
          -- began at a full bucket, and full only by a clamp (marked) if
          -- it began at a mark: the run's bit says which, whichever take
          -- began it. A mark is full under this limit and carries its
          -- capacity into another: never more than a full bucket.
          if s.runm then s.full, s.carried = false, true else s.fa, s.fd = true, true end
        end
      end
    else
      if c <= s.capU - s.all then ok = 1 end
      if debt then
        local md = maxdebt(s)
        if c > md - s.all then s.all, s.sat = md, true else s.all = s.all + c end
        if c > md - s.dbt then s.dbt, s.sat = md, true else s.dbt = s.dbt + c end
        s.charged = true
      elseif ok == 1 and n > 0 then
        s.all, s.taken = s.all + c, true
      end
      if ok == 0 and not shadow then all = 0 end
    end
    s.fa, s.fd = s.fa and s.all == 0, s.fd and s.dbt == 0
    hs[i] = {all = s.all, dbt = s.dbt, t = s.t, now = s.now}
  end
  okv[i] = ok
end
for k, s in pairs(st) do
  local d, dirty = s.dbt, s.carried or s.charged
  if all == 1 then d, dirty = s.all, dirty or s.taken end
  -- a give-back that found the key under another limit returns nothing
  -- and writes nothing: carrying it back would undo a later request's
  -- limit (its rate, its debt)
  if s.gback and s.conv then dirty = false end
  -- what a refused request writes, for a split give-back to restore
  s.rmark = s.dbt == 0 and (not s.fd or not s.full and s.carried)
  if dirty then
    local fl = s.fd
    if all == 1 then fl = s.fa end
    local ver, pts = '', ''
    if s.track then
      s.nver = math.max(us, s.rver + 1)
      ver = string.format(' %d', s.nver)
      if s.runm and d > 0 then ver = ver .. 'm' end
    end
    if d == 0 and (not fl or not s.full and s.carried) then
      s.wmark = true
      -- full only by a carry's clamp (or a give-back to one): marked
      local v = string.format('0 %d ', s.t) .. s.sig .. ver .. ':c'
      if s.m > 0 then
        redis.call('SET', k, v, 'PX', string.format('%d', cdiv(cdiv(s.capU, s.m) * s.q, 1000)))
      else
        redis.call('SET', k, v)
      end
    elseif d == 0 then
      redis.call('DEL', k)
    else
      if s.track then ver = ver .. ' ' .. points(s, s.nver, d, us) end
      local v = string.format('%d %d ', d, s.t) .. s.sig .. ver
      local full = 0
      if s.m > 0 then full = s.t - s.now + cdiv(d, s.m) end
      if s.m > 0 and full < 1125899906842624 / s.q then
        local px = cdiv(full * s.q - s.sub, 1000)
        if s.track and s.runm then
          -- a run begun at a mark lives at least as long as the mark
          -- would have: the key's own expiry if it was read in such a run
          -- (a mark, or a run begun at one), or a fill from empty for a
          -- mark this request made (not the expiry of the plain bucket it
          -- carried: a review found a mark made from a bucket of 10 an
          -- hour living its 6 minutes, not its second)
          if s.rm then px = math.max(px, redis.call('PTTL', k)) end
          if s.runc then px = math.max(px, cdiv(cdiv(s.capU, s.m) * s.q, 1000)) end
        end
        redis.call('SET', k, v, 'PX', string.format('%d', px))
      else
        redis.call('SET', k, v)
      end
    end
  end
end
local out = {all}
for i = 1, #KEYS do
  if tonumber(ARGV[(i - 1) * 11 + 1]) == 0 then
    for _, x in ipairs({okv[i], 0, 0, 0, 0, 0, 0, 0, 0, 0}) do out[#out + 1] = x end
  else
    -- hit i's own state, right after it, under its own parameters
    local h, b = hs[i], (i - 1) * 11
    local capU, per, m, q = tonumber(ARGV[b+1]), tonumber(ARGV[b+2]), tonumber(ARGV[b+3]), tonumber(ARGV[b+4])
    local fin = h.dbt
    if all == 1 then fin = h.all end
    local reset = 0
    if fin > 0 then
      if m > 0 then reset = h.t - h.now + cdiv(fin, m) else reset = -1 end
    end
    out[#out + 1] = okv[i]
    out[#out + 1] = idiv(capU - fin, per)
    out[#out + 1] = reset
    out[#out + 1] = us - h.now * q
    out[#out + 1] = fin
    out[#out + 1] = h.t
    local s = st[KEYS[i]]
    out[#out + 1] = s.dbt
    if s.wmark then out[#out + 1] = 1 else out[#out + 1] = 0 end
    if s.rmark then out[#out + 1] = 1 else out[#out + 1] = 0 end
    out[#out + 1] = s.nver or 0
  end
end
return out
`

// script and rueidisScript run src with EVALSHA, and EVAL (which loads it)
// on NOSCRIPT, through go-redis and rueidis.
var (
	script        = redis.NewScript(src)
	rueidisScript = rueidis.NewLuaScript(src)
)
