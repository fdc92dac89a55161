// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * tag_filter_alions — an ali-ons consumer subscribed to `TagA || TagB` gets exactly the TagA/TagB messages.
 *
 * 30 messages with tags TagA, TagB, TagC, `taga` and no tag are sent to a 4-queue topic after a
 * consumer subscribed with `TagA || TagB` was primed (with TagA probes). Passes when the consumer
 * receives every TagA and TagB message exactly once and nothing else, and a raw pull with the
 * same subscription (the broker's own filter; ali-ons re-checks tags client-side, hiding broker
 * mistakes) returns exactly the TagA/TagB records. Fails on a lost matching message or a
 * non-matching one delivered by the broker.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const TAGS = [ 'TagA', 'TagB', 'TagC', 'taga', null ];
const COUNT = 30;
const SUB = 'TagA || TagB';

h.scenario(async ctx => {
  const topic = h.uniq('TagFilterNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('tagged');
  await h.startConsumer(ctx, { group: h.uniq('CG-tagfilter-node'), topic, collector: col, expression: SUB });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-tagfilter-node') });
  await h.prime(producer, topic, col, { tags: 'TagA' });

  const want = new Set();
  for (let i = 0; i < COUNT; i++) {
    const tag = TAGS[i % TAGS.length];
    const body = `m${i} tag=${tag}`;
    const msg = tag ? new Message(topic, tag, body) : new Message(topic, body);
    const r = await producer.send(msg);
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
    if (tag === 'TagA' || tag === 'TagB') want.add(body);
  }
  await col.waitCount(want.size, 30000);
  await col.quietFor(3000, 15000);
  const got = col.real().map(r => r.text);
  const extra = got.filter(b => !want.has(b));
  h.check(extra.length === 0, `consumer subscribed to '${SUB}' received non-matching messages: ${extra}`);
  const missing = [ ...want ].filter(b => !got.includes(b));
  h.check(missing.length === 0, `matching messages never consumed: ${missing}`);
  h.check(got.length === want.size, `${got.length} deliveries for ${want.size} matching messages (duplicates)`);

  const filtered = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '4',
    '--subscription', SUB ]).messages.filter(m => !(m.body || '').startsWith(h.PROBE_PREFIX));
  const wrong = filtered.filter(m => ![ 'TagA', 'TagB' ].includes(m.properties.TAGS)).map(m => m.body);
  h.check(wrong.length === 0, `broker-side filter: raw pull with subscription '${SUB}' returned ${wrong}`);
  h.check(filtered.length === want.size && filtered.every(m => want.has(m.body)),
    `broker-side filter: raw pull returned ${filtered.length} records, want the ${want.size} TagA/TagB ones`);
  return `${want.size} of ${COUNT} messages matched '${SUB}'; client and broker-side filter agree`;
}, { timeoutMs: 110000 });
