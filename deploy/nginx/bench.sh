#!/bin/sh
# bench.sh: how much of nginx's throughput is left when every request asks
# Latchkey first, with deploy/nginx/nginx.conf as shipped.
#
#   deploy/nginx/bench.sh [seconds per run] [rounds]     (default: 8 3)
#
# Needs nginx, redis-server, wrk (Debian: apt-get install nginx-light
# redis-server wrk) and Go; run from the repository root. It starts, on free
# loopback ports, a redis-server, a Latchkey server (built from ./cmd/server)
# and one nginx with the shipped configuration plus two servers of its own:
#   - the app: "return 200" inside the same nginx, so the app costs next to
#     nothing and the comparison is nginx against nginx;
#   - "alone": the same location as the gated one ("/", proxy_pass to the
#     app, whose connections nginx keeps as the shipped upstream says)
#     without auth_request: nginx as its documentation recommends it.
# Then, for each round, wrk (one thread, 64 connections) runs against nginx
# alone and then against the gated location; the result is the median over
# the rounds of gated / alone (paired rounds, as latchbench does: a shared
# machine drifts over seconds). The per-ip policy gets a limit no run reaches, so every gated
# request is an allowed decision taken in Redis. After each gated run the
# script counts the sockets in TIME-WAIT toward Latchkey: near zero when nginx
# keeps its upstream connections, thousands when it does not.
set -eu

secs=${1:-8}
rounds=${2:-3}
root=$(pwd)
[ -f "$root/deploy/nginx/nginx.conf" ] || { echo "run from the repository root" >&2; exit 2; }
for bin in nginx redis-server wrk go ss curl; do
	command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || { echo "missing: $bin" >&2; exit 2; }
done
nginx=$(command -v nginx || echo /usr/sbin/nginx)

dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# free_port prints a loopback TCP port nothing listens on.
free_port() {
	while :; do
		p=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 40000 ))
		ss -Htan "sport = :$p" | grep -q . || { echo "$p"; return; }
	done
}
wait_port() {
	i=0
	until ss -Htln "sport = :$1" | grep -q .; do
		i=$((i + 1)); [ $i -lt 200 ] || { echo "nothing listens on port $1" >&2; exit 1; }
		sleep 0.05
	done
}

rport=$(free_port); lport=$(free_port); aport=$(free_port); gport=$(free_port); nport=$(free_port)

redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
pids="$pids $!"
go build -o "$dir/latchkey" ./cmd/server
cat >"$dir/policies.yaml" <<EOF
policies:
  per-ip:
    limit: 1000000000
    window: 10m
    key: ip
    deny_status: 403
    fail: open
  api-key:
    limit: 3
    window: 10s
    key: header:X-Api-Key
    deny_status: 403
    fail: closed
EOF
wait_port "$rport"
LATCHKEY_ADDR=127.0.0.1:$lport LATCHKEY_REDIS_URL=redis://127.0.0.1:$rport \
	LATCHKEY_RATELIMIT_POLICIES=$dir/policies.yaml LATCHKEY_TRUSTED_PROXIES=127.0.0.1/32 \
	LATCHKEY_LOG_LEVEL=warn "$dir/latchkey" >"$dir/latchkey.log" 2>&1 &
pids="$pids $!"

# The shipped configuration, its addresses replaced, plus the app and "alone".
sed -e "s/server 127.0.0.1:8080;/server 127.0.0.1:$lport;/" \
	-e "s/server 127.0.0.1:3000;/server 127.0.0.1:$aport;/" \
	-e "s/listen 127.0.0.1:8000;/listen 127.0.0.1:$gport;/" \
	-e "s|^http {|http {\n    access_log off;\n    client_body_temp_path $dir/tmp/body;\n    proxy_temp_path $dir/tmp/proxy;\n    fastcgi_temp_path $dir/tmp/fastcgi;\n    uwsgi_temp_path $dir/tmp/uwsgi;\n    scgi_temp_path $dir/tmp/scgi;\n    server { listen 127.0.0.1:$aport; location / { return 200 \"hello from the app\\\\n\"; } }\n    server { listen 127.0.0.1:$nport; location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }|" \
	deploy/nginx/nginx.conf >"$dir/nginx.conf"
mkdir -p "$dir/tmp"
global="daemon off; master_process on; worker_processes auto; pid $dir/nginx.pid; error_log $dir/error.log warn;"
"$nginx" -t -q -p "$dir/tmp" -c "$dir/nginx.conf" -g "$global"
"$nginx" -p "$dir/tmp" -c "$dir/nginx.conf" -g "$global" &
pids="$pids $!"
wait_port "$lport"; wait_port "$gport"; wait_port "$nport"

# Check the wiring: the gated location must answer with Latchkey's headers.
curl -sfi "http://127.0.0.1:$gport/" | grep -qi '^ratelimit:' || { echo "the gated location does not ask Latchkey" >&2; cat "$dir/error.log" >&2; exit 1; }

rps() { wrk -t1 -c64 -d"${secs}s" "$1" | awk '/^Requests\/sec:/ {printf "%d", $2}'; }
ratios=""
for r in $(seq "$rounds"); do
	a=$(rps "http://127.0.0.1:$nport/")
	g=$(rps "http://127.0.0.1:$gport/")
	tw=$(ss -Htan state time-wait "dport = :$lport" | wc -l)
	ratio=$(awk "BEGIN {printf \"%.2f\", $g / $a}")
	echo "round $r: nginx alone $a req/s, with the gate $g req/s ($ratio), TIME-WAIT toward Latchkey: $tw"
	ratios="$ratios $ratio"
done
echo "nginx with the gate / nginx alone, median of $rounds rounds: $(echo $ratios | tr ' ' '\n' | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')"
