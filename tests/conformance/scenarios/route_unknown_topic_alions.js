// needs: namesrv
// timeout: 60
'use strict';
/**
 * route_unknown_topic_alions — ali-ons gets TOPIC_NOT_EXIST from ringmq's namesrv for an unknown topic.
 *
 * ali-ons 3.12.0, unlike the Java and C++ clients, does not fall back to TBW102's route: its
 * route look-up throws on any non-success answer. A stand-in broker registers TBW102 only; ali-ons
 * sends to a topic nobody registered. Passes when the send is rejected with an MQClientException
 * of code 17 (TOPIC_NOT_EXIST) whose message is the name server's remark, and the broker saw no
 * send. Fails if the name server answers anything else (e.g. success with an invented route, or
 * SYSTEM_ERROR), or if the message reaches a broker.
 */

const { Producer, Message } = require('ali-ons');
const { check, env, scenario, startFakeBroker, sleep } = require('../lib/harness');

scenario(async ctx => {
  const nameSrv = env('NAMESRV_ADDR');
  const topic = `UnknownTopicNode-${process.pid}`;
  const broker = await startFakeBroker({ namesrv: nameSrv, topics: [] });
  ctx.onCleanup(() => broker.stop());

  const producer = new Producer({ nameSrv, httpclient: {}, producerGroup: `PG-unknown-node-${process.pid}` });
  producer.on('error', err => console.error('producer error:', err.message));
  await producer.ready();
  let err = null;
  try {
    const r = await producer.send(new Message(topic, 'TagU', 'nobody routes me'));
    console.log('unexpected send result:', JSON.stringify(r));
  } catch (e) {
    err = e;
  }
  check(err, 'send to an unregistered topic succeeded; the name server should answer TOPIC_NOT_EXIST');
  check(err.name === 'MQClientException' && err.code === 17,
    `send failed with ${err.name} code ${err.code} (${err.message}); want MQClientException code 17`);
  check(err.message.includes(topic), `error message ${JSON.stringify(err.message)} does not name the topic`);
  await sleep(300);
  check(broker.sends().length === 0, `the broker received ${broker.sends().length} sends`);
  await producer.close();
  return `TOPIC_NOT_EXIST surfaced as: ${err.message}`;
});
