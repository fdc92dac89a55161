// needs: namesrv broker
// timeout: 150
'use strict';
/**
 * clustering_two_consumers_share_alions — two ali-ons consumers of one clustering group split the queues; each message is consumed once.
 *
 * Two ali-ons consumers (distinct instance names, one process) join the same CLUSTERING group on a
 * 4-queue topic. The broker must list both in GET_CONSUMER_LIST_BY_GROUP so that each rebalance
 * (every 2 s here) takes 2 of the 4 queues. Once the split of probe deliveries is disjoint, covers
 * all queues and is stable for 3 s, 40 messages are sent. Passes when every message is consumed
 * exactly once by the group, by both consumers, with no queue served to both. Fails on duplicates
 * (both consumers pulling the same queue), loss, or one consumer getting everything.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 40;

h.scenario(async ctx => {
  const topic = h.uniq('ShareNode');
  const group = h.uniq('CG-share-node');
  h.ensureTopic(topic, 4);
  const cols = [ new h.Collector('c1'), new h.Collector('c2') ];
  for (let i = 0; i < 2; i++) {
    await h.startConsumer(ctx, { group, topic, collector: cols[i], instanceName: `share${i + 1}` });
  }
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-share-node') });
  const deadline = Date.now() + 75000;
  let sent = 0;
  let stableSince = null;
  let lastSplit = '';
  let recent = [ [], [] ];
  while (Date.now() < deadline) {
    for (let i = 0; i < 4; i++) {
      await producer.send(new Message(topic, 'Probe', `${h.PROBE_PREFIX}${sent++}`));
    }
    await h.sleep(1000);
    recent = cols.map(c => [ ...new Set(c.probes().slice(-8).map(r => r.queueId)) ].sort());
    const union = new Set([ ...recent[0], ...recent[1] ]);
    const overlap = recent[0].filter(q => recent[1].includes(q));
    const split = JSON.stringify(recent);
    const ok = recent[0].length && recent[1].length && overlap.length === 0 && union.size === 4;
    if (ok && split === lastSplit) {
      stableSince = stableSince || Date.now();
      if (Date.now() - stableSince >= 3000) break;
    } else {
      stableSince = null;
    }
    lastSplit = split;
  }
  h.check(stableSince, `the two consumers never settled on disjoint halves of the queues within 75 s (recent probe queues: ${JSON.stringify(recent)})`);

  const bodies = [];
  for (let i = 0; i < COUNT; i++) {
    bodies.push(`shared ${i}`);
    const r = await producer.send(new Message(topic, 'TagS', `shared ${i}`));
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
  }
  const until = Date.now() + 30000;
  while (Date.now() < until && cols[0].real().length + cols[1].real().length < COUNT) await h.sleep(500);
  for (const c of cols) await c.quietFor(2000, 10000);
  const got = cols.flatMap(c => c.real().map(r => r.text));
  const missing = bodies.filter(b => !got.includes(b));
  h.check(missing.length === 0, `messages consumed by neither consumer: ${missing.slice(0, 8)}`);
  const dups = [ ...new Set(got.filter((b, i) => got.indexOf(b) !== i)) ];
  h.check(dups.length === 0, `messages consumed twice by the group: ${dups.slice(0, 8)}`);
  const q1 = new Set(cols[0].real().map(r => r.queueId));
  const q2 = new Set(cols[1].real().map(r => r.queueId));
  h.check(cols[0].real().length && cols[1].real().length, `one consumer got nothing: c1 ${cols[0].real().length}, c2 ${cols[1].real().length}`);
  const both = [ ...q1 ].filter(q => q2.has(q));
  h.check(both.length === 0, `queues ${both} were served to both consumers`);
  return `group split the queues [${[ ...q1 ]}] / [${[ ...q2 ]}]; ${COUNT} messages consumed once`;
}, { timeoutMs: 140000 });
