// needs: namesrv broker
// timeout: 150
'use strict';
/**
 * body_4mib_alions — a body of exactly maxMessageSize (4,194,304 bytes) round-trips; one byte more is refused by the broker (ali-ons).
 *
 * ali-ons does not check body sizes itself (its maxMessageSize option is unused) and compresses
 * bodies >= compressMsgBodyOverHowmuch, raised here to 64 MiB so the body is sent raw. A body of
 * exactly 4 MiB must be SEND_OK, stored uncompressed with that length and read back identical
 * by the ali-ons consumer; a body of 4 MiB + 1 must be refused by the broker with
 * MESSAGE_ILLEGAL (13, as the Java broker) and not stored. Fails otherwise.
 */

const crypto = require('crypto');
const { Message } = require('ali-ons');
const h = require('../lib/harness');

const LIMIT = 4 * 1024 * 1024;

function printable(n, seed) {
  const block = Buffer.alloc(4096);
  let x = Math.imul(seed, 2654435761) >>> 0;
  for (let i = 0; i < 4096; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    block[i] = 0x21 + (x >>> 16) % 94;
  }
  const out = Buffer.alloc(n);
  for (let off = 0; off < n; off += 4096) block.copy(out, off, 0, Math.min(4096, n - off));
  return out;
}

const sha = b => crypto.createHash('sha256').update(b).digest('hex').slice(0, 16);

h.scenario(async ctx => {
  const topic = h.uniq('Body4MNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('big');
  await h.startConsumer(ctx, { group: h.uniq('CG-body4m-node'), topic, collector: col });
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-body4m-node'),
    extra: { compressMsgBodyOverHowmuch: 64 * 1024 * 1024, sendMsgTimeout: 20000 } });
  await h.prime(producer, topic, col);

  const exact = printable(LIMIT, 1);
  const m = new Message(topic, 'TagBig', exact);
  m.keys = [ 'exact' ];
  const r = await producer.send(m);
  h.check(r.sendStatus === 'SEND_OK', `4 MiB send: ${r.sendStatus}`);
  const got = await col.waitCount(1, 60000);
  h.check(got.length === 1, 'the 4 MiB message was not consumed within 60 s');
  h.check(got[0].body.length === LIMIT && sha(got[0].body) === sha(exact),
    `consumer read ${got[0].body.length} bytes (sha ${sha(got[0].body)}), sent ${LIMIT} (sha ${sha(exact)})`);

  const over = new Message(topic, 'TagBig', printable(LIMIT + 1, 2));
  over.keys = [ 'over' ];
  let err = null;
  try {
    const r2 = await producer.send(over);
    err = `accepted: ${JSON.stringify(r2)}`;
  } catch (e) {
    console.log(`oversized send refused: ${e.name} code ${e.code}: ${e.message}`);
    h.check(e.code === 13, `oversized send refused with code ${e.code} (${e.message}), want MESSAGE_ILLEGAL (13)`);
  }
  h.check(err === null, `a body of maxMessageSize + 1 bytes was ${err}`);

  await col.quietFor(2000, 10000);
  const stored = h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '4' ])
    .messages.filter(x => !(x.body || '').startsWith(h.PROBE_PREFIX));
  h.check(stored.length === 1, `raw pull finds ${stored.length} stored big messages (want only the 4 MiB one)`);
  h.check(stored[0].raw_body_len === LIMIT && (stored[0].sys_flag & 1) === 0,
    `stored body length ${stored[0].raw_body_len}, sysFlag ${stored[0].sys_flag}`);
  h.check(stored[0].body === exact.toString('latin1'), 'stored 4 MiB body differs from the sent one');
  h.check(col.real().length === 1, `consumer got ${col.real().length} big messages`);
  return '4,194,304-byte body stored and consumed intact; 4,194,305 bytes refused with MESSAGE_ILLEGAL';
}, { timeoutMs: 140000 });
