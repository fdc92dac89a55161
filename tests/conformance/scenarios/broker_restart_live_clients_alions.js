// needs: namesrv broker
// timeout: 180
'use strict';
/**
 * broker_restart_live_clients_alions — ali-ons producer and consumer keep working across a broker restart without app-level retries.
 *
 * A producer and a clustering consumer stay running while run.py restarts the broker on the same
 * store. 10 messages are consumed before the restart; 10 are sent after it with the same producer
 * object. Passes when every post-restart send succeeds (ali-ons may retry inside one send call),
 * the live consumer receives all 10 new messages once and none of the earlier ones again. Fails
 * if clients cannot reconnect, sends fail, or old messages come back.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 10;

h.scenario(async ctx => {
  const topic = h.uniq('LiveRestartNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('live');
  await h.startConsumer(ctx, { group: h.uniq('CG-liverestart-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-liverestart-node') });
  await h.prime(producer, topic, col);
  const before = [];
  for (let i = 0; i < COUNT; i++) {
    before.push(`before ${i}`);
    const r = await producer.send(new Message(topic, 'TagL', `before ${i}`));
    h.check(r.sendStatus === 'SEND_OK', `send before ${i}: ${r.sendStatus}`);
  }
  h.check((await col.waitCount(COUNT, 30000)).length === COUNT, 'messages before the restart not consumed');
  await col.quietFor(1500, 10000);

  console.log(await h.restartBroker());
  const after = [];
  const failures = [];
  for (let i = 0; i < COUNT; i++) {
    after.push(`after ${i}`);
    try {
      const r = await producer.send(new Message(topic, 'TagL', `after ${i}`));
      if (r.sendStatus !== 'SEND_OK') failures.push(`after ${i}: ${r.sendStatus}`);
    } catch (e) {
      failures.push(`after ${i}: ${e.name}: ${e.message.slice(0, 120)}`);
    }
  }
  h.check(failures.length === 0, `${failures.length} sends failed after the broker restart: ${failures.slice(0, 3)}`);
  await col.waitCount(2 * COUNT, 60000);
  await col.quietFor(3000, 15000);
  const got = col.real().map(r => r.text);
  const missing = after.filter(b => !got.includes(b));
  h.check(missing.length === 0, `after the restart the live consumer never received ${missing}`);
  const again = before.filter(b => got.filter(x => x === b).length > 1);
  h.check(again.length === 0, `messages consumed before the restart were delivered again: ${again}`);
  const dups = after.filter(b => got.filter(x => x === b).length > 1);
  h.check(dups.length === 0, `post-restart messages delivered twice: ${dups}`);
  return `producer and consumer survived the restart; ${COUNT} new messages consumed once, no old ones again`;
}, { timeoutMs: 170000 });
