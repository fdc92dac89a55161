// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * send_sync_then_push_consume_alions — ali-ons producer sends, ali-ons push consumer gets every message intact.
 *
 * Topic with 4 queues created on the broker; a clustering ali-ons consumer subscribed to `*` is
 * started and primed (a probe received from every queue); then 12 messages are sent with
 * producer.send, each with a unicode body, tag TagA/TagB, two keys and user properties (ASCII,
 * unicode, numeric text). Passes when every send is SEND_OK with a distinct msgId, the consumer
 * receives each message exactly once with the same body, tags, keys and properties, the msgId it
 * sees equals the one the send returned (for ali-ons both are the broker's offsetMsgId),
 * reconsumeTimes is 0, the broker generated a UNIQ_KEY (ali-ons sends none), and a raw pull
 * shows the same stored messages. Fails on a lost, duplicated or altered message or id mismatch.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 12;

function expected(i) {
  return {
    body: `hello ${i} — héllo wörld ✓ 消息 🚀 #${i}`,
    tags: i % 2 === 0 ? 'TagA' : 'TagB',
    keys: [ `key-${i}`, `order-${i * 7}` ],
    props: { color: i % 3 ? 'red' : 'blue', greeting: `grüße-${i}-ありがとう`, n: String(i) },
  };
}

h.scenario(async ctx => {
  const topic = h.uniq('SyncPushNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('push');
  await h.startConsumer(ctx, { group: h.uniq('CG-syncpush-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-syncpush-node') });
  await h.prime(producer, topic, col);

  const sent = new Map();
  for (let i = 0; i < COUNT; i++) {
    const e = expected(i);
    const msg = new Message(topic, e.tags, e.body);
    msg.keys = e.keys;
    Object.assign(msg.properties, e.props);
    const r = await producer.send(msg);
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: status ${r.sendStatus}`);
    h.check(r.msgId && !sent.has(r.msgId), `send ${i}: msgId ${r.msgId} empty or repeated`);
    sent.set(r.msgId, i);
  }

  let got = await col.waitCount(COUNT, 30000);
  h.check(got.length >= COUNT, `consumer received ${got.length}/${COUNT} messages within 30 s`);
  await col.quietFor(2000, 10000);
  got = col.real();
  const ids = got.map(r => r.id);
  const dups = [ ...new Set(ids.filter((x, k) => ids.indexOf(x) !== k)) ];
  h.check(dups.length === 0, `messages delivered more than once: ${dups}`);
  h.check(got.length === COUNT, `consumer received ${got.length} messages, sent ${COUNT}`);
  for (const r of got) {
    h.check(sent.has(r.id), `consumer saw msgId ${r.id} that no send returned (sent ${[ ...sent.keys() ]})`);
    const i = sent.get(r.id);
    const e = expected(i);
    h.check(r.topic === topic, `msg ${i}: topic ${r.topic}`);
    h.check(r.text === e.body, `msg ${i}: body ${JSON.stringify(r.text)} != sent ${JSON.stringify(e.body)}`);
    h.check(r.tags === e.tags, `msg ${i}: tags ${r.tags} != ${e.tags}`);
    h.check(r.keys === e.keys.join(' '), `msg ${i}: keys ${JSON.stringify(r.keys)} != ${JSON.stringify(e.keys.join(' '))}`);
    for (const [ k, v ] of Object.entries(e.props)) {
      h.check(r.props[k] === v, `msg ${i}: property ${k} = ${JSON.stringify(r.props[k])}, sent ${JSON.stringify(v)}`);
    }
    h.check(r.reconsumeTimes === 0, `msg ${i}: reconsumeTimes ${r.reconsumeTimes}`);
    h.check(r.props.UNIQ_KEY, `msg ${i}: the broker did not add a UNIQ_KEY (ali-ons sends none); properties ${JSON.stringify(r.props)}`);
  }
  const stored = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '4' ])
    .messages.filter(m => !(m.body || '').startsWith(h.PROBE_PREFIX));
  h.check(stored.length === COUNT, `raw pull finds ${stored.length} stored messages, want ${COUNT}`);
  for (const m of stored) {
    h.check(sent.has(m.offset_msg_id), `stored record ${m.queue_id}@${m.queue_offset} has offsetMsgId ${m.offset_msg_id} not returned by any send`);
    h.check(m.body === expected(sent.get(m.offset_msg_id)).body, `stored body of ${m.offset_msg_id} differs`);
  }
  return `${COUNT} messages round-tripped (bodies, tags, keys, unicode properties, ids)`;
}, { timeoutMs: 110000 });
