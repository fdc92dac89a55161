// needs: namesrv broker
// timeout: 150
'use strict';
/**
 * compressed_body_cpp_to_alions — bodies compressed by the C++ core are read back intact by ali-ons.
 *
 * Cross-client: the C++-core producer (lib/cpp_tool.py, the real rocketmq-client-python 2.0.0)
 * sends bodies of 8 KiB, 256 KiB (repetitive) and 100 KiB (pseudo-random printable) — over its
 * 4 KiB compression threshold, so they go out zlib-compressed with sysFlag bit 0 — plus a
 * 4,000-byte one that stays raw. An ali-ons consumer (primed first) must read every body back
 * identical (ali-ons inflates bodies with the compressed flag); the raw stored records must
 * carry the flag for the large ones. Fails if the broker loses the flag or corrupts the bytes,
 * or ali-ons cannot inflate what the C++ core compressed after its trip through ringmq.
 */

const crypto = require('crypto');
const { Message } = require('ali-ons');
const h = require('../lib/harness');

const SPECS = [
  { keys: 'small', body_pattern: 's', body_len: 4000 },
  { keys: '8k', body_pattern: 'compress me! ', body_len: 8192 },
  { keys: '256k', body_pattern: '0123456789abcdef', body_len: 256 * 1024 },
];

function randomPrintable(n) {
  const b = Buffer.alloc(n);
  let x = 7;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    b[i] = 0x21 + (x >>> 16) % 94;
  }
  return b;
}

function expectedBody(spec) {
  if (spec.body_b64) return Buffer.from(spec.body_b64, 'base64');
  const pat = Buffer.from(spec.body_pattern);
  const out = Buffer.alloc(spec.body_len);
  for (let i = 0; i < spec.body_len; i++) out[i] = pat[i % pat.length];
  return out;
}

const sha = b => crypto.createHash('sha256').update(b).digest('hex').slice(0, 16);

h.scenario(async ctx => {
  const topic = h.uniq('CompressedCppNode');
  h.ensureTopic(topic, 4);
  const col = new h.Collector('zlib');
  await h.startConsumer(ctx, { group: h.uniq('CG-compressed-node'), topic, collector: col });
  const prober = await h.startProducer(ctx, { group: h.uniq('PG-probe-node') });
  await h.prime(prober, topic, col);

  const specs = SPECS.concat([ { keys: 'random', body_b64: randomPrintable(100 * 1024).toString('base64') } ]);
  const res = h.cppTool({ op: 'send', namesrv: h.env('NAMESRV_ADDR'), group: h.uniq('PG-cpp-compress'), topic,
    max_message_size: 4194304, messages: specs.map(s => Object.assign({ tags: 'TagZ' }, s)) });
  h.check(res.results.every(r => r.status === 0), `C++ sends: ${JSON.stringify(res.results)}`);

  await col.waitCount(specs.length, 30000);
  await col.quietFor(2000, 8000);
  const got = new Map(col.real().map(r => [ r.keys, r.body ]));
  for (const s of specs) {
    const want = expectedBody(s);
    h.check(got.has(s.keys), `${s.keys}: never consumed by ali-ons`);
    const b = got.get(s.keys);
    h.check(b.length === want.length && sha(b) === sha(want),
      `${s.keys}: ali-ons read ${b.length} bytes (sha ${sha(b)}), C++ sent ${want.length} (sha ${sha(want)})`);
  }
  const stored = new Map(h.rawmq([ 'pull-all', '--broker', h.env('BROKER_ADDR'), '--topic', topic, '--queues', '4' ])
    .messages.filter(m => !(m.body || '').startsWith(h.PROBE_PREFIX)).map(m => [ m.properties.KEYS, m ]));
  for (const s of specs) {
    const m = stored.get(s.keys);
    h.check(m, `${s.keys}: not found by a raw pull`);
    const compressed = (m.sys_flag & 1) === 1;
    if (s.keys === 'small') h.check(!compressed, `small: stored with sysFlag ${m.sys_flag}`);
    else h.check(compressed && m.raw_body_len !== expectedBody(s).length, `${s.keys}: stored sysFlag ${m.sys_flag}, length ${m.raw_body_len}: not compressed`);
  }
  return `C++-compressed bodies read intact by ali-ons; stored sizes ${[ ...stored ].map(([ k, m ]) => `${k}=${m.raw_body_len}`)}`;
}, { timeoutMs: 140000 });
