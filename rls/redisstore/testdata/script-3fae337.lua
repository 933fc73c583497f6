
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
-- carry converts debt d of a bucket of capacity ocap units, oper units a
-- token, into the units of s.
local function carry(d, ocap, oper, s)
  if d == 0 then return 0 end
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
local st, okv, all = {}, {}, 1
for i = 1, #KEYS do
  local b = (i - 1) * 9
  local capU, per, m, q = tonumber(ARGV[b+1]), tonumber(ARGV[b+2]), tonumber(ARGV[b+3]), tonumber(ARGV[b+4])
  local n, flags, sig = tonumber(ARGV[b+5]), tonumber(ARGV[b+6]), ARGV[b+7]
  local shadow, debt = flags % 2 == 1, math.floor(flags / 2) % 2 == 1
  if flags >= 4 then all = 0 end
  local ok = 0
  if capU == 0 then
    if n == 0 then ok = 1 elseif not shadow then all = 0 end
  else
    local k = KEYS[i]
    local s = st[k]
    local now = idiv(us, q)
    if not s then
      s = {d = 0, t = now, capU = capU, per = per, m = m, q = q, sig = sig, now = now, sub = us - now * q}
      local v = redis.call('GET', k)
      if v then
        local a = string.find(v, ' ', 1, true)
        local c = string.find(v, ' ', a + 1, true)
        local d, t = tonumber(string.sub(v, 1, a - 1)), tonumber(string.sub(v, a + 1, c - 1))
        local vsig = string.sub(v, c + 1)
        if vsig == sig then
          s.d, s.t = refill(d, t, m, now)
        else
          local f = {}
          for w in string.gmatch(vsig, '%d+') do f[#f + 1] = tonumber(w) end
          d = refill(d, t, f[3], idiv(us, f[4]))
          s.d, s.carried = carry(d, f[1], f[2], s), true
        end
      end
      s.all, s.dbt = s.d, s.d
      st[k] = s
    elseif s.sig ~= sig then
      -- one key under two limits in one request
      local ocap, oper = s.capU, s.per
      s.capU, s.per, s.m, s.q, s.sig = capU, per, m, q, sig
      s.all, s.dbt = carry(s.all, ocap, oper, s), carry(s.dbt, ocap, oper, s)
      s.t, s.now, s.sub, s.carried = now, now, us - now * q, true
    end
    local c = n * s.per
    if n < 0 then
      ok = 1
      if not s.carried then
        local left = refill(tonumber(ARGV[b+8]), tonumber(ARGV[b+9]), s.m, s.now)
        s.all, s.taken = math.max(0, s.all - math.min(-c, left)), true
      end
    else
      if c <= s.capU - s.all then ok = 1 end
      if debt then
        local md = maxdebt(s)
        if c > md - s.all then s.all = md else s.all = s.all + c end
        if c > md - s.dbt then s.dbt = md else s.dbt = s.dbt + c end
        s.charged = true
      elseif ok == 1 and n > 0 then
        s.all, s.taken = s.all + c, true
      end
      if ok == 0 and not shadow then all = 0 end
    end
  end
  okv[i] = ok
end
for k, s in pairs(st) do
  local d, dirty = s.dbt, s.carried or s.charged
  if all == 1 then d, dirty = s.all, dirty or s.taken end
  s.fin = d
  if dirty then
    if d == 0 then
      redis.call('DEL', k)
    else
      local v = string.format('%d %d ', d, s.t) .. s.sig
      local full = 0
      if s.m > 0 then full = s.t - s.now + cdiv(d, s.m) end
      if s.m > 0 and full < 1125899906842624 / s.q then
        redis.call('SET', k, v, 'PX', string.format('%d', cdiv(full * s.q - s.sub, 1000)))
      else
        redis.call('SET', k, v)
      end
    end
  end
end
local out = {all}
for i = 1, #KEYS do
  local s = st[KEYS[i]]
  if tonumber(ARGV[(i - 1) * 9 + 1]) == 0 then
    for _, x in ipairs({okv[i], 0, 0, 0, 0, 0}) do out[#out + 1] = x end
  else
    local reset = 0
    if s.fin > 0 then
      if s.m > 0 then reset = s.t - s.now + cdiv(s.fin, s.m) else reset = -1 end
    end
    out[#out + 1] = okv[i]
    out[#out + 1] = idiv(s.capU - s.fin, s.per)
    out[#out + 1] = reset
    out[#out + 1] = s.sub
    out[#out + 1] = s.fin
    out[#out + 1] = s.t
  end
end
return out
