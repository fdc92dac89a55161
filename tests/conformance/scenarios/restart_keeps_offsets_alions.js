// needs: namesrv broker
// timeout: 180
'use strict';
/**
 * restart_keeps_offsets_alions — committed consumer offsets and messages survive a broker restart (ali-ons).
 *
 * An ali-ons clustering consumer (group G) consumes a first batch of 10 messages and is closed
 * (ali-ons persists its offsets with UPDATE_CONSUMER_OFFSET on close); once the broker reports
 * committed = max offset on every queue, run.py restarts the broker (RINGMQ_CTL). Max and
 * committed offsets must be unchanged after the restart; a second batch of 10 is sent and a new
 * consumer of G started. Passes when it receives exactly the second batch, once each. Fails on
 * re-delivery of committed messages (lost offsets) or lost messages.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 10;

function offsets(topic, group) {
  return h.rawmq([ 'offsets', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--group', group, '--queues', '4' ]);
}

h.scenario(async ctx => {
  const topic = h.uniq('RestartNode');
  const group = h.uniq('CG-restart-node');
  h.ensureTopic(topic, 4);
  const col1 = new h.Collector('before-restart');
  const c1 = await h.startConsumer(ctx, { group, topic, collector: col1 });
  const p1 = await h.startProducer(ctx, { group: h.uniq('PG-restart-node') });
  await h.prime(p1, topic, col1);
  const first = [];
  for (let i = 0; i < COUNT; i++) {
    first.push(`first ${i}`);
    const r = await p1.send(new Message(topic, 'TagR', `first ${i}`));
    h.check(r.sendStatus === 'SEND_OK', `send first ${i}: ${r.sendStatus}`);
  }
  const got1 = await col1.waitCount(COUNT, 30000);
  h.check(got1.length === COUNT, `first batch: consumed ${got1.length}/${COUNT} before the restart`);
  // ali-ons advances its offset only after the handler's promise settles; let it finish
  // before close() persists the offsets.
  await col1.quietFor(1500, 10000);
  await c1.closeOnce();
  await p1.closeOnce();

  let before = offsets(topic, group);
  const deadline = Date.now() + 15000;
  while (JSON.stringify(before.committed) !== JSON.stringify(before.max) && Date.now() < deadline) {
    await h.sleep(500);
    before = offsets(topic, group);
  }
  h.check(JSON.stringify(before.committed) === JSON.stringify(before.max),
    `after the consumer closed, committed offsets ${JSON.stringify(before.committed)} != max ${JSON.stringify(before.max)}`);

  console.log(await h.restartBroker());
  const after = offsets(topic, group);
  h.check(JSON.stringify(after.max) === JSON.stringify(before.max), `max offsets changed across the restart: ${before.max} -> ${after.max}`);
  h.check(JSON.stringify(after.committed) === JSON.stringify(before.committed),
    `committed offsets changed across the restart: ${JSON.stringify(before.committed)} -> ${JSON.stringify(after.committed)}`);

  const p2 = await h.startProducer(ctx, { group: h.uniq('PG-restart2-node'), extra: { instanceName: 'after-restart' } });
  const second = [];
  for (let i = 0; i < COUNT; i++) {
    second.push(`second ${i}`);
    const r = await p2.send(new Message(topic, 'TagR', `second ${i}`));
    h.check(r.sendStatus === 'SEND_OK', `send second ${i}: ${r.sendStatus}`);
  }
  const col2 = new h.Collector('after-restart');
  await h.startConsumer(ctx, { group, topic, collector: col2, instanceName: 'after-restart-c' });
  await col2.waitCount(COUNT, 40000);
  await col2.quietFor(3000, 15000);
  const bodies = col2.records.map(r => r.text);
  const again = [ ...new Set(bodies.filter(b => first.includes(b) || b.startsWith(h.PROBE_PREFIX))) ];
  h.check(again.length === 0, `after the restart the group re-received ${again.length} committed messages: ${again.slice(0, 8)}`);
  const missing = second.filter(b => !bodies.includes(b));
  h.check(missing.length === 0, `after the restart, messages never consumed: ${missing}`);
  h.check(bodies.length === COUNT, `after the restart: ${bodies.length} deliveries for ${COUNT} new messages`);
  return `offsets ${JSON.stringify(before.committed)} kept across the restart; only the ${COUNT} new messages were consumed`;
}, { timeoutMs: 170000 });
