// needs: namesrv broker
// timeout: 120
'use strict';
/**
 * long_poll_wakeup_alions — an idle ali-ons consumer gets a new message promptly (long polling wakes up on arrival).
 *
 * ali-ons parks pulls with suspendTimeoutMillis 15000 when a queue is empty; the broker must answer
 * as soon as a message arrives. After priming and 6 s idle, 5 messages are sent 1.5 s apart, each
 * waited for. Passes when each arrives within 1,000 ms of its send (median under 300 ms). Fails if
 * parked pulls are only answered on timeout or by a slow periodic scan.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

h.scenario(async ctx => {
  const topic = h.uniq('LongPollNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('idle');
  await h.startConsumer(ctx, { group: h.uniq('CG-longpoll-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-longpoll-node') });
  await h.prime(producer, topic, col);
  await h.sleep(6000);
  const lat = [];
  for (let i = 0; i < 5; i++) {
    const body = `wake ${i}`;
    const t = Date.now();
    const r = await producer.send(new Message(topic, 'TagW', body));
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
    const got = await col.waitCount(1, 20000, x => x.text === body);
    h.check(got.length === 1, `message ${i} not delivered within 20 s`);
    lat.push(got[0].recvMs - t);
    await h.sleep(1500);
  }
  const sorted = lat.slice().sort((a, b) => a - b);
  h.check(Math.max(...lat) <= 1000, `delivery latencies after idling ${lat} ms: a parked pull was not woken on arrival`);
  h.check(sorted[2] <= 300, `median delivery latency ${sorted[2]} ms (${lat})`);
  return `idle consumer woke up in ${lat} ms`;
}, { timeoutMs: 110000 });
