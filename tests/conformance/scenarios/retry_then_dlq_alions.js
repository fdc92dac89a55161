// needs: namesrv broker
// timeout: 150
// broker-conf: messageDelayLevel=1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s
'use strict';
/**
 * retry_then_dlq_alions — a message the ali-ons consumer keeps failing is retried via %RETRY%group, then lands in %DLQ%group.
 *
 * Broker with every delay level set to 1 s. The ali-ons consumer is created with
 * maxReconsumeTimes: 2 (sent in CONSUMER_SEND_MSG_BACK, which the broker honours) and fails one
 * message by throwing, succeeds for another. (Client quirk: ali-ons 3.12.0's handler for the
 * `%RETRY%` subscription drops the user handler's return value, so ACTION_RETRY only works on
 * the first delivery; a thrown error is honoured on every delivery.) The failing message must be delivered 3
 * times with reconsumeTimes 0, 1, 2, each retry through `%RETRY%<group>` (RETRY_TOPIC property =
 * original topic, ORIGIN_MESSAGE_ID = the first msgId) no earlier than the 1 s delay, then be
 * stored in `%DLQ%<group>` (raw pull: body, tags, keys, user property intact, reconsumeTimes 3)
 * and never delivered again; the good message is delivered once. Fails otherwise.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const MAX = 2;

h.scenario(async ctx => {
  const topic = h.uniq('RetryDlqNode');
  const group = h.uniq('CG-retrydlq-node');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('retry', { decide: r => (r.text === 'fail-me' ? 'throw' : 'ok') });
  await h.startConsumer(ctx, { group, topic, collector: col, maxReconsumeTimes: MAX });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-retrydlq-node') });
  await h.prime(producer, topic, col);

  const msg = new Message(topic, 'TagR', 'fail-me');
  msg.keys = [ 'dlq-key' ];
  msg.properties.color = 'grün';
  const sent = await producer.send(msg);
  h.check(sent.sendStatus === 'SEND_OK', `send: ${sent.sendStatus}`);
  await producer.send(new Message(topic, 'TagR', 'good'));

  let fails = await col.waitCount(MAX + 1, 60000, r => r.text === 'fail-me');
  h.check(fails.length === MAX + 1, `failing message delivered ${fails.length} times within 60 s, want ${MAX + 1} ` +
    `(reconsumeTimes seen: ${fails.map(f => f.reconsumeTimes)})`);
  const dlq = `%DLQ%${group}`;
  let stored = [];
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline && stored.length === 0) {
    try {
      stored = h.rawmq([ 'pull', '--broker', h.env('BROKER_ADDR'), '--topic', dlq, '--queue', '0', '--offset', '0' ]).messages;
    } catch (e) {
      stored = [];
    }
    if (stored.length === 0) await h.sleep(500);
  }
  await col.quietFor(3000, 10000);
  fails = col.real().filter(r => r.text === 'fail-me');
  const good = col.real().filter(r => r.text === 'good');
  h.check(good.length === 1, `the good message was delivered ${good.length} times`);
  const times = fails.map(f => f.reconsumeTimes);
  h.check(JSON.stringify(times) === JSON.stringify([ 0, 1, 2 ]), `reconsumeTimes of the deliveries: ${times}, want 0,1,2`);
  for (let i = 1; i < fails.length; i++) {
    const x = fails[i];
    h.check(x.props.RETRY_TOPIC === topic, `retry #${i}: RETRY_TOPIC ${x.props.RETRY_TOPIC}, want ${topic}`);
    h.check(x.topic === topic, `retry #${i}: consumer sees topic ${x.topic}`);
    h.check(x.props.ORIGIN_MESSAGE_ID === fails[0].id, `retry #${i}: ORIGIN_MESSAGE_ID ${x.props.ORIGIN_MESSAGE_ID}, want the first msgId ${fails[0].id}`);
    const gap = x.recvMs - fails[i - 1].recvMs;
    h.check(gap >= 900, `retry #${i} came ${gap} ms after the previous delivery; delay level is 1 s`);
    h.check(x.props.color === 'grün' && x.tags === 'TagR' && x.keys === 'dlq-key',
      `retry #${i}: properties changed: ${JSON.stringify(x.props)}`);
  }
  h.check(stored.length === 1, `${dlq} holds ${stored.length} records, want 1`);
  const d = stored[0];
  h.check(d.body === 'fail-me', `DLQ body ${d.body}`);
  h.check(d.properties.TAGS === 'TagR' && d.properties.KEYS === 'dlq-key' && d.properties.color === 'grün',
    `DLQ record properties changed: ${JSON.stringify(d.properties)}`);
  h.check(d.properties.RETRY_TOPIC === topic, `DLQ record RETRY_TOPIC ${d.properties.RETRY_TOPIC}`);
  h.check(d.reconsume_times === MAX + 1, `DLQ record reconsumeTimes ${d.reconsume_times}, want ${MAX + 1}`);
  return `failing message delivered ${MAX + 1} times via %RETRY%, then stored in %DLQ% and not delivered again`;
}, { timeoutMs: 140000 });
