# needs: none
# timeout: 30
"""sql92_filter_python — records that the C++-core push consumer cannot subscribe with SQL92 (always a skip, or FAIL if it can now).

The Python wrapper's PushConsumer.subscribe(topic, callback, expression) maps to the C API
`Subscribe(consumer, topic, expression)`, which the C++ 2.1 core treats as a TAG expression
(its heartbeat has no expressionType, see fixtures python-cpp/032-34): a SQL92 string would be
split on `||` into tags. So there is no SQL92 behaviour to test with this client; the SQL92
filter is covered by sql92_filter_alions. This scenario exits SKIP with that reason, after
checking the claim: it FAILs if the loaded librocketmq.so exports any SQL/expression-type
subscription function (then a real SQL92 scenario should be written for it).
"""

import pyclient as pc
from scenario import run, skip

CANDIDATES = ("SubscribeWithType", "SubscribeSQL", "SubscribeSql92", "SetPushConsumerExpressionType",
              "SubscribeByExpression")


def body(cleanups):
    found = [n for n in CANDIDATES if hasattr(pc._dll, n)]
    if found:
        raise AssertionError(f"librocketmq.so exports {found}: the C++ core may support SQL92 now; "
                             f"replace this scenario by a real SQL92 consumer test")
    skip("the C++ 2.1 core's push consumer has no SQL92 subscription (C API Subscribe takes a "
         "tag expression only); SQL92 is covered by sql92_filter_alions")


if __name__ == "__main__":
    run(body, timeout=20)
