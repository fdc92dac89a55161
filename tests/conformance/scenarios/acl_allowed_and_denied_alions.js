// needs: namesrv broker
// timeout: 150
// broker-conf: aclEnable=true
'use strict';
/**
 * acl_allowed_and_denied_alions — ali-ons 3.12.0 with accessKey/secretKey against a broker
 * running plain ACL.
 *
 * The scenario writes the broker's plain_acl.yml: an admin account (used only to create the
 * topics), and a user with PUB|SUB on one topic, DENY on a second, SUB on its consumer group.
 * Once the broker has reloaded the file:
 *   - the user's ali-ons producer sends 10 messages to the allowed topic: all SEND_OK;
 *   - its send to the denied topic fails and nothing is stored there;
 *   - a producer with a wrong secret cannot send;
 *   - the user's ali-ons push consumer receives the 10 messages.
 * ali-ons signs its OnsChannel field and header values as JSON numbers and strings; a broker that
 * rebuilt the signed content differently would refuse every request, and one that ignored the
 * file would accept the denied send.
 */

const fs = require('fs');
const path = require('path');
const { Message } = require('ali-ons');
const h = require('../lib/harness');

const ADMIN = [ 'aclAdmin01', 'admin-secret-01' ];
const USER = [ 'nodeUser01', 'node-user-secret' ];

function aclFile(allowed, denied, group) {
  return [
    'accounts:',
    `  - accessKey: ${ADMIN[0]}`, `    secretKey: ${ADMIN[1]}`, '    admin: true',
    `  - accessKey: ${USER[0]}`, `    secretKey: ${USER[1]}`,
    '    defaultTopicPerm: DENY', '    defaultGroupPerm: DENY',
    '    topicPerms:', `      - ${allowed}=PUB|SUB`, `      - ${denied}=DENY`,
    '    groupPerms:', `      - ${group}=SUB`, '',
  ].join('\n');
}

/** Creating a topic needs the admin account, so it succeeds once the broker reloaded the file. */
async function createTopicsOnceReloaded(topics) {
  process.env.RINGMQ_ACL_ACCESS_KEY = ADMIN[0];
  process.env.RINGMQ_ACL_SECRET_KEY = ADMIN[1];
  const deadline = Date.now() + 15000;
  for (;;) {
    try {
      for (const t of topics) h.ensureTopic(t, 2);
      return;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await h.sleep(300);
    }
  }
}

const credentials = secret => ({ accessKey: USER[0], secretKey: secret });

h.scenario(async ctx => {
  const allowed = h.uniq('AclNode');
  const denied = h.uniq('AclNodeDenied');
  const group = h.uniq('CG-acl-node');
  fs.writeFileSync(path.join(h.env('RINGMQ_DATA_DIR'), 'conf', 'plain_acl.yml'), aclFile(allowed, denied, group));
  await createTopicsOnceReloaded([ allowed, denied ]);

  const producer = await h.startProducer(ctx, { group: h.uniq('PG-acl-node'), extra: credentials(USER[1]) });
  for (let i = 0; i < 10; i++) {
    const r = await producer.send(new Message(allowed, 'TagAcl', `acl body ${i}`));
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
  }
  let refusal = null;
  try {
    await producer.send(new Message(denied, 'TagAcl', 'must not be stored'));
  } catch (e) {
    refusal = e.message;
  }
  h.check(refusal, 'a send to the denied topic was accepted');
  // ali-ons reports only "Send [N] times, still failed"; the reason is in the broker's log,
  // which run.py keeps beside the data directory.
  const brokerLog = fs.readFileSync(path.join(h.env('RINGMQ_DATA_DIR'), '..', 'broker.log'), 'utf8');
  h.check(brokerLog.includes(`No permission for topic:${denied}`),
    `the broker did not log the ACL refusal of ${denied}; the client said: ${refusal}`);
  const stored = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', denied, '--queues', '2' ]).messages;
  h.check(stored.length === 0, `${stored.length} messages reached the denied topic`);

  // Clients of one instance name share their connections, signed with the first client's
  // credentials: the forged producer gets an instance of its own.
  const forged = await h.startProducer(ctx, {
    group: h.uniq('PG-acl-forged'), extra: Object.assign({ instanceName: 'forged' }, credentials('not-the-secret')),
  });
  let forgedError = null;
  try {
    await forged.send(new Message(allowed, 'TagAcl', 'forged'));
  } catch (e) {
    forgedError = e.message;
  }
  h.check(forgedError, 'a producer with a wrong secret could send');

  const col = new h.Collector('acl');
  await h.startConsumer(ctx, { group, topic: allowed, collector: col, extra: credentials(USER[1]) });
  const got = await col.waitCount(10, 60000);
  const bodies = got.map(r => r.text).filter(b => b.startsWith('acl body')).sort();
  h.check(bodies.length === 10, `the signed consumer received ${bodies.length}/10`);
  return 'signed sends stored, denied topic refused with NO_PERMISSION, forged secret refused, signed consume complete';
}, { timeoutMs: 140000 });
