// needs: namesrv broker
// timeout: 120
// broker-conf: enablePropertyFilter=true
'use strict';
/**
 * sql92_filter_alions — an ali-ons SQL92 subscription gets exactly the messages whose properties match.
 *
 * Broker started with enablePropertyFilter=true. An ali-ons consumer subscribes with
 * {expressionType: 'SQL92'} to `(a IS NOT NULL AND a > 5 AND color = 'red') OR region IN ('eu', 'us')`
 * (ali-ons does no client-side filtering for SQL92: only the broker filters). 40 messages carry
 * combinations of a (numeric text, sometimes absent), color and region. Passes when the consumer
 * receives exactly the matching messages, each once, and a raw SQL92 pull agrees. Fails if the
 * broker ignores the expression (everything delivered), evaluates it wrongly (numbers as text,
 * NULL handling, AND/OR precedence, IN), or loses matching messages.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 40;
const EXPR = "(a IS NOT NULL AND a > 5 AND color = 'red') OR region IN ('eu', 'us')";

function propsOf(i) {
  const p = { color: i % 2 ? 'red' : 'blue' };
  if (i % 7 !== 0) p.a = String(i % 10);
  if (i % 5 === 0) p.region = 'eu';
  else if (i % 5 === 1) p.region = 'asia';
  else if (i % 11 === 3) p.region = 'us';
  return p;
}

function matches(p) {
  return (p.a !== undefined && Number(p.a) > 5 && p.color === 'red') || [ 'eu', 'us' ].includes(p.region);
}

h.scenario(async ctx => {
  const topic = h.uniq('Sql92Node');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('sql92');
  await h.startConsumer(ctx, { group: h.uniq('CG-sql92-node'), topic, collector: col,
    expression: { expressionType: 'SQL92', subString: EXPR } });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-sql92-node') });
  await h.prime(producer, topic, col, { props: { region: 'eu' } });

  const want = new Set();
  for (let i = 0; i < COUNT; i++) {
    const body = `m${i} ${JSON.stringify(propsOf(i))}`;
    const msg = new Message(topic, 'TagS', body);
    Object.assign(msg.properties, propsOf(i));
    const r = await producer.send(msg);
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
    if (matches(propsOf(i))) want.add(body);
  }
  await col.waitCount(want.size, 30000);
  await col.quietFor(3000, 15000);
  const got = col.real().map(r => r.text);
  const extra = got.filter(b => !want.has(b));
  h.check(extra.length === 0, `SQL92 consumer received ${extra.length} non-matching messages, e.g. ${extra.slice(0, 5).join(' | ')}`);
  const missing = [ ...want ].filter(b => !got.includes(b));
  h.check(missing.length === 0, `matching messages never consumed: ${missing.join(' | ')}`);
  h.check(got.length === want.size, `${got.length} deliveries for ${want.size} matching messages (duplicates)`);

  const filtered = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '4',
    '--subscription', EXPR, '--expression-type', 'SQL92' ]).messages.filter(m => !(m.body || '').startsWith(h.PROBE_PREFIX));
  const rawBodies = filtered.map(m => m.body);
  h.check(rawBodies.length === want.size && rawBodies.every(b => want.has(b)),
    `raw SQL92 pull returned ${rawBodies.length} records (${rawBodies.filter(b => !want.has(b)).length} non-matching), want ${want.size}`);
  return `${want.size} of ${COUNT} messages matched the SQL92 expression; consumer and raw pull agree`;
}, { timeoutMs: 110000 });
