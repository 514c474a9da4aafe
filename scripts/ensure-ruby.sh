#!/usr/bin/env bash
# The Ruby client's tests (clients/ruby/test, run by tests/e2e/test_ruby_client.py against a
# real `speedtier api`) need Debian's ruby and minitest. Install them when absent and this runs
# as root with apt-get; otherwise say why the tests will skip. In CI (CI set) a failed install
# fails.
set -uo pipefail

log=/tmp/speedtier-ruby-install.log
have() { command -v ruby >/dev/null 2>&1 && ruby -e 'require "minitest"' >/dev/null 2>&1; }

if have; then
  echo "ruby: $(ruby --version) with minitest"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ruby: ruby/minitest absent and cannot be installed here (needs root and apt-get); the" \
    "Ruby client's tests will skip" >&2
  [ -z "${CI:-}" ] || exit 1
  exit 0
fi
echo "ruby: installing ruby and ruby-minitest"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q ruby ruby-minitest >"$log" 2>&1 ||
  { apt-get update -q >>"$log" 2>&1 && apt-get install -y -q ruby ruby-minitest >>"$log" 2>&1; }
if have; then
  echo "ruby: installed $(ruby --version)"
  exit 0
fi
echo "ruby: could not be installed (see $log)" >&2
[ -z "${CI:-}" ] || exit 1
exit 0
