// needs: none
// timeout: 10
// expect: unsupported: selftest: a known-missing behaviour
'use strict';
/** expect_unsupported_marked — self-test: a failing scenario marked `expect: unsupported` counts as skipped. */
const h = require('../../lib/harness');

h.scenario(async () => {
  h.check(false, 'this behaviour is missing');
});
