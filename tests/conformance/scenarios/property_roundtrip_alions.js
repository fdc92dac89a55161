// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * property_roundtrip_alions — unicode tags, many keys and 30 unusual user properties survive send, store and consume (ali-ons).
 *
 * One message with a unicode tag (`标签-A`), five keys (unicode, emoji) and 30 user properties
 * whose values mix unicode, emoji, spaces and `= : ; , " ' \ / ?`, plus one 3,000-character
 * unicode value. Passes when the ali-ons consumer reads back every tag, key and property value
 * exactly and the raw stored record decodes to the same values. Fails on any re-encoding,
 * truncation or mis-split of the property string.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const TAG = '标签-A';
const KEYS = [ 'k1', 'k2', 'κλειδί-3', '🔑4', 'ключ_5' ];

function props() {
  const specials = [ 'grüße', 'naïve café', '数据=值', 'a:b;c,d', '"quoted"', "it's", 'back\\slash', '/path?q=1&r=2',
    'emoji 🚀🔥', 'tab\tinside', '  padded  ', 'שלום', 'مرحبا', 'ñ-ü-ö-ä', 'x'.repeat(100) ];
  const out = {};
  for (let i = 0; i < 30; i++) out[`p${String(i).padStart(2, '0')}`] = `${specials[i % specials.length]} #${i}`;
  out.long = Array.from('長い値-ü-🚀 '.repeat(300)).slice(0, 3000).join('');
  return out;
}

h.scenario(async ctx => {
  const topic = h.uniq('PropsNode');
  h.ensureTopic(topic, 4);
  const want = props();
  const col = new h.Collector('props');
  await h.startConsumer(ctx, { group: h.uniq('CG-props-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-props-node') });
  await h.prime(producer, topic, col);

  const msg = new Message(topic, TAG, 'property carrier');
  msg.keys = KEYS;
  Object.assign(msg.properties, want);
  const r = await producer.send(msg);
  h.check(r.sendStatus === 'SEND_OK', `send: ${r.sendStatus}`);
  const got = await col.waitCount(1, 30000);
  h.check(got.length === 1, 'the message was not consumed within 30 s');
  const g = got[0];
  h.check(g.tags === TAG, `tags ${g.tags}, sent ${TAG}`);
  h.check(g.keys === KEYS.join(' '), `keys ${JSON.stringify(g.keys)}, sent ${JSON.stringify(KEYS.join(' '))}`);
  for (const [ k, v ] of Object.entries(want)) {
    h.check(g.props[k] === v, `property ${k}: consumer read ${JSON.stringify(g.props[k])}, sent ${JSON.stringify(v)}`);
  }
  const stored = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '4' ])
    .messages.filter(m => m.body === 'property carrier');
  h.check(stored.length === 1, `raw pull finds ${stored.length} copies`);
  const sp = stored[0].properties;
  h.check(sp.TAGS === TAG && sp.KEYS === KEYS.join(' '), `stored TAGS ${sp.TAGS} KEYS ${sp.KEYS}`);
  for (const [ k, v ] of Object.entries(want)) {
    h.check(sp[k] === v, `stored property ${k}: ${JSON.stringify(sp[k])}, sent ${JSON.stringify(v)}`);
  }
  return `tag, 5 keys and ${Object.keys(want).length} user properties round-tripped byte for byte`;
}, { timeoutMs: 110000 });
