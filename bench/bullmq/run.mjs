// BullMQ side of bench/bullmq_compare.py: one measure per run, a JSON line on stdout.
//   node run.mjs <single|bulk|drain> <jobs> <redis url> <queue name>
// drain: the jobs are added with addBulk first (not timed), then one Worker (concurrency 50)
// processes them with a no-op processor; timed from the worker's start to the last completion.
import { Queue, Worker } from "bullmq";
import { connectionOf } from "./connection.mjs";

const [mode, jobsText, redisUrl, name] = process.argv.slice(2);
const jobs = Number(jobsText);
const connection = connectionOf(redisUrl);
const options = { removeOnComplete: true, removeOnFail: true };
const queue = new Queue(name, { connection });
await queue.waitUntilReady();
const data = (i) => ({ organization_id: 1, item: String(i) });

async function addBulk() {
  for (let start = 0; start < jobs; start += 1000) {
    const batch = [];
    for (let i = start; i < Math.min(jobs, start + 1000); i++) {
      batch.push({ name: "noop", data: data(i), opts: options });
    }
    await queue.addBulk(batch);
  }
}

let seconds;
if (mode === "single") {
  const started = performance.now();
  for (let i = 0; i < jobs; i++) await queue.add("noop", data(i), options);
  seconds = (performance.now() - started) / 1000;
} else if (mode === "bulk") {
  const started = performance.now();
  await addBulk();
  seconds = (performance.now() - started) / 1000;
} else if (mode === "drain") {
  await addBulk();
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const started = performance.now();
  const worker = new Worker(name, async () => {}, { connection, concurrency: 50 });
  worker.on("completed", () => {
    if (++done === jobs) finish(performance.now());
  });
  seconds = ((await finished) - started) / 1000;
  await worker.close();
} else {
  throw new Error(`unknown mode ${mode}`);
}
await queue.obliterate({ force: true });
await queue.close();
console.log(JSON.stringify({ mode, jobs, seconds, jobs_per_second: jobs / seconds }));
