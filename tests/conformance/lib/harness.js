'use strict';
/**
 * harness.js — helpers for Node.js conformance scenarios (stdlib only).
 *
 * Owns: `scenario(fn, {timeoutMs})` — runs an async scenario body, prints `PASS ...` and exits 0,
 * or prints `FAIL: <reason>` and exits 1 (also on a hard timeout), or `SKIP: <reason>` and exits
 * 77 when the body throws `new SkipError(reason)`; `check(cond, msg)`;
 * `startFakeBroker(opts)` — spawns lib/fake_broker.py (with $CONFORMANCE_PYTHON), which
 * registers a stand-in broker with the name server and reports what clients send to it as
 * JSON lines; `sleep`. Every wait is bounded. The fake broker is our child: it exits when our
 * stdin pipe to it closes (i.e. when this process ends) and is killed by pid in `stop()`.
 * Also, for produce/consume scenarios with the real ali-ons client:
 *   `rawmq(args)` — runs lib/rawmq.py (raw broker admin and verification pulls) and returns its
 *     JSON; `ensureTopic(topic, queues)` creates a topic on BROKER_ADDR and waits for its route;
 *   `cppTool(request)` — runs lib/cpp_tool.py: the real C++-core client as a helper process
 *     (cross-client scenarios: a C++ producer feeding an ali-ons consumer);
 *   `ctl(cmd)` / `restartBroker()` — run.py's RINGMQ_CTL process control;
 *   `Collector`, `startConsumer(opts)`, `startProducer(opts)`, `prime(...)` — an ali-ons push
 *     consumer whose handler records every message (and may answer ACTION_RETRY), and probes
 *     sent until the consumer got one from every queue (its start offsets are settled).
 */

const { spawn, spawnSync } = require('child_process');
const net = require('net');
const path = require('path');
const readline = require('readline');

const LIB = __dirname;

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

class CheckError extends Error {}
class SkipError extends Error {}

function check(cond, msg) {
  if (!cond) throw new CheckError(msg);
}

function env(name) {
  const v = process.env[name];
  if (!v) throw new CheckError(`environment variable ${name} is not set (run through tests/conformance/run.py)`);
  return v;
}

/**
 * Start lib/fake_broker.py registered with `namesrv` for `topics`.
 * Resolves to { addr, name, events, waitFor(pred, count, timeoutMs), sends(topic), stop() }.
 */
function startFakeBroker({ namesrv, topics = [], queues = 4, tbw102 = true, readyTimeoutMs = 20000 }) {
  const py = process.env.CONFORMANCE_PYTHON || 'python3';
  const args = [ path.join(LIB, 'fake_broker.py'), '--namesrv', namesrv, '--queues', String(queues) ];
  for (const t of topics) args.push('--topic', t);
  if (!tbw102) args.push('--no-tbw102');
  const child = spawn(py, args, { stdio: [ 'pipe', 'pipe', 'inherit' ] });
  const events = [];
  const waiters = new Set();
  const rl = readline.createInterface({ input: child.stdout });
  rl.on('line', line => {
    let ev;
    try { ev = JSON.parse(line); } catch (e) { ev = { event: 'garbage', line }; }
    events.push(ev);
    for (const w of waiters) w();
  });

  const handle = {
    child,
    events,
    addr: null,
    name: null,
    sends(topic) {
      return events.filter(e => e.event === 'send' && (topic === undefined || e.topic === topic));
    },
    // Wait until `count` events match `pred`; resolves to the matching events (maybe fewer on timeout).
    waitFor(pred, count = 1, timeoutMs = 10000) {
      return new Promise(resolve => {
        const done = () => {
          const got = events.filter(pred);
          if (got.length >= count) { finish(got); }
        };
        const timer = setTimeout(() => finish(events.filter(pred)), timeoutMs);
        function finish(got) {
          clearTimeout(timer);
          waiters.delete(done);
          resolve(got);
        }
        waiters.add(done);
        done();
      });
    },
    stop() {
      try { child.stdin.end(); } catch (e) { /* already gone */ }
      if (child.exitCode === null && child.signalCode === null) {
        try { process.kill(child.pid, 'SIGTERM'); } catch (e) { /* already gone */ }
      }
    },
  };

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      handle.stop();
      reject(new CheckError(`fake broker did not become ready within ${readyTimeoutMs} ms`));
    }, readyTimeoutMs);
    const onEvent = () => {
      const err = events.find(e => e.event === 'error');
      if (err) {
        clearTimeout(timer);
        waiters.delete(onEvent);
        handle.stop();
        reject(new CheckError(err.message));
        return;
      }
      const ready = events.find(e => e.event === 'ready');
      if (ready) {
        clearTimeout(timer);
        waiters.delete(onEvent);
        handle.addr = ready.broker_addr;
        handle.name = ready.broker_name;
        resolve(handle);
      }
    };
    waiters.add(onEvent);
    child.on('exit', code => {
      if (!handle.addr) {
        clearTimeout(timer);
        reject(new CheckError(`fake broker exited with code ${code} before it was ready`));
      }
    });
  });
}

/** Run an async scenario body with a hard timeout; print PASS/FAIL and exit. */
function scenario(fn, { timeoutMs = 50000 } = {}) {
  const cleanups = [];
  const hard = setTimeout(() => {
    console.log(`FAIL: scenario body did not finish within ${timeoutMs} ms`);
    for (const c of cleanups) { try { c(); } catch (e) { /* best effort */ } }
    process.exit(1);
  }, timeoutMs);
  const ctx = { onCleanup: c => cleanups.push(c) };
  Promise.resolve()
    .then(() => fn(ctx))
    .then(msg => {
      clearTimeout(hard);
      for (const c of cleanups) { try { c(); } catch (e) { /* best effort */ } }
      console.log(`PASS ${msg || ''}`.trim());
      process.exit(0);
    }, err => {
      clearTimeout(hard);
      for (const c of cleanups) { try { c(); } catch (e) { /* best effort */ } }
      if (err instanceof SkipError) {
        console.log(`SKIP: ${err.message}`);
        process.exit(77);
      }
      const reason = err instanceof CheckError ? err.message : (err && err.stack) || String(err);
      console.log(`FAIL: ${reason}`);
      process.exit(1);
    });
}


// ---- raw broker operations and the C++ client as a helper process ----------------------------

function runPython(script, args, input, timeoutMs) {
  const py = process.env.CONFORMANCE_PYTHON || 'python3';
  const r = spawnSync(py, [ path.join(LIB, script), ...args ], {
    input: input === undefined ? undefined : input, timeout: timeoutMs, maxBuffer: 256 * 1024 * 1024,
    env: Object.assign({}, process.env, { PYTHONPATH: LIB }),
  });
  if (r.error) throw new CheckError(`${script} ${args.join(' ')}: ${r.error.message}`);
  const out = (r.stdout || '').toString().trim().split('\n').filter(Boolean).pop() || '';
  let res;
  try { res = JSON.parse(out); } catch (e) {
    throw new CheckError(`${script} ${args[0]}: exit ${r.status}, no JSON answer: ${out.slice(0, 300)} ${(r.stderr || '').toString().slice(-500)}`);
  }
  if (!res.ok) throw new CheckError(`${script} ${args[0]}: ${res.error}`);
  return res;
}

/** lib/rawmq.py CLI: e.g. rawmq([ 'pull-all', '--broker', addr, '--topic', t ]). */
function rawmq(args, timeoutMs = 60000) {
  return runPython('rawmq.py', args, undefined, timeoutMs);
}

/** Create `topic` (queues read/write queues) on BROKER_ADDR; resolves when NAMESRV_ADDR routes it. */
function ensureTopic(topic, queues = 4) {
  return rawmq([ 'create-topic', '--broker', env('BROKER_ADDR'), '--namesrv', env('NAMESRV_ADDR'),
    '--topic', topic, '--queues', String(queues) ]);
}

/** lib/cpp_tool.py: one JSON request on stdin to the real C++-core client, JSON answer. */
function cppTool(request, timeoutMs = 90000) {
  return runPython('cpp_tool.py', [], JSON.stringify(request), timeoutMs);
}

/** run.py process control: 'restart broker', 'stop broker', 'start broker', 'kill broker'; the same for
 * 'slave' (brokerId 1 of `needs: namesrv broker slave`), 'restart namesrv'. */
function ctl(cmd, timeoutMs = 60000) {
  const sockPath = env('RINGMQ_CTL');
  return new Promise((resolve, reject) => {
    let data = '';
    const s = net.createConnection(sockPath, () => s.write(cmd + '\n'));
    const timer = setTimeout(() => { s.destroy(); reject(new CheckError(`ctl ${cmd}: no answer within ${timeoutMs} ms`)); }, timeoutMs);
    s.on('data', d => { data += d.toString(); });
    s.on('error', e => { clearTimeout(timer); reject(new CheckError(`ctl ${cmd}: ${e.message}`)); });
    s.on('close', () => {
      clearTimeout(timer);
      const answer = data.trim();
      if (answer.startsWith('ok')) resolve(answer);
      else reject(new CheckError(`run.py control '${cmd}' answered '${answer}'`));
    });
  });
}

function restartBroker() {
  return ctl('restart broker');
}

// ---- ali-ons produce/consume building blocks -------------------------------------------------

const PROBE_PREFIX = '__probe__';

function uniq(kind) {
  return `${kind}-${process.pid}`;
}

/** Records what an ali-ons consumer handler saw; decide(rec) may return 'retry' or 'throw'. */
class Collector {
  constructor(name = 'consumer', { decide = null } = {}) {
    this.name = name;
    this.decide = decide;
    this.records = [];
    this.waiters = new Set();
  }

  handler() {
    return async msg => {
      const body = msg.body ? Buffer.from(msg.body) : Buffer.alloc(0);
      const rec = {
        topic: msg.topic, body, text: body.toString('utf8'), tags: msg.tags || '', keys: msg.keys || '',
        props: Object.assign({}, msg.properties), id: msg.msgId, queueId: msg.queueId,
        queueOffset: Number(msg.queueOffset), reconsumeTimes: msg.reconsumeTimes,
        bornTs: Number(msg.bornTimestamp), storeTs: Number(msg.storeTimestamp), recvMs: Date.now(),
        probe: body.toString('utf8').startsWith(PROBE_PREFIX),
      };
      let answer;
      if (!rec.probe && this.decide) answer = this.decide(rec);
      rec.answer = answer === 'retry' || answer === 'throw' ? answer : 'ok';
      this.records.push(rec);
      for (const w of this.waiters) w();
      if (answer === 'retry') return aliOns().Consumer.ACTION_RETRY;
      if (answer === 'throw') throw new Error(`scenario: consume failure for ${rec.id}`);
      return undefined;
    };
  }

  real() { return this.records.filter(r => !r.probe); }
  probes() { return this.records.filter(r => r.probe); }

  wait(pred, timeoutMs) {
    return new Promise(resolve => {
      const done = () => {
        if (pred(this.records)) finish(true);
      };
      const timer = setTimeout(() => finish(false), timeoutMs);
      const self = this;
      function finish(v) {
        clearTimeout(timer);
        self.waiters.delete(done);
        resolve(v);
      }
      this.waiters.add(done);
      done();
    });
  }

  async waitCount(n, timeoutMs, match = () => true) {
    await this.wait(recs => recs.filter(r => !r.probe && match(r)).length >= n, timeoutMs);
    return this.real().filter(match);
  }

  async quietFor(ms, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    let lastN = -1;
    let lastT = Date.now();
    while (Date.now() < deadline) {
      if (this.records.length !== lastN) {
        lastN = this.records.length;
        lastT = Date.now();
      } else if (Date.now() - lastT >= ms) {
        return;
      }
      await sleep(200);
    }
  }
}

function aliOns() {
  return require('ali-ons');
}

/** A started ali-ons push consumer feeding `collector`; closed by the scenario's cleanups. */
async function startConsumer(ctx, { group, topic, collector, expression = '*', isBroadcast = false,
  instanceName, maxReconsumeTimes, extra = {} }) {
  const { Consumer } = aliOns();
  const opts = Object.assign({
    nameSrv: env('NAMESRV_ADDR'), httpclient: {}, consumerGroup: group, isBroadcast,
    rebalanceInterval: 2000, persistConsumerOffsetInterval: 1000,
  }, extra);
  if (instanceName) opts.instanceName = instanceName;
  if (maxReconsumeTimes !== undefined) opts.maxReconsumeTimes = maxReconsumeTimes;
  const c = new Consumer(opts);
  c.on('error', err => console.error(`consumer ${collector.name} error:`, err && err.message));
  c.subscribe(topic, expression, collector.handler());
  await c.ready();
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await c.close();
  };
  if (ctx) ctx.onCleanup(() => { close().catch(() => {}); });
  c.closeOnce = close;
  return c;
}

/**
 * A ready ali-ons producer. sendMsgTimeout defaults to 10 s here (ali-ons: 3 s) so a scenario
 * tests its own behaviour, not the broker's first-append latency, which
 * fresh_broker_first_send_alions checks with the client's defaults.
 */
async function startProducer(ctx, { group, extra = {} }) {
  const { Producer } = aliOns();
  const p = new Producer(Object.assign({ nameSrv: env('NAMESRV_ADDR'), httpclient: {}, producerGroup: group,
    sendMsgTimeout: 10000 }, extra));
  p.on('error', err => console.error('producer error:', err && err.message));
  await p.ready();
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await p.close();
  };
  if (ctx) ctx.onCleanup(() => { close().catch(() => {}); });
  p.closeOnce = close;
  return p;
}

/** Send probes round-robin until `collector` saw one from `queues` queues. */
async function prime(producer, topic, collector, { queues = 4, tags = 'Probe', props = {}, timeoutMs = 40000 } = {}) {
  const { Message } = aliOns();
  const deadline = Date.now() + timeoutMs;
  let sent = 0;
  while (Date.now() < deadline) {
    const seen = new Set(collector.probes().map(r => r.queueId));
    if (seen.size >= queues) return sent;
    for (let i = 0; i < queues; i++) {
      const m = new Message(topic, tags, `${PROBE_PREFIX}${sent}`);
      Object.assign(m.properties, props);
      await producer.send(m);
      sent++;
    }
    await collector.wait(recs => new Set(recs.filter(r => r.probe).map(r => r.queueId)).size > seen.size, 2000);
  }
  const seen = [ ...new Set(collector.probes().map(r => r.queueId)) ].sort();
  throw new CheckError(`consumer ${collector.name} never became ready: after ${sent} probes to ${topic} it received ` +
    `probes from queues [${seen}] only (want ${queues}) within ${timeoutMs} ms`);
}

module.exports = {
  sleep, check, env, startFakeBroker, scenario, CheckError, SkipError, rawmq, ensureTopic, cppTool, ctl,
  restartBroker, Collector, startConsumer, startProducer, prime, uniq, PROBE_PREFIX,
};
