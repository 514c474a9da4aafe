#!/usr/bin/env bash
# The alert rules' tests (tests/unit/helm/test_alert_rules.py) run `promtool check rules` and
# `promtool test rules`. promtool ships in Debian's `prometheus` package, whose installation
# would also set up and start a Prometheus server: take promtool alone out of the package
# (`apt-get download`, `dpkg-deb -x`) into /usr/local/bin. Without root or apt-get, say why
# the tests will skip. In CI (CI set) a failed install fails.
set -uo pipefail

log=/tmp/speedtier-promtool-install.log
if command -v promtool >/dev/null 2>&1; then
  echo "promtool: $(promtool --version 2>&1 | head -n 1)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "promtool: absent and cannot be installed here (needs root and apt-get); the alert" \
    "rules' tests will skip" >&2
  [ -z "${CI:-}" ] || exit 1
  exit 0
fi
echo "promtool: extracting it from Debian's prometheus package"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch() { (cd "$work" && apt-get download -q prometheus >>"$log" 2>&1); }
fetch || { apt-get update -q >>"$log" 2>&1 && fetch; }
deb=$(ls "$work"/prometheus_*.deb 2>/dev/null | head -n 1)
if [ -n "$deb" ] && dpkg-deb -x "$deb" "$work/root" >>"$log" 2>&1 &&
  install -m 0755 "$work/root/usr/bin/promtool" /usr/local/bin/promtool; then
  echo "promtool: installed $(promtool --version 2>&1 | head -n 1)"
  exit 0
fi
echo "promtool: could not be installed (see $log)" >&2
[ -z "${CI:-}" ] || exit 1
exit 0
