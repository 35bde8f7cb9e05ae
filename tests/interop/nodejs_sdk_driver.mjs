// Drives the official RocketMQ 5.x Node.js SDK (rocketmq-client-nodejs on
// npm) for tests/interop/test_nodejs_sdk.py: node nodejs_sdk_driver.mjs
// ENDPOINT TOPIC GROUP N. Sends N messages (tag TagN, keys k<i>, body
// node-<i>), then a SimpleConsumer of GROUP receives and acks until it has
// N (at most 20 rounds). Prints one JSON object per line: {"sent": body,
// "id": messageId} and {"recv": body, "id": messageId, "tag": tag}.
import { Producer, SimpleConsumer } from 'rocketmq-client-nodejs';

const [endpoints, topic, group, nText] = process.argv.slice(2);
const n = Number(nText);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

const producer = new Producer({ endpoints });
await producer.startup();
for (let i = 0; i < n; i++) {
  const body = `node-${i}`;
  const r = await producer.send({ topic, tag: 'TagN', keys: [`k${i}`], body: Buffer.from(body) });
  out({ sent: body, id: r.messageId });
}
const consumer = new SimpleConsumer({
  consumerGroup: group,
  endpoints,
  subscriptions: new Map().set(topic, '*'),
  awaitDuration: 3000,
});
await consumer.startup();
let got = 0;
for (let round = 0; round < 20 && got < n; round++) {
  const messages = await consumer.receive(16, 20000);
  for (const m of messages) {
    out({ recv: m.body.toString(), id: m.messageId, tag: m.tag });
    await consumer.ack(m);
    got++;
  }
}
// the SDK's own shutdown logs to a stream it has closed: leave without it
process.exit(0);
