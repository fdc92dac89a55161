// needs: namesrv
// timeout: 60
'use strict';
/**
 * route_resolve_alions — ali-ons 3.12.0 resolves a topic route from ringmq's namesrv.
 *
 * A stand-in broker (lib/fake_broker.py) registers with ringmq's name server with topic T
 * (3 read/write queues) and TBW102. The real ali-ons producer, given only nameSrv, sends 6
 * messages with tags, keys and user properties. Passes when every send is SEND_OK with the
 * broker's msgId, all 6 arrive at the registered broker for T with their tags/keys/properties,
 * and they spread over exactly queues {0,1,2}. Fails if the route is missing or wrong (sends
 * never arrive, or use other queues).
 */

const { Producer, Message } = require('ali-ons');
const { check, env, scenario, startFakeBroker } = require('../lib/harness');

const QUEUES = 3;
const COUNT = 6;

scenario(async ctx => {
  const nameSrv = env('NAMESRV_ADDR');
  const topic = `RouteResolveNode-${process.pid}`;
  const broker = await startFakeBroker({ namesrv: nameSrv, topics: [ topic ], queues: QUEUES });
  ctx.onCleanup(() => broker.stop());

  const producer = new Producer({ nameSrv, httpclient: {}, producerGroup: `PG-route-node-${process.pid}` });
  producer.on('error', err => console.error('producer error:', err.message));
  await producer.ready();

  const results = [];
  for (let i = 0; i < COUNT; i++) {
    const msg = new Message(topic, 'TagR', `route body ${i}`);
    msg.keys = [ `rk${i}` ];
    msg.properties.color = 'red';
    const r = await producer.send(msg);
    check(r.sendStatus === 'SEND_OK', `send ${i}: status ${r.sendStatus}`);
    results.push(r);
  }
  const sends = await broker.waitFor(e => e.event === 'send' && e.topic === topic, COUNT, 10000);
  check(sends.length === COUNT, `${sends.length}/${COUNT} sends reached the broker registered at ${broker.addr}`);
  for (let i = 0; i < COUNT; i++) {
    const s = sends.find(e => e.messages[0].body === `route body ${i}`);
    check(s, `send ${i} not seen by the broker`);
    const p = s.messages[0].properties;
    check(p.TAGS === 'TagR', `send ${i}: TAGS ${p.TAGS}`);
    check(p.KEYS === `rk${i}`, `send ${i}: KEYS ${p.KEYS}`);
    check(p.color === 'red', `send ${i}: property color ${p.color}`);
    check(results[i].msgId === s.msg_ids[0], `send ${i}: client msgId ${results[i].msgId} != broker's ${s.msg_ids[0]}`);
  }
  const queues = [ ...new Set(sends.map(s => s.queue_id)) ].sort();
  check(JSON.stringify(queues) === JSON.stringify([ 0, 1, 2 ]), `sends used queues ${queues}, route announced ${QUEUES}`);
  await producer.close();
  return `${COUNT} sends routed via ${nameSrv} to ${broker.addr}, queues ${queues}`;
});
