// needs: namesrv broker
// timeout: 240
'use strict';
/**
 * orderly_by_sharding_key_alions — 1,000 messages over 10 sharding keys are consumed in send order per key (ali-ons).
 *
 * ali-ons selects the queue from `msg.shardingKey` (md5 of the key modulo the queue count; it
 * sends the property `__SHARDING_KEY`). ali-ons has no orderly consumer, but its push consumer
 * with parallelConsumeLimit 1 consumes each queue strictly in pull order, so per-key order on
 * the consumer side shows whether the broker kept each queue's order. 1,000 messages (sequence
 * 0..99 for each of 10 keys, interleaved) are sent after the consumer was primed. Passes when
 * every key stayed on one queue, all 1,000 arrive exactly once, and each key's sequence arrives
 * strictly increasing. Fails on loss, duplicates or reordering within a key.
 *
 * Client quirk: ali-ons 3.12.0 computes `queueIds[md5(key) % n] || ''`, so a key that hashes to
 * queue 0 is silently NOT sharded (round robin). The keys used here are chosen among those that
 * hash to queues 1..3 (and the queue each send reports is checked against the hash).
 */

const crypto = require('crypto');
const { Message } = require('ali-ons');
const h = require('../lib/harness');

const KEYS = 10;
const PER_KEY = 100;

h.scenario(async ctx => {
  const topic = h.uniq('OrderlyNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('orderly');
  await h.startConsumer(ctx, { group: h.uniq('CG-orderly-node'), topic, collector: col,
    extra: { parallelConsumeLimit: 1 } });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-orderly-node') });
  await h.prime(producer, topic, col);

  const hashQueue = key => crypto.createHash('md5').update(key).digest().readUInt32BE() % 4;
  const keys = [];
  for (let n = 0; keys.length < KEYS; n++) {
    if (hashQueue(`order-${n}`) !== 0) keys.push(`order-${n}`);
  }
  const sentQueue = new Map();
  for (let seq = 0; seq < PER_KEY; seq++) {
    for (const key of keys) {
      const msg = new Message(topic, 'TagOrd', `${key}:${seq}`);
      msg.keys = [ key ];
      msg.shardingKey = key;
      const r = await producer.send(msg);
      h.check(r.sendStatus === 'SEND_OK', `send ${key}:${seq}: ${r.sendStatus}`);
      const q = Number(r.messageQueue.queueId);
      h.check(q === hashQueue(key), `send ${key}:${seq} went to queue ${q}, its sharding key hashes to ${hashQueue(key)}`);
      if (!sentQueue.has(key)) sentQueue.set(key, new Set());
      sentQueue.get(key).add(q);
    }
  }
  const total = KEYS * PER_KEY;
  await col.waitCount(total, 120000);
  await col.quietFor(2000, 15000);
  const got = col.real();
  const perKey = new Map();
  const consumedQueues = new Map();
  for (const r of got) {
    const [ key, seq ] = r.text.split(':');
    if (!perKey.has(key)) { perKey.set(key, []); consumedQueues.set(key, new Set()); }
    perKey.get(key).push(Number(seq));
    consumedQueues.get(key).add(r.queueId);
  }
  for (const key of keys) {
    h.check(sentQueue.get(key).size === 1, `${key}: producer sent it to queues ${[ ...sentQueue.get(key) ]}`);
    h.check((consumedQueues.get(key) || new Set()).size === 1, `${key}: consumed from queues ${[ ...(consumedQueues.get(key) || []) ]}`);
    const seqs = perKey.get(key) || [];
    const seen = new Set(seqs);
    const missing = [];
    for (let i = 0; i < PER_KEY; i++) if (!seen.has(i)) missing.push(i);
    h.check(missing.length === 0, `${key}: ${missing.length} messages never consumed, first ${missing.slice(0, 10)}`);
    h.check(seqs.length === PER_KEY, `${key}: ${seqs.length} deliveries for ${PER_KEY} messages (duplicates)`);
    for (let i = 1; i < seqs.length; i++) {
      h.check(seqs[i] > seqs[i - 1], `${key}: out of order at delivery ${i}: ... ${seqs.slice(Math.max(0, i - 3), i + 3)} ...`);
    }
  }
  h.check(got.length === total, `consumer got ${got.length} messages, ${total} sent`);
  return `${total} messages, ${KEYS} keys: each key on one queue, consumed in order, no loss or duplicate`;
}, { timeoutMs: 230000 });
