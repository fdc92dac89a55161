// needs: namesrv broker
// timeout: 90
'use strict';
/**
 * timer_delay_and_deliver_ms_alions — ali-ons messages with TIMER_DELAY_SEC=5 and TIMER_DELIVER_MS=now+3 s arrive at their time, not earlier.
 *
 * With a primed ali-ons consumer running, one message with the user property TIMER_DELAY_SEC=5,
 * one with TIMER_DELIVER_MS=T0+3000 and one plain message are sent at T0. Passes when the plain
 * one arrives at once (< 5 s), the TIMER_DELIVER_MS one no earlier than T0+3000 and at most 5 s
 * later, the TIMER_DELAY_SEC one no earlier than T0+5000 and at most 5 s after the sends ended,
 * each once, with topic, tags and body intact and the broker's TIMER_OUT_MS / TIMER_ENQUEUE_MS /
 * TIMER_DEQUEUE_MS properties present. Fails on early or much-late delivery, loss or duplication.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const LATE_MS = 5000;
const BROKER_PROPS = [ 'TIMER_OUT_MS', 'TIMER_ENQUEUE_MS', 'TIMER_DEQUEUE_MS' ];

h.scenario(async ctx => {
  const topic = h.uniq('TimerMsgNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('timer');
  await h.startConsumer(ctx, { group: h.uniq('CG-timer-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-timer-node') });
  await h.prime(producer, topic, col);

  const t0 = Date.now();
  const deliverAt = t0 + 3000;
  const sends = [
    [ 'delay-sec', { TIMER_DELAY_SEC: '5' } ],
    [ 'deliver-ms', { TIMER_DELIVER_MS: String(deliverAt) } ],
    [ 'now', {} ],
  ];
  for (const [ text, props ] of sends) {
    const m = new Message(topic, 'TagT', text);
    Object.assign(m.properties, props);
    const r = await producer.send(m);
    h.check(r.sendStatus === 'SEND_OK', `send ${text}: ${r.sendStatus}`);
  }
  const t1 = Date.now();

  const now = await col.waitCount(1, 10000, x => x.text === 'now');
  h.check(now.length === 1 && now[0].recvMs - t1 < 5000, 'the plain message did not arrive at once');
  await col.waitCount(2, 5000 + LATE_MS + 10000, x => x.text === 'delay-sec' || x.text === 'deliver-ms');
  await col.quietFor(1500, 6000);
  const lat = {};
  for (const [ text, earliest, latest ] of [
    [ 'deliver-ms', deliverAt, deliverAt + LATE_MS ],
    [ 'delay-sec', t0 + 5000, t1 + 5000 + LATE_MS ],
  ]) {
    const recs = col.real().filter(x => x.text === text);
    h.check(recs.length === 1, `${text}: ${recs.length} deliveries, want 1`);
    const x = recs[0];
    h.check(x.recvMs >= earliest, `${text} arrived ${earliest - x.recvMs} ms early`);
    h.check(x.recvMs <= latest, `${text} arrived ${x.recvMs - earliest} ms after its time`);
    h.check(x.topic === topic && x.tags === 'TagT', `${text}: topic ${x.topic} tags ${x.tags}`);
    for (const k of BROKER_PROPS) h.check(x.props[k], `${text}: property ${k} missing`);
    lat[text] = x.recvMs - t0;
  }
  return `timer messages arrived after ${JSON.stringify(lat)} ms (asked 3000 and 5000); plain one at once`;
}, { timeoutMs: 80000 });
