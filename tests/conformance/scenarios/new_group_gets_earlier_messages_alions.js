// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * new_group_gets_earlier_messages_alions — a brand-new ali-ons consumer group receives messages sent to a fresh topic before it started.
 *
 * ali-ons' default consumeFromWhere is CONSUME_FROM_LAST_OFFSET. For a group without a stored
 * offset, QUERY_CONSUMER_OFFSET must answer SUCCESS with 0 while the queue's first message is
 * still in memory (headers.md §3.1, as a Java broker), so the consumer starts at the beginning.
 * 8 messages are sent to a new 4-queue topic, then a consumer of a new group starts. Passes when
 * it receives all 8 exactly once. Fails if the broker answers QUERY_NOT_FOUND (the client then
 * starts at the max offset and skips them).
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 8;

h.scenario(async ctx => {
  const topic = h.uniq('NewGroupNode');
  h.ensureTopic(topic, 4);
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-newgroup-node') });
  const bodies = [];
  for (let i = 0; i < COUNT; i++) {
    bodies.push(`early ${i}`);
    const r = await producer.send(new Message(topic, 'TagE', `early ${i}`));
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
  }
  const group = h.uniq('CG-newgroup-node');
  const answers = h.rawmq([ 'offsets', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--group', group, '--queues', '4' ]).committed;
  const col = new h.Collector('late-starter');
  await h.startConsumer(ctx, { group, topic, collector: col });
  await col.waitCount(COUNT, 40000);
  await col.quietFor(2000, 10000);
  const got = col.real().map(r => r.text);
  const missing = bodies.filter(b => !got.includes(b));
  h.check(missing.length === 0, `the new group never received ${missing.length} messages sent before it started: ${missing} ` +
    `(QUERY_CONSUMER_OFFSET for the unknown group answered ${JSON.stringify(answers)}; null = QUERY_NOT_FOUND)`);
  h.check(got.length === COUNT, `${got.length} deliveries for ${COUNT} messages`);
  return `new group started at offset 0 (broker answered ${JSON.stringify(answers)}) and got all ${COUNT} earlier messages`;
}, { timeoutMs: 110000 });
