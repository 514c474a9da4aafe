#!/usr/bin/env bash
# The dashboard's browser tests (tests/e2e/test_dashboard_browser.py) drive Debian's chromium,
# headless, through chromedriver. Install both when they are absent and this runs as root
# (CI does); otherwise say why the tests will skip. In CI (CI set) a failed install fails.
set -uo pipefail

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

if have; then
  echo "browser: $(chromium --version 2>/dev/null | head -n 1) with chromedriver"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: chromium/chromedriver absent and cannot be installed here (needs root and" \
    "apt-get); the dashboard's browser tests will skip" >&2
  [ -z "${CI:-}" ] || exit 1
  exit 0
fi
echo "browser: installing chromium and chromium-driver"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium chromium-driver >/tmp/speedtier-browser-install.log 2>&1 ||
  { apt-get update -q >>/tmp/speedtier-browser-install.log 2>&1 &&
    apt-get install -y -q chromium chromium-driver >>/tmp/speedtier-browser-install.log 2>&1; }
if have; then
  echo "browser: installed $(chromium --version 2>/dev/null | head -n 1)"
  exit 0
fi
echo "browser: chromium could not be installed (see /tmp/speedtier-browser-install.log)" >&2
[ -z "${CI:-}" ] || exit 1
exit 0
