#!/usr/bin/env bash
# Builds a Redis image from Debian's redis-server binary, with no base image and
# no registry: the binaries, the shared libraries ldd lists and busybox's applets
# (testcontainers-go's port check runs /bin/sh, cat, awk and grep) are copied into
# a directory and imported. Usage: redis-image.sh IMAGE_NAME
set -euo pipefail
image=${1:?usage: redis-image.sh IMAGE_NAME}
root=$(mktemp -d -t latchkey-redis-image.XXXXXX)
trap 'rm -rf "$root"' EXIT

copy_with_libs() {
  local bin lib
  for bin in "$@"; do
    mkdir -p "$root$(dirname "$bin")"
    cp -L "$bin" "$root$bin"
    if ldd "$bin" | grep -q 'not found'; then echo "missing library for $bin" >&2; exit 1; fi
    for lib in $(ldd "$bin" | awk '/=> \// {print $3} /^[[:space:]]*\/.*ld-linux/ {print $1}'); do
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

mkdir -p "$root"/{etc,data,tmp,bin,usr/local/bin}
chmod 1777 "$root/tmp"
copy_with_libs /usr/bin/redis-server /usr/bin/redis-cli
cp /bin/busybox "$root/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nredis:x:999:999:redis:/data:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nredis:x:999:\n' > "$root/etc/group"
cat > "$root/usr/local/bin/docker-entrypoint.sh" <<'EOS'
#!/bin/sh
set -e
# Same argument convention as the official redis image's entrypoint.
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi
if [ "$1" = 'redis-server' ]; then
	shift
	# Debian's build keeps protected mode on; the official image compiles it off.
	exec /usr/bin/redis-server "$@" --protected-mode no
fi
exec "$@"
EOS
chmod 0755 "$root/usr/local/bin/docker-entrypoint.sh"
tar -C "$root" --numeric-owner -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
  --change 'CMD ["redis-server"]' \
  --change 'WORKDIR /data' \
  --change 'EXPOSE 6379' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  - "$image" >/dev/null
echo "built $image"
