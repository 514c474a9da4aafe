// BullMQ side of bench/first_job.py: a new Worker process taking a job that already waits.
//   node first_job.mjs add <redis url> <queue name>    # add one job, exit
//   node first_job.mjs work <redis url> <queue name>   # start a Worker (concurrency 8); its
//                                                     # processor prints {"handler_ms": ...}
//                                                     # (epoch ms) as its first statement,
//                                                     # then the worker closes, the queue is
//                                                     # obliterated and the process exits
import { Queue, Worker } from "bullmq";
import { connectionOf } from "./connection.mjs";

const [mode, redisUrl, name] = process.argv.slice(2);
const connection = connectionOf(redisUrl);

if (mode === "add") {
  const queue = new Queue(name, { connection });
  await queue.add("first", { organization_id: 1, item: "first" }, { removeOnComplete: true });
  await queue.close();
} else if (mode === "work") {
  let done;
  const handled = new Promise((resolve) => (done = resolve));
  const worker = new Worker(
    name,
    async () => {
      const handlerMs = Date.now();
      console.log(JSON.stringify({ handler_ms: handlerMs }));
      done();
    },
    { connection, concurrency: 8 },
  );
  await handled;
  await worker.close();
  const queue = new Queue(name, { connection });
  await queue.obliterate({ force: true });
  await queue.close();
} else {
  throw new Error(`unknown mode ${mode}`);
}
