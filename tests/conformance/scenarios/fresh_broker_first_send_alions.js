// needs: namesrv broker
// timeout: 60
// broker-conf: mappedFileSizeCommitLog=1073741824
'use strict';
/**
 * fresh_broker_first_send_alions — the first send to a freshly started broker succeeds within ali-ons' default 3 s timeout.
 *
 * The broker runs with the default 1 GiB CommitLog segment (run.py otherwise uses 64 MiB ones to
 * save disk). Right after it starts on an empty store, a topic is created and an ali-ons producer
 * with default options (sendMsgTimeout 3000 ms, retryTimesWhenSendFailed 3 within the same
 * 3 s budget) sends 5 messages one after the other. Passes when every send is SEND_OK and the
 * first one takes under 1.5 s (a Java broker creates its first 1 GiB CommitLog file without
 * pre-touching it, warmMapedFileEnable=false, in well under that). Fails when the first append
 * stalls long enough that a stock client gives up ("Send [4] times, still failed").
 */

const { Message } = require('ali-ons');
const h = require('../lib/harness');

h.scenario(async ctx => {
  const topic = h.uniq('FirstSendNode');
  h.ensureTopic(topic, 4);
  const producer = await h.startProducer(ctx, { group: h.uniq('PG-firstsend-node'), extra: { sendMsgTimeout: 3000 } });
  const took = [];
  for (let i = 0; i < 5; i++) {
    const t = Date.now();
    let r;
    try {
      r = await producer.send(new Message(topic, 'TagF', `first send ${i}`));
    } catch (e) {
      throw new h.CheckError(`send ${i} failed after ${Date.now() - t} ms with the default 3 s timeout: ${e.message}`);
    }
    took.push(Date.now() - t);
    h.check(r.sendStatus === 'SEND_OK', `send ${i}: ${r.sendStatus}`);
  }
  h.check(took[0] < 1500, `the first send to the fresh broker took ${took[0]} ms (later ones: ${took.slice(1)} ms)`);
  return `first sends took ${took} ms`;
}, { timeoutMs: 50000 });
