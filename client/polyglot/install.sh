#!/usr/bin/env bash
# Installs what the polyglot tests (client/polyglot) need; idempotent.
#   /usr/bin/python3: Debian's python3-grpcio and python3-protobuf (apt, as root)
#   node_modules/ here: @grpc/grpc-js and @grpc/proto-loader, as package-lock.json pins them
set -euo pipefail
cd "$(dirname "$0")"

if ! /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3-grpcio python3-protobuf >/dev/null
fi

lock="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$(cat node_modules/.package-lock.sha256 2>/dev/null)" != "$lock" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock" >node_modules/.package-lock.sha256
fi
