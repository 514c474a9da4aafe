#!/usr/bin/env bash
# Make sure the Redis and PostgreSQL the tests use are up; start them when they are not, and
# fail loudly when that is impossible. Honours TEST_REDIS_URL / TEST_DATABASE_URL when set
# (then it only checks them).
set -euo pipefail

redis_host=127.0.0.1 redis_port=6379 pg_host=127.0.0.1 pg_port=5432

redis_up() { (exec 3<>"/dev/tcp/$redis_host/$redis_port" && printf 'PING\r\n' >&3 && head -c 5 <&3 | grep -q PONG) 2>/dev/null; }
pg_up() { pg_isready -q -h "$pg_host" -p "$pg_port" 2>/dev/null; }

if [ -n "${TEST_REDIS_URL:-}" ]; then
  echo "using TEST_REDIS_URL"
elif redis_up; then
  echo "redis: up on $redis_host:$redis_port"
else
  echo "redis: not answering on $redis_host:$redis_port; starting it"
  command -v redis-server >/dev/null || { echo "redis-server is not installed: cannot start Redis" >&2; exit 1; }
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
    --dir /tmp --logfile /tmp/speedtier-ci-redis.log
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "Redis did not start (see /tmp/speedtier-ci-redis.log)" >&2; exit 1; }
  echo "redis: started"
fi

if [ -n "${TEST_DATABASE_URL:-}" ]; then
  echo "using TEST_DATABASE_URL"
elif pg_up; then
  echo "postgresql: up on $pg_host:$pg_port"
else
  echo "postgresql: not answering on $pg_host:$pg_port; starting it"
  command -v pg_ctlcluster >/dev/null || { echo "pg_ctlcluster not found: cannot start PostgreSQL" >&2; exit 1; }
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 100); do pg_up && break; sleep 0.1; done
  pg_up || { echo "PostgreSQL did not start" >&2; exit 1; }
  echo "postgresql: started"
fi
