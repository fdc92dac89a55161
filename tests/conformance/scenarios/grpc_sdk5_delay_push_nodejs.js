// needs: namesrv broker
// timeout: 150
// broker-conf: recallMessageEnable=true
'use strict';
/**
 * grpc_sdk5_delay_push_nodejs — the rest of what the official 5.x Node.js SDK
 * (rocketmq-client-nodejs 1.0.8, gRPC) does against the broker's gRPC endpoint.
 *
 * The Producer sends two delay messages due in 3 s and recalls one with its receipt's recall
 * handle (RecallMessage, `recallMessageEnable=true`); a SimpleConsumer gets the other no earlier
 * than 2 s after the send and never the recalled one. A transactional message the client rolls
 * back is never delivered while the committed one beside it is. A SimpleConsumer shortens a
 * received message's invisible duration to 1 s without acking: the message comes back with
 * delivery attempt 2. A PushConsumer gets five normal messages through its listener, each once.
 * Fails on any missing, early, extra or repeated message.
 */

const { execFileSync } = require('child_process');
const { ConsumeResult, Producer, PushConsumer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { check, env, scenario, sleep } = require('../lib/harness');

function makeTopic(topic, kind) {
  execFileSync(env('RINGMQ_BIN'), [ 'admin', 'updateTopic', '-b', env('BROKER_ADDR'), '-t', topic,
    '-r', '2', '-w', '2', '-a', `+message.type=${kind}` ], { timeout: 30000 });
}

async function simple(ctx, endpoints, group, topic) {
  const c = new SimpleConsumer({ endpoints, consumerGroup: group, subscriptions: new Map([[ topic, '*' ]]), awaitDuration: 5000 });
  await c.startup();
  ctx.onCleanup(() => c.shutdown());
  return c;
}

// Receives (and acks) until `want` messages came or 30 s passed, then one more round.
async function drain(c, want) {
  const got = [];
  const end = Date.now() + 30000;
  while (got.length < want && Date.now() < end) {
    for (const m of await c.receive(16, 15000)) {
      got.push({ m, at: Date.now() });
      await c.ack(m);
    }
  }
  const extra = got.length >= want ? await c.receive(16, 15000) : [];
  return { got, extra };
}

scenario(async ctx => {
  const endpoints = env('GRPC_ENDPOINT');
  makeTopic('NodeDelay', 'DELAY');
  makeTopic('NodeTxRb', 'TRANSACTION');
  makeTopic('NodeInvisible', 'NORMAL');
  makeTopic('NodePush', 'NORMAL');
  const producer = new Producer({
    endpoints,
    topics: [ 'NodeDelay', 'NodeTxRb', 'NodeInvisible', 'NodePush' ],
    checker: { async check() { return 2; /* ROLLBACK */ } },
  });
  await producer.startup();
  ctx.onCleanup(() => producer.shutdown());

  // Delay and recall: both due in the same second.
  const due = new Date(Math.ceil(Date.now() / 1000) * 1000 + 3000);
  const sentAt = Date.now();
  await producer.send({ topic: 'NodeDelay', body: Buffer.from('node-later'), deliveryTimestamp: due });
  const doomed = await producer.send({ topic: 'NodeDelay', body: Buffer.from('node-recalled'), deliveryTimestamp: due });
  check(doomed.recallHandle, 'no recall handle in a delay message\'s receipt');
  const recalled = await producer.recallMessage('NodeDelay', doomed.recallHandle);
  check(recalled.messageId === doomed.messageId, `recall answered ${recalled.messageId}, sent ${doomed.messageId}`);

  // Transactions: one committed, one rolled back by the client.
  const commit = producer.beginTransaction();
  await producer.send({ topic: 'NodeTxRb', body: Buffer.from('node-commit') }, commit);
  await commit.commit();
  const rollback = producer.beginTransaction();
  await producer.send({ topic: 'NodeTxRb', body: Buffer.from('node-rollback') }, rollback);
  await rollback.rollback();

  const delayed = await drain(await simple(ctx, endpoints, 'NodeDelayGroup', 'NodeDelay'), 1);
  const delayBodies = delayed.got.map(x => x.m.body.toString()).concat(delayed.extra.map(m => m.body.toString()));
  check(JSON.stringify(delayBodies) === JSON.stringify([ 'node-later' ]), `delay delivery: ${delayBodies}`);
  const waited = (delayed.got[0].at - sentAt) / 1000;
  check(waited >= 2, `the delay message came after ${waited.toFixed(1)} s, before its time`);

  const txs = await drain(await simple(ctx, endpoints, 'NodeTxRbGroup', 'NodeTxRb'), 1);
  const txBodies = txs.got.map(x => x.m.body.toString()).concat(txs.extra.map(m => m.body.toString()));
  check(JSON.stringify(txBodies) === JSON.stringify([ 'node-commit' ]), `transactional delivery: ${txBodies}`);

  // Change invisible duration: received, not acked, back after 1 s as attempt 2.
  await producer.send({ topic: 'NodeInvisible', body: Buffer.from('node-again') });
  const inv = await simple(ctx, endpoints, 'NodeInvisibleGroup', 'NodeInvisible');
  let first = [];
  for (let end = Date.now() + 30000; first.length === 0 && Date.now() < end;) first = await inv.receive(16, 30000);
  check(first.length === 1 && first[0].deliveryAttempt === 1, `first receive: ${first.map(m => m.deliveryAttempt)}`);
  await inv.changeInvisibleDuration(first[0], 1000);
  let again = [];
  for (let end = Date.now() + 30000; again.length === 0 && Date.now() < end;) again = await inv.receive(16, 30000);
  check(again.length === 1 && again[0].body.toString() === 'node-again', `after the change: ${again.length} messages`);
  check(again[0].deliveryAttempt === 2, `delivery attempt ${again[0].deliveryAttempt}, want 2`);
  await inv.ack(again[0]);

  // Push consumer.
  const pushed = [];
  const push = new PushConsumer({
    endpoints,
    consumerGroup: 'NodePushGroup',
    subscriptions: new Map([[ 'NodePush', '*' ]]),
    messageListener: { consume(m) { pushed.push(m.body.toString()); return ConsumeResult.SUCCESS; } },
  });
  await push.startup();
  ctx.onCleanup(() => push.shutdown());
  for (let i = 0; i < 5; i++) await producer.send({ topic: 'NodePush', body: Buffer.from(`np-${i}`) });
  for (let end = Date.now() + 30000; pushed.length < 5 && Date.now() < end;) await sleep(200);
  await sleep(2000); // a repeat would show up here
  const want = [ 0, 1, 2, 3, 4 ].map(i => `np-${i}`);
  check(JSON.stringify([ ...pushed ].sort()) === JSON.stringify(want), `pushed: ${pushed}`);
  return `delay after ${waited.toFixed(1)} s with its neighbour recalled, rollback never delivered, ` +
    'invisible duration changed (attempt 2), push consumer got each message once';
}, { timeoutMs: 140000 });
