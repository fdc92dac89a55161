// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * body_empty_alions — ali-ons sends a 0-byte body; the broker stores it and the consumer reads it back empty.
 *
 * ali-ons has no client-side body check, so `new Message(topic, tag, Buffer.alloc(0))` goes on
 * the wire with an empty body (the Java broker accepts it). Passes when the send is SEND_OK, the
 * primed ali-ons consumer receives the message with a 0-byte body, its tag and key, and the raw
 * stored record has BODYLENGTH 0. Fails if the broker refuses or mangles an empty body or cannot
 * serve the record (e.g. a pull encoder that treats length 0 as "no body").
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

h.scenario(async ctx => {
  const topic = h.uniq('BodyEmptyNode');
  h.ensureTopic(topic, 1);
  const col = new h.Collector('empty');
  await h.startConsumer(ctx, { group: h.uniq('CG-bodyempty-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-bodyempty-node') });
  await h.prime(producer, topic, col, { queues: 1 });

  const m = new Message(topic, 'TagEmpty', Buffer.alloc(0));
  m.keys = [ 'empty-1' ];
  const r = await producer.send(m);
  h.check(r.sendStatus === 'SEND_OK', `empty-body send: ${r.sendStatus}`);
  const got = await col.waitCount(1, 30000, x => x.tags === 'TagEmpty');
  h.check(got.length === 1, 'the empty-body message was not consumed within 30 s');
  h.check(got[0].body.length === 0, `empty body read back as ${got[0].body.length} bytes`);
  h.check(got[0].keys === 'empty-1' && got[0].id === r.msgId, `keys ${got[0].keys}, msgId ${got[0].id} vs sent ${r.msgId}`);
  await col.quietFor(2000, 8000);
  h.check(col.real().length === 1, `consumer got ${col.real().length} messages`);
  const stored = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '1' ])
    .messages.filter(x => !(x.body || '').startsWith(h.PROBE_PREFIX));
  h.check(stored.length === 1 && stored[0].raw_body_len === 0, `stored: ${JSON.stringify(stored.map(x => [ x.raw_body_len, x.properties.TAGS ]))}`);
  return 'a 0-byte body was sent, stored and consumed';
}, { timeoutMs: 110000 });
