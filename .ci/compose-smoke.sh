#!/usr/bin/env bash
# Smoke test of docker-compose.yml and docker-compose.cluster.yml with images
# that already exist locally, one stack after the other: up (no build, no
# pull), /readyz green on Redis, one acquire and release and one inline
# rate-limit decision through the published port, down -v. On the cluster
# stack, the join job must have exited 0 and every node must report
# cluster_state:ok first. Everything runs under the compose project given,
# which is removed again after each stack, also on failure.
# Usage: REDIS_IMAGE=... LATCHKEY_IMAGE=... compose-smoke.sh PROJECT
set -euo pipefail
project=${1:?usage: compose-smoke.sh PROJECT}
: "${REDIS_IMAGE:?set REDIS_IMAGE}" "${LATCHKEY_IMAGE:?set LATCHKEY_IMAGE}"
cd "$(dirname "$0")/.."

# Publish on a loopback port the engine picks, so a busy 8080 cannot collide.
export REDIS_IMAGE LATCHKEY_IMAGE LATCHKEY_PUBLISH=127.0.0.1:
file=docker-compose.yml
dc() { docker-compose --ansi never -p "$project" -f "$file" "$@"; }
down() { dc down -v --remove-orphans >/dev/null 2>&1 || true; }
headers=$(mktemp)
trap 'rm -f "$headers"; down' EXIT

fail() {
  echo "compose smoke ($file): $*" >&2
  dc ps >&2 || true
  dc logs --no-color 2>&1 | tail -n 50 >&2 || true
  exit 1
}

# wait_ready waits for /readyz to say ready on a Redis store.
wait_ready() {
  local ready
  for _ in $(seq 1 90); do
    if ready=$(curl -fsS --max-time 2 "$base/readyz" 2>/dev/null) &&
      [ "$(jq -r '.status' <<<"$ready")" = ready ] && [[ $(jq -r '.store' <<<"$ready") == redis* ]]; then
      echo "readyz: $ready"
      return 0
    fi
    sleep 1
  done
  fail "/readyz never reported ready on redis"
}

# lock_and_limit takes and releases the lock NAME, then asks an inline limit
# of 2 per minute on the key NAME three times: allowed, allowed, denied.
lock_and_limit() {
  local name=$1 body token released
  body=$(curl -fsS --max-time 5 -D "$headers" -X POST -H 'Content-Type: application/json' \
    -d '{"ttl":"30s"}' "$base/v1/locks/$name") || fail "acquire $name failed"
  token=$(awk -F': *' 'tolower($1) == "lock-token" {gsub(/\r/, "", $2); print $2}' "$headers")
  [ -n "$token" ] || fail "acquire gave no Lock-Token: $body"
  echo "acquired: $body"
  released=$(curl -fsS --max-time 5 -X DELETE -H "Lock-Token: $token" "$base/v1/locks/$name") ||
    fail "release $name failed"
  [ "$(jq -r .released <<<"$released")" = true ] || fail "release said $released"
  echo "released: $released"
  local want got i
  for i in 1 2 3; do
    want=200
    [ "$i" = 3 ] && want=429
    got=$(curl -sS --max-time 5 -o "$headers" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      -d "{\"key\":\"$name\",\"limit\":2,\"window\":\"1m\"}" "$base/v1/ratelimit/check")
    [ "$got" = "$want" ] || fail "rate-limit check $i answered $got, want $want: $(cat "$headers")"
  done
  echo "rate limit: allowed, allowed, denied: $(cat "$headers")"
}

echo "--- $file"
dc config -q
dc up -d --no-build
base=http://$(dc port latchkey 8080)
echo "latchkey published at $base"
wait_ready
lock_and_limit compose-smoke
down

file=docker-compose.cluster.yml
echo "--- $file"
dc config -q
# Latchkey starts only once the join job has exited 0 (depends_on), so up
# itself fails when the cluster cannot be created.
dc up -d --no-build || fail "up failed"
[ "$(docker inspect -f '{{.State.ExitCode}}' "$(dc ps -q redis-cluster-create)")" = 0 ] ||
  fail "the cluster join job failed"
for n in 1 2 3 4 5 6; do
  info=$(dc exec -T "redis-$n" redis-cli cluster info | tr -d '\r')
  grep -qx 'cluster_state:ok' <<<"$info" || fail "redis-$n: $(grep cluster_state <<<"$info")"
done
primaries=$(dc exec -T redis-1 redis-cli cluster nodes | grep -c master || true)
replicas=$(dc exec -T redis-1 redis-cli cluster nodes | grep -c slave || true)
[ "$primaries/$replicas" = 3/3 ] || fail "cluster has $primaries primaries and $replicas replicas, want 3/3"
echo "cluster: 3 primaries, 3 replicas, every node cluster_state:ok"
base=http://$(dc port latchkey 8080)
echo "latchkey published at $base"
wait_ready
# Lock names in slots 8824, 4767 and 13021: one on each primary's third of the slots.
for name in compose-smoke-a compose-smoke-f compose-smoke-d; do lock_and_limit "$name"; done
down
echo "compose smoke: ok"
