// The ioredis connection options BullMQ takes, from a redis:// URL (host, port, database),
// for the benchmark's scripts (run.mjs, first_job.mjs).
export function connectionOf(redisUrl) {
  const url = new URL(redisUrl);
  return {
    host: url.hostname,
    port: Number(url.port || 6379),
    db: Number(url.pathname.slice(1) || 0),
    maxRetriesPerRequest: null,
  };
}
