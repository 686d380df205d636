-- list_secret: the secret that signs listing cursors, created once and
-- shared by every instance on this Redis.
--
-- KEYS[1]  the secret's key
-- ARGV[1]  a new random secret, kept only when no secret is set yet; ""
--          only reads the secret (opening a cursor changes nothing)
--
-- Reply: the secret in use, "" when there is none.
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1], 'NX')
end
return redis.call('GET', KEYS[1]) or ''
