'use strict';
/**
 * alions.js — capture program: drives the real ali-ons 3.12.0 client through one step.
 *
 * Usage: NODE_PATH=tests/conformance/node/node_modules node alions.js STEP NAMESRV_ADDR
 * Steps (each uses its own topic/group so fixtures say what they are):
 *   send             producer: send with tags, keys (two) and user properties
 *   send_sharding    producer: send with a sharding key and a start-deliver time
 *   send_delay       producer: delay level 3
 *   send_compressed  producer: 8 KiB body (over the 4 KiB compression threshold)
 *   push_consumer    clustering push consumer, TAG filter: startup, heartbeat, rebalance, pulls
 *   push_sql         clustering push consumer with a SQL92 filter
 *   push_broadcast   broadcasting push consumer
 *   consume_retry    consumer gets 2 messages from the fake broker's store and asks to retry one
 *                    (CONSUMER_SEND_MSG_BACK); offsets committed (UPDATE_CONSUMER_OFFSET)
 * The send step uses a 1 s heartbeat interval so the producer's heartbeat is captured too.
 * The driver (run_capture.py) runs the scripted listener. Bounded: fixed waits, and a hard
 * exit timer in case the client hangs.
 */

const { Producer, Consumer, Message } = require('ali-ons');

const [step, nameSrv] = process.argv.slice(2);
const httpclient = {}; // never used when nameSrv is given, but ali-ons asserts it exists
const sleep = ms => new Promise(r => setTimeout(r, ms));
const hardStop = setTimeout(() => { console.error('alions.js: hard timeout'); process.exit(3); }, 40000);

async function producerStep() {
  const producer = new Producer({
    nameSrv, httpclient, producerGroup: `PG_${step}`, sendMsgTimeout: 3000,
    heartbeatBrokerInterval: step === 'send' ? 1000 : 30000,
  });
  await producer.ready();
  const topic = `Capture_${step}`;
  let msg;
  if (step === 'send') {
    msg = new Message(topic, 'TagA', 'hello from ali-ons');
    msg.keys = [ 'key-1', 'key-2' ];
    msg.properties.color = 'red';
    msg.properties.n = '42';
  } else if (step === 'send_sharding') {
    msg = new Message(topic, 'TagS', 'sharded');
    msg.shardingKey = 'order-17';
    msg.setStartDeliverTime(Date.now() + 60000);
  } else if (step === 'send_delay') {
    msg = new Message(topic, 'TagL', 'later');
    msg.delayTimeLevel = 3;
  } else if (step === 'send_compressed') {
    msg = new Message(topic, 'TagZ', Buffer.from('0123456789abcdef'.repeat(512)));
  } else {
    throw new Error(`unknown step ${step}`);
  }
  const r = await producer.send(msg);
  console.log(step, JSON.stringify(r));
  await sleep(step === 'send' ? 1500 : 500);
  await producer.close();
}

async function consumerStep() {
  const consumer = new Consumer({
    nameSrv, httpclient, consumerGroup: `CG_${step}`,
    isBroadcast: step === 'push_broadcast',
    persistent: true,
    rebalanceInterval: 2000,
    persistConsumerOffsetInterval: 2000,
  });
  consumer.on('error', err => console.error('consumer error:', err.message));
  const topic = `Capture_${step}`;
  if (step === 'push_sql') {
    consumer.subscribe(topic, { expressionType: 'SQL92', subString: 'a is not null and a > 5' }, async () => {});
  } else {
    consumer.subscribe(topic, 'TagA || TagB', async () => {});
  }
  await consumer.ready();
  await sleep(6000);
  await consumer.close();
  console.log(step, 'done');
}

async function consumeRetryStep() {
  const topic = 'Capture_consume_retry';
  const consumer = new Consumer({
    nameSrv, httpclient, consumerGroup: 'CG_consume_retry',
    rebalanceInterval: 2000, persistConsumerOffsetInterval: 2000,
  });
  consumer.on('error', err => console.error('consumer error:', err.message));
  const seen = [];
  consumer.subscribe(topic, '*', async msg => {
    const body = msg.body.toString();
    seen.push(body);
    if (body === 'retry-me' && seen.filter(b => b === body).length === 1) return Consumer.ACTION_RETRY;
  });
  await consumer.ready();
  await sleep(1500);
  const producer = new Producer({ nameSrv, httpclient, producerGroup: 'PG_consume_retry' });
  await producer.ready();
  for (const body of [ 'ok-1', 'retry-me' ]) {
    const r = await producer.send(new Message(topic, 'TagA', body));
    console.log('sent', JSON.stringify(r));
  }
  await sleep(6000);
  await producer.close();
  await consumer.close();
  console.log('consumed', JSON.stringify(seen));
}

(async () => {
  if (step === 'consume_retry') await consumeRetryStep();
  else if (step.startsWith('send')) await producerStep();
  else if (step.startsWith('push_')) await consumerStep();
  else throw new Error(`unknown step ${step}`);
  clearTimeout(hardStop);
  process.exit(0);
})().catch(err => {
  console.error('alions.js failed:', err && err.stack || err);
  process.exit(1);
});
