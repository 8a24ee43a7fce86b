#!/usr/bin/env bash
# Debian packages the test suite needs. Installs only what is missing.
set -euo pipefail
need=()
command -v softhsm2-util >/dev/null 2>&1 || need+=(softhsm2)
# The console's browser tests drive Debian's Chromium through Playwright (never a downloaded browser).
test -x /usr/bin/chromium || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
fi
