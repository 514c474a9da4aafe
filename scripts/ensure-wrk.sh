#!/usr/bin/env bash
# The enqueue API benchmark (bench/enqueue_api.py) loads the API with wrk (Debian's package)
# when it is installed: its client costs about a fifth of aiohttp's CPU per request, which
# matters on a 2-core machine shared with the server. Install it when absent and this runs
# as root with apt-get; otherwise the benchmark falls back to aiohttp and says so.
set -uo pipefail

if command -v wrk >/dev/null 2>&1; then
  echo "wrk: $(command -v wrk)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "wrk: absent and cannot be installed here (needs root and apt-get); the enqueue API" \
    "benchmark will load with aiohttp" >&2
  exit 0
fi
echo "wrk: installing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q wrk >/tmp/speedtier-wrk-install.log 2>&1 ||
  { apt-get update -q >>/tmp/speedtier-wrk-install.log 2>&1 &&
    apt-get install -y -q wrk >>/tmp/speedtier-wrk-install.log 2>&1; }
if command -v wrk >/dev/null 2>&1; then
  echo "wrk: installed"
else
  echo "wrk: could not be installed (see /tmp/speedtier-wrk-install.log); the enqueue API" \
    "benchmark will load with aiohttp" >&2
fi
exit 0
