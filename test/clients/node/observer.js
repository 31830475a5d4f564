// test/clients/node/observer.js: watch who leads, without polling.
//
//   npm ci && node observer.js [election-name]
//
// leader_election sends a NOTIFY on the channel "leader_election" whenever
// a lease changes hands, with a JSON payload
//   {"name": ..., "event": ..., "holder": ..., "term": N, "reason": ...,
//    "info": ...}
// where event is "elected" ("reason" says how the previous term ended:
// "none", "released", "expired", "session_ended", "moved"), "released",
// "handed_over" (with "successor"), "moved" (an operator drained the
// leader; "successor" or null) or "info" (the leader published "info",
// e.g. its URL).  This observer LISTENs and prints one line per event,
// optionally for one name only; unknown events and keys are printed as
// they come, so a newer server does not break it.
//
// Connection settings come from the usual PG* environment variables
// (PGHOST, PGPORT, PGUSER, PGDATABASE, ...), which node-postgres reads.
// The observer needs no privilege on the extension: LISTEN is open to all.
// Notifications are sent at commit, so an observer never sees a leader that
// was rolled back.  They are not a log: a change made while the observer is
// disconnected is not replayed (read leader_election.history for that).
'use strict';

const { Client } = require('pg');

const only = process.argv[2]; // election name to follow; all names if absent

function describe(change) {
  const who = `${change.name} term ${change.term}: ${change.holder}`;
  switch (change.event) {
    case 'elected':
      return `${who} elected (previous term ended: ${change.reason})`;
    case 'info':
      return `${who} published ${JSON.stringify(change.info)}`;
    case 'handed_over':
      return `${who} handed over to ${change.successor}`;
    case 'moved':
      return `${who} moved by an operator` +
        (change.successor ? ` to ${change.successor}` : '');
    default:
      return `${who} ${change.event} (${change.reason})`;
  }
}

async function main() {
  const client = new Client({ application_name: 'leader-observer' });
  await client.connect();

  client.on('notification', (msg) => {
    let change;
    try {
      change = JSON.parse(msg.payload);
    } catch (err) {
      console.error(`ignoring a payload that is not JSON: ${msg.payload}`);
      return;
    }
    if (only === undefined || change.name === only) {
      console.log(`${new Date().toISOString()} ${describe(change)}`);
    }
  });
  // A lost connection means missed notifications: fail loudly, let the
  // supervisor restart us (and re-read the current state on start).
  client.on('error', (err) => {
    console.error(`connection lost: ${err.message}`);
    process.exit(1);
  });

  await client.query('LISTEN leader_election');
  console.log(`listening on channel leader_election${only ? ` for "${only}"` : ''}`);

  const stop = async () => {
    await client.end();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
