#!/usr/bin/env bash
# Smoke test of docker-compose.yml with images that already exist locally:
# up (no build, no pull), /readyz green on Redis, one acquire and release
# through the published port, down -v. Everything runs under its own compose
# project, which is removed again also on failure.
# Usage: REDIS_IMAGE=... LATCHKEY_IMAGE=... compose-smoke.sh PROJECT
set -euo pipefail
project=${1:?usage: compose-smoke.sh PROJECT}
: "${REDIS_IMAGE:?set REDIS_IMAGE}" "${LATCHKEY_IMAGE:?set LATCHKEY_IMAGE}"
cd "$(dirname "$0")/.."

# Publish on a loopback port the engine picks, so a busy 8080 cannot collide.
export REDIS_IMAGE LATCHKEY_IMAGE LATCHKEY_PUBLISH=127.0.0.1:
dc() { docker-compose --ansi never -p "$project" "$@"; }
down() { dc down -v --remove-orphans >/dev/null 2>&1 || true; }
trap down EXIT

dc config -q
dc up -d --no-build
published=$(dc port latchkey 8080)
base=http://$published
echo "latchkey published at $base"
ready=""
for _ in $(seq 1 60); do
  if ready=$(curl -fsS --max-time 2 "$base/readyz" 2>/dev/null) &&
    [ "$(jq -r '.status + "/" + .store' <<<"$ready")" = "ready/redis" ]; then
    break
  fi
  ready=""
  sleep 1
done
if [ -z "$ready" ]; then
  echo "compose smoke: /readyz never reported ready on redis" >&2
  dc ps
  dc logs --no-color | tail -n 50
  exit 1
fi
echo "readyz: $ready"

headers=$(mktemp)
trap 'rm -f "$headers"; down' EXIT
body=$(curl -fsS --max-time 5 -D "$headers" -X POST -H 'Content-Type: application/json' \
  -d '{"ttl":"30s"}' "$base/v1/locks/compose-smoke")
token=$(awk -F': *' 'tolower($1) == "lock-token" {gsub(/\r/, "", $2); print $2}' "$headers")
[ -n "$token" ] || { echo "compose smoke: acquire gave no Lock-Token: $body" >&2; exit 1; }
echo "acquired: $body"
released=$(curl -fsS --max-time 5 -X DELETE -H "Lock-Token: $token" "$base/v1/locks/compose-smoke")
[ "$(jq -r .released <<<"$released")" = true ] || { echo "compose smoke: release said $released" >&2; exit 1; }
echo "released: $released"
echo "compose smoke: ok"
