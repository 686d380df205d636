#!/usr/bin/env bash
# Builds local stand-ins for the Dockerfile's base images, with no base image
# and no registry, and imports them:
#   GO_IMAGE       golang:1.26-bookworm's role: busybox-static's applets (RUN
#                  needs /bin/sh), the host's Go toolchain, the CA bundle;
#   RUNTIME_IMAGE  distroless static:nonroot's role: passwd/group with the
#                  nonroot user 65532, the CA bundle, zoneinfo, and no shell.
# Usage: base-images.sh GO_IMAGE RUNTIME_IMAGE   (needs root: files owned by 65532)
set -euo pipefail
go_image=${1:?usage: base-images.sh GO_IMAGE RUNTIME_IMAGE}
runtime_image=${2:?usage: base-images.sh GO_IMAGE RUNTIME_IMAGE}
work=$(mktemp -d -t latchkey-base-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

import_dir() { # DIR IMAGE --change...
  local dir=$1 image=$2
  shift 2
  tar -C "$dir" --numeric-owner -c . | docker import "$@" - "$image" >/dev/null
  echo "built $image ($(du -sh "$dir" | cut -f1))"
}

# Go builder.
g=$work/golang
mkdir -p "$g"/{bin,etc/ssl/certs,tmp,root,go,usr/local}
chmod 1777 "$g/tmp"
cp /bin/busybox "$g/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$g/bin/$a" ] || ln -s busybox "$g/bin/$a"; done
cp -a "$(go env GOROOT)" "$g/usr/local/go"
cp /etc/ssl/certs/ca-certificates.crt "$g/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$g/etc/passwd"
printf 'root:x:0:\n' >"$g/etc/group"
import_dir "$g" "$go_image" \
  --change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV GOPATH=/go' --change 'ENV HOME=/root' --change 'ENV GOTOOLCHAIN=local' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'WORKDIR /go'

# Static runtime.
s=$work/static
mkdir -p "$s"/{etc/ssl/certs,tmp,home/nonroot,usr/share}
chmod 1777 "$s/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$s/etc/ssl/certs/"
cp -a /usr/share/zoneinfo "$s/usr/share/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$s/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$s/etc/group"
chown 65532:65532 "$s/home/nonroot"
import_dir "$s" "$runtime_image" \
  --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
