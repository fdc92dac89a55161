// needs: namesrv broker
// timeout: 150
'use strict';
/**
 * broadcast_two_consumers_alions — two ali-ons broadcasting consumers of one group both get every message.
 *
 * Two ali-ons consumers with isBroadcast: true, the same consumerGroup and distinct instance
 * names (so distinct client ids and MQ clients in one process) subscribe to a 4-queue topic and
 * are primed until each got a probe from every queue; then 20 messages are sent. Passes when
 * each consumer receives all 20 exactly once. Fails if queues are split between the consumers
 * (clustering behaviour) or a consumer misses or repeats messages.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 20;

h.scenario(async ctx => {
  const topic = h.uniq('BroadcastNode');
  const group = h.uniq('CG-broadcast-node');
  h.ensureTopic(topic, 4);
  const cols = [ new h.Collector('bc-1'), new h.Collector('bc-2') ];
  for (let i = 0; i < cols.length; i++) {
    await h.startConsumer(ctx, { group, topic, collector: cols[i], isBroadcast: true, instanceName: `bcast${i + 1}` });
  }
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-broadcast-node') });
  for (const col of cols) await h.prime(producer, topic, col);

  const bodies = [];
  for (let i = 0; i < COUNT; i++) {
    const body = `broadcast ${i}`;
    bodies.push(body);
    const r = await producer.send(new Message(topic, 'TagBc', body));
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
  }
  for (const col of cols) await col.waitCount(COUNT, 30000);
  for (const col of cols) await col.quietFor(2000, 10000);
  for (const col of cols) {
    const got = col.real().map(r => r.text);
    const missing = bodies.filter(b => !got.includes(b));
    h.check(missing.length === 0, `consumer ${col.name} missed ${missing.length} of ${COUNT}: ${missing.slice(0, 8)} ` +
      `(got from queues ${[ ...new Set(col.real().map(r => r.queueId)) ]})`);
    h.check(got.length === COUNT, `consumer ${col.name}: ${got.length} deliveries for ${COUNT} messages`);
  }
  return `both broadcasting consumers received all ${COUNT} messages once`;
}, { timeoutMs: 140000 });
