#!/usr/bin/env python3
"""test/clients/worker.py: a long-running service replica that works only
while it is the leader (Debian's python3-psycopg2).

    python3 worker.py [--name NAME] [--ttl SECONDS] [--label LABEL]

Run one per replica.  Each keeps one connection and uses the SESSION
identity (no holder argument): if this process dies, its connection closes,
the lease is void at once, and another replica's next call takes over
without waiting for the ttl.  Connection settings come from the PG*
environment variables.

The loop, every ttl/3:
  * try_acquire_leader(name, ttl) acquires the lease, or renews it if held;
    it is COMMITTED before we act on the answer;
  * not leader (or no longer): stop working, keep campaigning;
  * leader: do one unit of work, fenced: assert_leader(name, term) in the
    same transaction as the write, so the write commits only if this term
    still holds the lease, and no other replica can be elected until it has
    committed.
  * on becoming leader it publishes where it runs with set_leader_info
    (shown by current_leader(name).info to whoever looks for the leader);
  * an operator can drain it with leader_election.move_leader(name): the
    next renewal answers false like any loss of leadership, and the log
    says the term was moved (history's end_reason).

The unit of work here is a row in a table the deployment creates:
    CREATE TABLE worker_output (id bigserial PRIMARY KEY, term bigint NOT NULL,
        worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
a real service would do its own writes in that transaction.  SIGTERM or SIGINT
releases the lease (a successor takes over at once) and exits.
"""
import argparse
import json
import os
import signal
import socket
import sys
import time

import psycopg2

NOT_LEADER = "LE001"  # SQLSTATE of a failed assert_leader


def log(label, msg):
    print(f"{time.strftime('%H:%M:%S')} {label}: {msg}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="worker")
    ap.add_argument("--ttl", type=float, default=3.0, help="lease ttl, seconds")
    ap.add_argument("--label", default=f"worker-{os.getpid()}")
    args = ap.parse_args()
    ttl = f"{args.ttl} seconds"

    # A fenced transaction holds off every takeover until it ends, so one
    # that hangs (a stuck client) must not hang failover with it:
    # idle_in_transaction_session_timeout ends such a session, and with it
    # its session-bound lease.
    conn = psycopg2.connect(
        application_name=args.label,
        options=f"-c idle_in_transaction_session_timeout={int(args.ttl * 1000)}",
    )
    cur = conn.cursor()

    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    term = None  # our term while we believe we lead, else None
    while not stopping:
        # Campaign (or renew), and commit before trusting the answer.
        with conn:
            cur.execute("SELECT try_acquire_leader(%s, %s)", (args.name, ttl))
            leader = cur.fetchone()[0]
            if leader:
                cur.execute("SELECT leader_term(%s)", (args.name,))
                new_term = cur.fetchone()[0]
        if leader and term != new_term:
            log(args.label, f"became leader of {args.name!r}, term {new_term}")
            term = new_term
            with conn:  # what followers see in current_leader(name).info
                cur.execute("SELECT set_leader_info(%s, %s)",
                            (args.name, json.dumps({"label": args.label,
                                                    "pid": os.getpid(),
                                                    "host": socket.gethostname()})))
        elif not leader and term is not None:
            with conn:
                cur.execute("SELECT end_reason FROM leader_election.history "
                            "WHERE name = %s AND term = %s", (args.name, term))
                row = cur.fetchone()
            how = " (moved by an operator)" if row and row[0] == "moved" else ""
            log(args.label, f"lost leadership (term {term}){how}; stopping work")
            term = None

        if term is not None:
            try:
                with conn:  # the fence and the write commit together, or not at all
                    cur.execute("SELECT assert_leader(%s, %s)", (args.name, term))
                    cur.execute("INSERT INTO worker_output (term, worker) VALUES (%s, %s)",
                                (term, args.label))
            except psycopg2.Error as e:
                if e.pgcode != NOT_LEADER:
                    raise
                log(args.label, f"fenced write refused ({e.diag.message_primary}); stopping work")
                term = None

        time.sleep(args.ttl / 3)

    with conn:
        cur.execute("SELECT release_leader(%s)", (args.name,))
        if cur.fetchone()[0]:
            log(args.label, f"released {args.name!r}")
    conn.close()
    log(args.label, "stopped")


if __name__ == "__main__":
    sys.exit(main())
