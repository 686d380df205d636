#!/usr/bin/env bash
# Starts or stops a Redis Cluster of three primaries and three replicas from
# redis-server processes on 127.0.0.1, for the tests and for trying Latchkey
# on a cluster by hand.
#
#   bash .ci/redis-cluster.sh start DIR BASEPORT   # ports BASEPORT..BASEPORT+5
#   bash .ci/redis-cluster.sh node DIR PORT        # restart one node of DIR
#   bash .ci/redis-cluster.sh stop DIR
#
# start returns once every node reports cluster_state:ok and every node
# agrees on the slots; it prints the seed URL for LATCHKEY_REDIS_URL:
#   redis://127.0.0.1:BASEPORT?addr=127.0.0.1:BASEPORT+1&addr=...
# Each node writes its config, log and pid file in DIR/<port>/; stop kills the
# processes whose pid files are there.
set -euo pipefail

usage() { echo "usage: $0 start DIR BASEPORT | node DIR PORT | stop DIR" >&2; exit 2; }

# start_node DIR PORT starts (or restarts, keeping its nodes.conf) the node
# on PORT, daemonized, its files in DIR/PORT/. With
# cluster-require-full-coverage no, a node keeps serving its own slots while
# another primary is down: only that primary's slots fail until its replica
# is promoted.
start_node() {
  mkdir -p "$1/$2"
  redis-server --port "$2" --bind 127.0.0.1 --daemonize yes \
    --dir "$1/$2" --pidfile "$1/$2/redis.pid" --logfile "$1/$2/redis.log" \
    --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 1000 --cluster-replica-validity-factor 0 \
    --cluster-require-full-coverage no \
    --save '' --appendonly no
}

[ $# -ge 2 ] || usage
cmd=$1 dir=$2

case $cmd in
start)
  [ $# -eq 3 ] || usage
  base=$3
  mkdir -p "$dir"
  ports=()
  for i in 0 1 2 3 4 5; do
    p=$((base + i))
    ports+=("$p")
    start_node "$dir" "$p"
  done
  # Each port must answer from the node started here: a port another
  # process took first fails the start (the caller may retry elsewhere).
  for p in "${ports[@]}"; do
    mine=0
    for _ in $(seq 100); do
      pid=$(cat "$dir/$p/redis.pid" 2>/dev/null || true)
      info=$(redis-cli -p "$p" info server 2>/dev/null || true)
      if [ -n "$pid" ] && grep -qx "process_id:$pid" <<<"${info//$'\r'/}"; then
        mine=1
        break
      fi
      sleep 0.1
    done
    [ $mine = 1 ] || { echo "port $p: no redis-server of $dir answers (port taken?)" >&2; exit 1; }
  done
  addrs=()
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
    cat "$dir/create.log" >&2
    exit 1
  }
  # Ready: every node says ok and sees every slot assigned, and the replicas
  # have found their primaries.
  for _ in $(seq 300); do
    ready=1
    for p in "${ports[@]}"; do
      info=$(redis-cli -p "$p" cluster info 2>/dev/null || true)
      grep -q 'cluster_state:ok' <<<"$info" || ready=0
      grep -q 'cluster_slots_ok:16384' <<<"$info" || ready=0
      grep -q 'cluster_known_nodes:6' <<<"$info" || ready=0
    done
    replicas=$(redis-cli -p "${ports[0]}" cluster nodes 2>/dev/null | grep -c ' slave ' || true)
    [ "$replicas" = 3 ] || ready=0
    [ $ready = 1 ] && break
    sleep 0.1
  done
  [ $ready = 1 ] || { echo "cluster did not become ready" >&2; exit 1; }
  url="redis://127.0.0.1:${ports[0]}"
  sep='?'
  for p in "${ports[@]:1}"; do
    url+="${sep}addr=127.0.0.1:$p"
    sep='&'
  done
  echo "$url"
  ;;
node)
  [ $# -eq 3 ] || usage
  start_node "$dir" "$3"
  ;;
stop)
  shopt -s nullglob
  for f in "$dir"/*/redis.pid; do
    kill "$(cat "$f")" 2>/dev/null || true
  done
  ;;
*) usage ;;
esac
