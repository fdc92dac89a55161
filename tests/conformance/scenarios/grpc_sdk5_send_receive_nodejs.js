// needs: namesrv broker
// timeout: 150
// broker-conf: transactionCheckInterval=1000
// broker-conf: transactionTimeOut=2000
'use strict';
/**
 * grpc_sdk5_send_receive_nodejs — the official 5.x Node.js SDK (rocketmq-client-nodejs 1.0.8,
 * gRPC) against the broker's gRPC endpoint.
 *
 * Topics are made with `ringmq admin updateTopic -a +message.type=…`. The SDK's Producer sends
 * a normal message with a tag, a key and a property, three FIFO messages of one group and a
 * transactional message it commits; a transactional producer whose checker answers ROLLBACK
 * leaves one half message open for the broker's check-back. A SimpleConsumer receives the
 * normal message intact (not corrupted by the SDK's digest check) and acks it, then the FIFO
 * messages in order, then only the committed transactional message. Fails on any missing,
 * altered or extra message, or when no check-back reaches the checker within 30 s.
 */

const { execFileSync } = require('child_process');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { check, env, scenario, sleep } = require('../lib/harness');

function makeTopic(topic, kind) {
  execFileSync(env('RINGMQ_BIN'), [ 'admin', 'updateTopic', '-b', env('BROKER_ADDR'), '-t', topic,
    '-r', '2', '-w', '2', '-a', `+message.type=${kind}` ], { timeout: 30000 });
}

async function drain(ctx, endpoints, group, topic, want) {
  const c = new SimpleConsumer({ endpoints, consumerGroup: group, subscriptions: new Map([[ topic, '*' ]]), awaitDuration: 5000 });
  await c.startup();
  ctx.onCleanup(() => c.shutdown());
  const got = [];
  const end = Date.now() + 20000;
  while (got.length < want && Date.now() < end) {
    for (const m of await c.receive(16, 15000)) {
      got.push(m);
      await c.ack(m);
    }
  }
  // One more round: nothing else may come.
  const extra = got.length >= want ? await c.receive(16, 15000) : [];
  return { got, extra };
}

scenario(async ctx => {
  const endpoints = env('GRPC_ENDPOINT');
  makeTopic('NodeNormal', 'NORMAL');
  makeTopic('NodeFifo', 'FIFO');
  makeTopic('NodeTx', 'TRANSACTION');
  const asked = [];
  const producer = new Producer({
    endpoints,
    topics: [ 'NodeNormal', 'NodeFifo', 'NodeTx' ],
    checker: { async check(mv) { asked.push(mv.body.toString()); return 2; /* ROLLBACK */ } },
  });
  await producer.startup();
  ctx.onCleanup(() => producer.shutdown());

  const sent = await producer.send({ topic: 'NodeNormal', tag: 'TagN', keys: [ 'node-key' ],
    properties: new Map([[ 'color', 'blue' ]]), body: Buffer.from('hello node') });
  check(sent.messageId, 'no message id in the receipt');
  for (let i = 0; i < 3; i++) {
    await producer.send({ topic: 'NodeFifo', messageGroup: 'node-order', body: Buffer.from(`nf-${i}`) });
  }
  const tx = producer.beginTransaction();
  await producer.send({ topic: 'NodeTx', body: Buffer.from('node-commit') }, tx);
  await tx.commit();
  const open = producer.beginTransaction();
  await producer.send({ topic: 'NodeTx', body: Buffer.from('node-open') }, open);

  const normal = await drain(ctx, endpoints, 'NodeNormalGroup', 'NodeNormal', 1);
  check(normal.got.length === 1 && normal.extra.length === 0, `normal: got ${normal.got.length}, extra ${normal.extra.length}`);
  const m = normal.got[0];
  check(m.messageId === sent.messageId, `message id ${m.messageId} != ${sent.messageId}`);
  check(m.body.toString() === 'hello node' && m.tag === 'TagN', `body/tag altered: ${m.body} ${m.tag}`);
  check(m.keys.includes('node-key'), `keys: ${m.keys}`);
  check(m.properties.get('color') === 'blue', `property color: ${m.properties.get('color')}`);
  check(!m.corrupted, 'the SDK found the body digest wrong');

  const fifo = await drain(ctx, endpoints, 'NodeFifoGroup', 'NodeFifo', 3);
  const order = fifo.got.map(x => x.body.toString());
  check(JSON.stringify(order) === JSON.stringify([ 'nf-0', 'nf-1', 'nf-2' ]), `FIFO order: ${order}`);

  const end = Date.now() + 30000;
  while (!asked.includes('node-open') && Date.now() < end) await sleep(200);
  check(asked.includes('node-open'), `no check-back for the open transaction (asked: ${asked})`);
  const txs = await drain(ctx, endpoints, 'NodeTxGroup', 'NodeTx', 1);
  const bodies = txs.got.concat(txs.extra).map(x => x.body.toString());
  check(JSON.stringify(bodies) === JSON.stringify([ 'node-commit' ]), `transactional delivery: ${bodies}`);
  return 'normal, FIFO in order, commit delivered, check-back rolled back';
}, { timeoutMs: 140000 });
