#!/bin/sh
# Builds ear-sandbox:local from Debian's busybox-static, with no registry. Usage: build.sh [repo:tag]
set -eu
cd "$(dirname "$0")/../.."
exec npx tsx tools/sandbox-image/build.ts "$@"
