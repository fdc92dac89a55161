// needs: namesrv broker slave
// timeout: 180
// broker-conf: brokerRole=SYNC_MASTER
// broker-conf: inSyncReplicas=2
// broker-conf: totalReplicas=2
'use strict';
/**
 * sync_master_slave_read_alions — ali-ons producer sends to a SYNC_MASTER with a slave; a new ali-ons consumer reads everything from the slave while the master is stopped.
 *
 * run.py starts a master (brokerRole=SYNC_MASTER, inSyncReplicas=2: a send waits for the slave)
 * and a slave (brokerId 1, same broker name, slaveReadEnable=true). A probe is sent until it
 * answers SEND_OK (before the slave has attached, the master answers SLAVE_NOT_AVAILABLE), then
 * 40 messages, each of which must be SEND_OK. Raw pulls against SLAVE_ADDR are polled until the
 * slave serves all 40 (it copies the master's topic config periodically; until then it answers
 * TOPIC_NOT_EXIST). Then the master is stopped and an ali-ons push consumer of a new group
 * starts: the route lists only the slave (brokerId 1), so the client must query offsets and pull
 * from it. Passes when every one of the 40 bodies arrives. Offset commits to the slave may fail;
 * only receipt is checked. Fails if sends are not SEND_OK, the slave never holds the messages, or
 * the client cannot consume them from the slave.
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

const COUNT = 40;
const QUEUES = 4;

h.scenario(async ctx => {
  const slave = h.env('SLAVE_ADDR');
  const topic = h.uniq('SyncSlaveNode');
  h.ensureTopic(topic, QUEUES);
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-syncslave-node') });

  // The slave may not have attached to the master's HA port yet: probe until SEND_OK.
  let probes = 0;
  let last = null;
  const probeDeadline = Date.now() + 30000;
  for (;;) {
    try {
      const r = await producer.send(new Message(topic, 'Probe', `${h.PROBE_PREFIX}${probes}`));
      probes++;
      if (r.sendStatus === 'SEND_OK') break;
      last = r.sendStatus;
    } catch (e) {
      last = `${e.name}: ${String(e.message).slice(0, 200)}`;
      probes++;
    }
    h.check(Date.now() < probeDeadline, `no probe send answered SEND_OK within 30 s (${probes} tries, last: ${last})`);
    await h.sleep(500);
  }
  console.log(`probe SEND_OK after ${probes} tries (last other answer: ${last})`);

  const bodies = [];
  const bad = [];
  for (let i = 0; i < COUNT; i++) {
    const b = `sync-slave ${i}`;
    bodies.push(b);
    try {
      const r = await producer.send(new Message(topic, 'TagS', b));
      if (r.sendStatus !== 'SEND_OK') bad.push(`${b}: ${r.sendStatus}`);
    } catch (e) {
      bad.push(`${b}: ${e.name}: ${String(e.message).slice(0, 200)}`);
    }
  }
  h.check(bad.length === 0, `${bad.length} of ${COUNT} sends to the SYNC_MASTER were not SEND_OK: ${bad.slice(0, 5)}`);

  // The slave serves the topic once it has copied the topic config and the replicated data.
  const deadline = Date.now() + 40000;
  let onSlave = [];
  let lastErr = null;
  while (Date.now() < deadline) {
    try {
      onSlave = h.rawmq([ 'pull-all', '--broker', slave, '--topic', topic, '--queues', String(QUEUES), '--timeout', '10' ])
        .messages.map(m => m.body);
      lastErr = null;
    } catch (e) {
      lastErr = e.message;
    }
    if (bodies.every(b => onSlave.includes(b))) break;
    await h.sleep(1000);
  }
  const notOnSlave = bodies.filter(b => !onSlave.includes(b));
  h.check(notOnSlave.length === 0, `raw pulls from the slave ${slave} within 40 s lack ${notOnSlave.length} of ${COUNT} ` +
    `messages (got ${onSlave.length} records; last pull error: ${lastErr})`);
  console.log(`slave serves all ${COUNT} messages to raw pulls`);

  console.log(await h.ctl('stop broker'));
  const col = new h.Collector('slave-reader');
  await h.startConsumer(ctx, { group: h.uniq('CG-syncslave-node'), topic, collector: col });
  await col.waitCount(COUNT, 60000);
  await col.quietFor(2000, 10000);
  const got = col.real().map(r => r.text);
  const missing = bodies.filter(b => !got.includes(b));
  h.check(missing.length === 0, `with the master stopped, the consumer received ${new Set(got).size} of ${COUNT} messages ` +
    `from the slave; missing ${missing.slice(0, 10)}${missing.length > 10 ? ' ...' : ''}`);
  return `${COUNT} sends SEND_OK on the SYNC_MASTER (probe OK after ${probes} tries); the slave held them and a new ` +
    `consumer got all ${COUNT} from it with the master stopped (${got.length} deliveries)`;
}, { timeoutMs: 170000 });
