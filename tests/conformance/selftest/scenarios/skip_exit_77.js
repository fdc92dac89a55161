// needs: none
// timeout: 10
'use strict';
/** skip_exit_77 — self-test: a scenario that throws SkipError is reported as `skip` with its reason. */
const h = require('../../lib/harness');

h.scenario(async () => {
  throw new h.SkipError('selftest: nothing to test here');
});
