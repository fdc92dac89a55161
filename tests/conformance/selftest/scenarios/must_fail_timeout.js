// needs: none
// timeout: 3
'use strict';
/** must_fail_timeout — self-test: a client that hangs must be reported as a timeout FAIL. */
setTimeout(() => {}, 60000);
