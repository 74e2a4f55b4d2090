"""Lua scripts behind :class:`~memsvc.working.redis_store.RedisStore`.

Each script is one atomic step on one session. ``KEYS[1]`` is always the
session's index key (``...}:idx``, see :mod:`memsvc.working.keys`); the script
derives the session's other keys from it by replacing the ``idx`` suffix:

    <base>idx      set of user-key names
    <base>task     hash: task-state field -> JSON text
    <base>pad      list of scratchpad entries (JSON), oldest first
    <base>meta     hash: created_at
    <base>k:<name> string: the JSON value of user key <name>, with its own TTL

Only the index is declared: the other names are fixed suffixes or come from
the index, and all share the session's hash tag, so Redis Cluster routes the
script by ``KEYS[1]`` and accepts the others as same-slot keys. Passing one
key instead of four also keeps the command short, which matters because the
client's cost per call grows with its argument count.

``ARGV[1]`` is the idle TTL in ms (``0``: none); script-specific arguments
follow from ``ARGV[2]``. The session's ``created_at`` is taken from the
server's clock (``TIME``, epoch milliseconds), so callers send no timestamp. Scripts
keep the number of Redis calls on hot paths small (``set``: four, ``append``:
three in the common case), since that is what they cost over raw commands.

User values are plain string keys so each can carry its own TTL on Redis 7.0
(no per-field hash expiry before 7.4). An index entry may outlive its value
key when that key expires; scripts that read the index skip and remove such
stale entries, and the index itself always lives at least as long as the
values it names.
"""

from __future__ import annotations

_PRELUDE = """
local index = KEYS[1]
local base = string.sub(index, 1, -4)
local task, pad, meta = base .. 'task', base .. 'pad', base .. 'meta'
local vprefix = base .. 'k:'

-- Mark the session as written: record when it was created and keep task state,
-- scratchpad and metadata alive for the idle TTL. To keep the hot path to one
-- extra call, the three are re-expired together only once their TTL has run
-- down by more than a little slack (1 s or a tenth of the TTL, the smaller),
-- so they outlive the last write by at least idle - slack. A structure created
-- by the script itself gets its TTL from expire_new().
local function now_ms()
  local time = redis.call('TIME')
  return string.format('%d', time[1] * 1000 + math.floor(time[2] / 1000))
end

local function touch(force)
  local idle = tonumber(ARGV[1])
  if idle == 0 then
    if redis.call('HEXISTS', meta, 'created_at') == 0 then
      redis.call('HSET', meta, 'created_at', now_ms())
    end
    return
  end
  local left = redis.call('PTTL', meta)
  if left == -2 then
    redis.call('HSET', meta, 'created_at', now_ms())
  end
  if force or left < idle - math.min(1000, math.floor(idle / 10)) then
    redis.call('PEXPIRE', task, idle)
    redis.call('PEXPIRE', pad, idle)
    redis.call('PEXPIRE', meta, idle)
  end
end

local function expire_new(key)
  if ARGV[1] ~= '0' then
    redis.call('PEXPIRE', key, ARGV[1])
  end
end

-- The live user-key names; stale index entries (expired values) are removed.
local function live_names()
  local names = redis.call('SMEMBERS', index)
  local live = {}
  for i = 1, #names do
    if redis.call('EXISTS', vprefix .. names[i]) == 1 then
      live[#live + 1] = names[i]
    else
      redis.call('SREM', index, names[i])
    end
  end
  return live
end
"""

# ARGV[2] name, ARGV[3] JSON value, ARGV[4] TTL in ms ('0': none), ARGV[5] max keys.
# Returns 1, or 0 when the session already holds max keys (nothing written).
SET_VALUE = (
    _PRELUDE
    + """
local name = ARGV[2]
local ttl = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
-- Adding the name first means an overwrite (the common case) needs no count.
local count = 0
if redis.call('SADD', index, name) == 1 then
  count = redis.call('SCARD', index)
  if count > limit then
    -- Pruning also drops `name` (it has no value yet), which undoes the SADD
    -- if the session is still full: nothing is written.
    if #live_names() >= limit then
      return 0
    end
    redis.call('SADD', index, name)
  end
end
-- The index must outlive every value it names. GT never shortens its TTL
-- (and leaves a persistent index alone); a brand-new index has none yet.
if ttl == 0 then
  redis.call('SET', vprefix .. name, ARGV[3])
  redis.call('PERSIST', index)
else
  redis.call('SET', vprefix .. name, ARGV[3], 'PX', ttl)
  if count == 1 then
    redis.call('PEXPIRE', index, ttl + 1000)
  else
    redis.call('PEXPIRE', index, ttl + 1000, 'GT')
  end
end
touch(false)
return 1
"""
)

# ARGV[2] name. Returns 1 if the value existed.
DELETE_VALUE = (
    _PRELUDE
    + """
local existed = redis.call('DEL', vprefix .. ARGV[2])
redis.call('SREM', index, ARGV[2])
return existed
"""
)

# Returns the live names.
LIST_KEYS = (
    _PRELUDE
    + """
return live_names()
"""
)

# Returns a flat list: name1, value1, name2, value2, ...
GET_VALUES = (
    _PRELUDE
    + """
local names = redis.call('SMEMBERS', index)
local out = {}
for i = 1, #names do
  local value = redis.call('GET', vprefix .. names[i])
  if value then
    out[#out + 1] = names[i]
    out[#out + 1] = value
  else
    redis.call('SREM', index, names[i])
  end
end
return out
"""
)

# Deletes every user value and the index. Returns how many values were live.
CLEAR_VALUES = (
    _PRELUDE
    + """
local names = redis.call('SMEMBERS', index)
local deleted = 0
for i = 1, #names do
  deleted = deleted + redis.call('DEL', vprefix .. names[i])
end
redis.call('DEL', index)
return deleted
"""
)

# ARGV[2..] field, JSON value pairs. Replaces the whole task state.
SET_TASK = (
    _PRELUDE
    + """
redis.call('DEL', task)
for i = 2, #ARGV, 2 do
  redis.call('HSET', task, ARGV[i], ARGV[i + 1])
end
expire_new(task)
touch(false)
return 1
"""
)

# ARGV[2..] field, JSON value pairs. Only when a task state exists; returns the
# whole new state (flat field, value list) or nil.
UPDATE_TASK = (
    _PRELUDE
    + """
if redis.call('EXISTS', task) == 0 then
  return false
end
for i = 2, #ARGV, 2 do
  redis.call('HSET', task, ARGV[i], ARGV[i + 1])
end
touch(false)
return redis.call('HGETALL', task)
"""
)

# ARGV[2] JSON entry, ARGV[3] max entries.
APPEND_SCRATCHPAD = (
    _PRELUDE
    + """
if redis.call('RPUSH', pad, ARGV[2]) == 1 then
  expire_new(pad)
end
redis.call('LTRIM', pad, -tonumber(ARGV[3]), -1)
touch(false)
return 1
"""
)

# Returns how many entries the scratchpad held.
CLEAR_SCRATCHPAD = (
    _PRELUDE
    + """
local count = redis.call('LLEN', pad)
redis.call('DEL', pad)
return count
"""
)

# ARGV[2..]: entries as stored; removes one occurrence of each, returns how many went.
REMOVE_SCRATCHPAD = (
    _PRELUDE
    + """
local removed = 0
for i = 2, #ARGV do
  removed = removed + redis.call('LREM', pad, 1, ARGV[i])
end
return removed
"""
)

# Returns {{name, value, pttl, ...}, {task field, value, ...}, {entries...}}.
SNAPSHOT = (
    _PRELUDE
    + """
local names = redis.call('SMEMBERS', index)
local values = {}
for i = 1, #names do
  local key = vprefix .. names[i]
  local value = redis.call('GET', key)
  if value then
    values[#values + 1] = names[i]
    values[#values + 1] = value
    values[#values + 1] = redis.call('PTTL', key)
  end
end
return {values, redis.call('HGETALL', task), redis.call('LRANGE', pad, 0, -1)}
"""
)

# ARGV[2] number of values n, then n triples (name, JSON value, TTL ms or '0'),
# then the number of task pairs t ('-1': no task state), t (field, JSON) pairs,
# then the scratchpad entries to the end. Wipes the session and writes the new
# state in one step.
RESTORE = (
    _PRELUDE
    + """
local names = redis.call('SMEMBERS', index)
for i = 1, #names do
  redis.call('DEL', vprefix .. names[i])
end
redis.call('DEL', index, task, pad)

local count = tonumber(ARGV[2])
local at = 3
local longest = 0
for _ = 1, count do
  local name, value, ttl = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  if ttl == '0' then
    redis.call('SET', vprefix .. name, value)
    longest = -1
  else
    redis.call('SET', vprefix .. name, value, 'PX', ttl)
    if longest >= 0 and tonumber(ttl) > longest then
      longest = tonumber(ttl)
    end
  end
  redis.call('SADD', index, name)
  at = at + 3
end
if count > 0 and longest > 0 then
  redis.call('PEXPIRE', index, longest + 1000)
end

local task_pairs = tonumber(ARGV[at])
at = at + 1
for _ = 1, task_pairs do
  redis.call('HSET', task, ARGV[at], ARGV[at + 1])
  at = at + 2
end
for i = at, #ARGV do
  redis.call('RPUSH', pad, ARGV[i])
end
touch(true)
return 1
"""
)

# Returns {live keys, scratchpad length, has task (0/1), created_at or false}.
STATS = (
    _PRELUDE
    + """
return {#live_names(), redis.call('LLEN', pad), redis.call('EXISTS', task),
        redis.call('HGET', meta, 'created_at')}
"""
)


# Erasure: delete every key of the session (its values through the index,
# its structures), and the keys in ARGV[2..] that a SCAN found under its tag
# (a value no longer in the index). Returns how many keys existed.
ERASE_SESSION = (
    _PRELUDE
    + """
local names = redis.call('SMEMBERS', index)
local deleted = 0
for i = 1, #names do
  deleted = deleted + redis.call('DEL', vprefix .. names[i])
end
deleted = deleted + redis.call('DEL', index, task, pad, meta)
for i = 2, #ARGV do
  deleted = deleted + redis.call('DEL', ARGV[i])
end
return deleted
"""
)
