# Latchkey's image: a static binary on a distroless, non-root base.
#
#   docker build -t latchkey:latest .
#
# The base images are build arguments so a build can substitute mirrors or
# local copies; GOPROXY is passed through to the module download.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
ARG GOPROXY=https://proxy.golang.org,direct
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOPROXY=${GOPROXY}
WORKDIR /src
# Modules first, so editing the code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/latchkey ./cmd/server

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/latchkey /usr/local/bin/latchkey
# Listen on every interface of the container; point LATCHKEY_REDIS_URL at
# Redis (without it the server refuses a non-loopback address unless
# LATCHKEY_DEV=true, which runs the embedded store).
ENV LATCHKEY_ADDR=:8080
EXPOSE 8080
# distroless's "nonroot" user, numeric so runtimes can verify it is not root.
USER 65532:65532
# The binary probes its own /healthz: the image has no shell and no curl.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/latchkey", "-healthcheck"]
ENTRYPOINT ["/usr/local/bin/latchkey"]
