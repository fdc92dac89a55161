// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * delay_level_3_alions — an ali-ons message with delayTimeLevel 3 is delivered 10 s after it was sent, not earlier.
 *
 * Default broker delay levels (level 3 = 10 s). With a primed ali-ons consumer running, 3
 * messages with `msg.delayTimeLevel = 3` and one without delay are sent at T0. Passes when the
 * undelayed one arrives at once (< 5 s), each delayed one no earlier than T0 + 10 s and no later
 * than 15 s after the sends, once each, with body, tags, keys and the original topic intact and
 * reconsumeTimes 0. Fails on early or much-late delivery, loss or duplication.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const DELAY_MS = 10000;
const LATE_MS = 5000;

h.scenario(async ctx => {
  const topic = h.uniq('Delay3Node');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('delay');
  await h.startConsumer(ctx, { group: h.uniq('CG-delay3-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-delay3-node') });
  await h.prime(producer, topic, col);

  const t0 = Date.now();
  for (let i = 0; i < 3; i++) {
    const m = new Message(topic, 'TagD', `delayed ${i}`);
    m.keys = [ `dk${i}` ];
    m.delayTimeLevel = 3;
    const r = await producer.send(m);
    h.check(r.sendStatus === 'SEND_OK', `delayed send ${i}: ${r.sendStatus}`);
  }
  const r = await producer.send(new Message(topic, 'TagN', 'now'));
  h.check(r.sendStatus === 'SEND_OK', `undelayed send: ${r.sendStatus}`);
  const t1 = Date.now();

  const now = await col.waitCount(1, 10000, x => x.text === 'now');
  h.check(now.length === 1, 'the undelayed message never arrived');
  h.check(now[0].recvMs - t1 < 5000, `the undelayed message took ${now[0].recvMs - t1} ms`);
  const early = col.real().filter(x => x.text.startsWith('delayed'));
  h.check(early.length === 0, `delayed messages arrived before the undelayed one: ${early.map(x => x.text)}`);
  await col.waitCount(3, DELAY_MS + LATE_MS + 10000, x => x.text.startsWith('delayed'));
  await col.quietFor(2000, 8000);
  const got = col.real().filter(x => x.text.startsWith('delayed'));
  h.check(got.length === 3, `${got.length} delayed deliveries, want 3: ${got.map(x => x.text)}`);
  for (const x of got) {
    const after = x.recvMs - t0;
    h.check(after >= DELAY_MS, `${x.text} delivered ${after} ms after the send started: earlier than level 3 (10 s)`);
    h.check(x.recvMs - t1 <= DELAY_MS + LATE_MS, `${x.text} delivered ${x.recvMs - t1} ms after the sends: much later than 10 s`);
    const i = x.text.split(' ')[1];
    h.check(x.tags === 'TagD' && x.keys === `dk${i}` && x.topic === topic,
      `${x.text}: tags ${x.tags} keys ${x.keys} topic ${x.topic}`);
    h.check(x.reconsumeTimes === 0, `${x.text}: reconsumeTimes ${x.reconsumeTimes}`);
  }
  const lat = got.map(x => x.recvMs - t0).sort((a, b) => a - b);
  return `3 delayed messages arrived ${lat} ms after sending (level 3 = 10 s); undelayed at once`;
}, { timeoutMs: 110000 });
