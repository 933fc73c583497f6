-- luacost.lua: what the operations the redisbucket script could use cost
-- inside Redis's Lua, in ns per operation (each timed over N iterations of
-- a loop, the empty loop's cost included; redis.call('TIME') brackets each).
-- Run: redis-cli -p PORT --eval redisbucket/testdata/luacost.lua
-- It touches no key. The script's doc (script.go) cites a run of it.
local N = 200000
local function t() local x = redis.call('TIME'); return tonumber(x[1]) * 1e6 + tonumber(x[2]) end
local h = '6:second 1000000000000 1000 1 1'
local rec = h .. ' 12345678 1733100000123456'
local bin = struct.pack('<dddd', 1000000000000, 1000, 1, 1)
local binrec = struct.pack('<dd', 12345678, 1733100000123456)
local mp = cmsgpack.pack({1000000000000, 1000, 1, 1})
local out = {}
local s0 = t()
for i = 1, N do local a, b, c, d = string.match(h, ' (%d+) (%d+) (%d+) (%d+)$') end
local s1 = t(); out[#out+1] = 'match4 ' .. (s1 - s0) * 1000 / N
for i = 1, N do local a = tonumber('1000000000000') end
local s2 = t(); out[#out+1] = 'tonumber ' .. (s2 - s1) * 1000 / N
for i = 1, N do local a, b, c, d = struct.unpack('<dddd', bin) end
local s3 = t(); out[#out+1] = 'struct.unpack4 ' .. (s3 - s2) * 1000 / N
for i = 1, N do local x = cmsgpack.unpack(mp) end
local s4 = t(); out[#out+1] = 'msgpack.unpack4 ' .. (s4 - s3) * 1000 / N
for i = 1, N do local x = string.format(' %d %d', 12345678, 1733100000123456) end
local s5 = t(); out[#out+1] = 'format2 ' .. (s5 - s4) * 1000 / N
for i = 1, N do local x = struct.pack('<dd', 12345678, 1733100000123456) end
local s6 = t(); out[#out+1] = 'struct.pack2 ' .. (s6 - s5) * 1000 / N
for i = 1, N do local sd, st, e = string.match(rec, '^(%d+) (%d+)()', #h + 2) end
local s7 = t(); out[#out+1] = 'matchrec ' .. (s7 - s6) * 1000 / N
for i = 1, N do local ok = string.sub(rec, 1, #h) == h end
local s8 = t(); out[#out+1] = 'subeq ' .. (s8 - s7) * 1000 / N
for i = 1, N do local x = h .. ' 12345678 1733100000123456' end
local s9 = t(); out[#out+1] = 'concat ' .. (s9 - s8) * 1000 / N
local function idiv(a, b) if b == 1 then return a end local r = math.floor(a / b) return r end
for i = 1, N do local x = idiv(i, 7) end
local s10 = t(); out[#out+1] = 'idivcall ' .. (s10 - s9) * 1000 / N
for i = 1, N do local x = struct.unpack('<dd', binrec) end
local s11 = t(); out[#out+1] = 'struct.unpack2 ' .. (s11 - s10) * 1000 / N
for i = 1, N do local L = {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0} end
local s12 = t(); out[#out+1] = 'table18 ' .. (s12 - s11) * 1000 / N
for i = 1, N do local x = string.byte(rec, 10) == 32 end
local s13 = t(); out[#out+1] = 'byte ' .. (s13 - s12) * 1000 / N
return out
