'use strict';
/**
 * harness.js — helpers for Node.js conformance scenarios (stdlib only).
 *
 * Owns: `scenario(fn, {timeoutMs})` — runs an async scenario body, prints `PASS ...` and exits 0,
 * or prints `FAIL: <reason>` and exits 1 (also on a hard timeout); `check(cond, msg)`;
 * `startFakeBroker(opts)` — spawns lib/fake_broker.py (with $CONFORMANCE_PYTHON), which
 * registers a stand-in broker with the name server and reports what clients send to it as
 * JSON lines; `sleep`. Every wait is bounded. The fake broker is our child: it exits when our
 * stdin pipe to it closes (i.e. when this process ends) and is killed by pid in `stop()`.
 */

const { spawn } = require('child_process');
const path = require('path');
const readline = require('readline');

const LIB = __dirname;

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

class CheckError extends Error {}

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
      const reason = err instanceof CheckError ? err.message : (err && err.stack) || String(err);
      console.log(`FAIL: ${reason}`);
      process.exit(1);
    });
}

module.exports = { sleep, check, env, startFakeBroker, scenario, CheckError };
