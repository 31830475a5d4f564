#!/usr/bin/python3
"""bench/failover.py: how long a waiting candidate takes to become leader
when the leader dies (failover) or stops renewing (expiry).

PERFORMANCE.md T5 and T6, issue 7.  Methods, each measured over N trials in
the same cluster and the same run:

  ext_client_kill        extension, session-bound holder (a separate client
                         process), candidate blocked in wait_for_leadership;
                         the holder's client process is SIGKILLed
  ext_backend_terminate  same, the holder's backend is pg_terminate_backend()ed
  advisory_wait_*        the physical limit: a session blocked in
                         pg_advisory_lock(k) while the holder's session holds
                         it; same two ways of ending the holder
  advisory_poll_100ms    pg_try_advisory_lock(k) every 100 ms; client killed
  shedlock_poll_100ms    the shedlock table protocol, ttl 1 s, holder renewing
                         and candidate polling every 100 ms; client killed
  ext_expiry             a named holder stops renewing (ttl 500 ms); time from
                         its expires_at to the waiting candidate's true
  shedlock_expiry        the same for shedlock polled every 100 ms (from
                         lock_until to the candidate's win)

Clock: the candidate's win is clock_timestamp() evaluated in the statement
that won, on the server.  The kill is stamped on the same machine's clock:
time.time() just before SIGKILL (CLOCK_REALTIME, which is what the server
reads), or clock_timestamp() in the statement that calls
pg_terminate_backend(), or the lease's expires_at.  All differences are
therefore on one clock with microsecond resolution.

Usage: failover.py [--trials N] [--json out.json] [--markdown out.md]
(libpq environment variables select the cluster, which must have
leader_election preloaded and bench/protocols.sql installed.)
"""

import argparse
import datetime
import json
import os
import platform
import random
import select
import signal
import subprocess
import sys
import threading
import time

import psycopg2

ADVISORY_BASE = 424200000  # advisory keys used here: base + trial


def connect():
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    conn.autocommit = True
    return conn


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


def ts(dt):
    """A timestamptz from psycopg2 as POSIX seconds."""
    return dt.timestamp()


# ---------------------------------------------------------------- holder process

def holder_main(kind, name, key):
    """The leader, as its own client process: take the lease, say "ready
    <backend pid>", then hold it (session-bound) or renew it every 100 ms
    until killed."""
    conn = connect()
    pid = one(conn, "SELECT pg_backend_pid()")[0]
    if kind == "ext":
        ok = one(conn, "SELECT try_acquire_leader(%s, interval '60 s')", (name,))[0]
    elif kind == "advisory":
        ok = one(conn, "SELECT pg_try_advisory_lock(%s)", (key,))[0]
    elif kind == "shedlock":
        ok = one(conn, "SELECT shedlock.le_try(%s, 'A', interval '1 s')", (name,))[0]
    else:
        raise SystemExit(f"unknown holder kind {kind}")
    if not ok:
        raise SystemExit(f"holder could not take {name}")
    print(f"ready {pid}", flush=True)
    if kind == "shedlock":
        while True:
            time.sleep(0.1)
            one(conn, "SELECT shedlock.le_try(%s, 'A', interval '1 s')", (name,))
    else:
        sys.stdin.read()  # hold the session until killed (or stdin closes)


class Holder:
    live = []  # every holder started and not yet stopped, for cleanup after a failed trial

    def __init__(self, kind, name, key=0):
        Holder.live.append(self)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "holder", kind, name, str(key)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        r, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if r else ""
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"holder {kind} {name} did not start")
        self.backend_pid = int(line.split()[1])

    def kill(self):
        """SIGKILL the client process; returns the kill time (POSIX s)."""
        t = time.time()
        os.kill(self.proc.pid, signal.SIGKILL)
        return t

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if self in Holder.live:
            Holder.live.remove(self)


# ---------------------------------------------------------------- candidates

class Candidate(threading.Thread):
    """Runs one blocking statement that returns (won, clock_timestamp())."""

    def __init__(self, conn, sql, args=()):
        super().__init__(daemon=True)
        self.conn, self.sql, self.args = conn, sql, args
        self.result, self.error = None, None

    def run(self):
        try:
            self.result = one(self.conn, self.sql, self.args)
        except Exception as e:  # reported by the trial
            self.error = e


class Poller(threading.Thread):
    """Calls a try statement every period seconds until it returns true."""

    def __init__(self, conn, sql, args, period=0.1, limit=30):
        super().__init__(daemon=True)
        self.conn, self.sql, self.args, self.period, self.limit = conn, sql, args, period, limit
        self.result, self.error, self.polls = None, None, 0

    def run(self):
        deadline = time.time() + self.limit
        try:
            while time.time() < deadline:
                won, at = one(self.conn, self.sql, self.args)
                self.polls += 1
                if won:
                    self.result = (won, at)
                    return
                time.sleep(self.period)
        except Exception as e:
            self.error = e


def wait_until(cond, limit=30, what="condition", thread=None):
    deadline = time.time() + limit
    while not cond():
        if thread is not None and not thread.is_alive():
            raise RuntimeError(f"gave up waiting for {what}: {thread.error}")
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


# ---------------------------------------------------------------- methods

class Failover:
    def __init__(self, trials):
        self.trials = trials
        self.ctl = connect()    # control: terminate, inspect
        self.cand = connect()   # the candidate's session
        self.run_id = f"{os.getpid()}_{int(time.time())}"

    def reset(self):
        """After a failed trial: end its holders and start a fresh candidate session."""
        for h in list(Holder.live):
            h.stop()
        try:
            self.cand.cancel()
            self.cand.close()
        except psycopg2.Error:
            pass
        self.cand = connect()

    def name(self, method, i):
        return f"fo_{self.run_id}_{method}_{i}"

    def blocked_pid(self, pid):
        return one(self.ctl, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,))[0]

    def end_holder(self, holder, how):
        if how == "client_kill":
            return holder.kill()
        t, ok = one(self.ctl, "SELECT clock_timestamp(), pg_terminate_backend(%s)", (holder.backend_pid,))
        if not ok:
            raise RuntimeError("pg_terminate_backend failed")
        return ts(t)

    def finish(self, thread, holder):
        thread.join(timeout=30)
        holder.stop()
        if thread.is_alive() or thread.error or not thread.result or not thread.result[0]:
            raise RuntimeError(f"candidate did not win: {thread.error}")
        return ts(thread.result[1])

    def ext_failover(self, i, how):
        name = self.name("ext_" + how, i)
        holder = Holder("ext", name)
        cand_pid = one(self.cand, "SELECT pg_backend_pid()")[0]
        c = Candidate(self.cand, "SELECT wait_for_leadership(%s, interval '60 s', interval '30 s'),"
                                 " clock_timestamp()", (name,))
        c.start()
        wait_until(lambda: (one(self.ctl, "SELECT leader_election.waiting_candidates(%s)", (name,))[0] or 0) >= 1
                   and one(self.ctl, "SELECT state = 'active' FROM pg_stat_activity WHERE pid = %s", (cand_pid,))[0],
                   what="the candidate to wait", thread=c)
        time.sleep(random.uniform(0, 0.02))
        t_kill = self.end_holder(holder, how)
        t_win = self.finish(c, holder)
        one(self.cand, "SELECT release_leader(%s)", (name,))
        return t_win - t_kill

    def advisory_wait(self, i, how):
        key = ADVISORY_BASE + (2000 if how == "client_kill" else 4000) + i
        holder = Holder("advisory", "-", key)
        cand_pid = one(self.cand, "SELECT pg_backend_pid()")[0]
        c = Candidate(self.cand, "WITH l AS MATERIALIZED (SELECT pg_advisory_lock(%s))"
                                 " SELECT true, clock_timestamp() FROM l", (key,))
        c.start()
        wait_until(lambda: self.blocked_pid(cand_pid), what="the candidate to block", thread=c)
        time.sleep(random.uniform(0, 0.02))
        t_kill = self.end_holder(holder, how)
        t_win = self.finish(c, holder)
        one(self.cand, "SELECT pg_advisory_unlock_all()")
        return t_win - t_kill

    def advisory_poll(self, i):
        key = ADVISORY_BASE + 1000 + i
        holder = Holder("advisory", "-", key)
        p = Poller(self.cand, "SELECT pg_try_advisory_lock(%s), clock_timestamp()", (key,))
        p.start()
        wait_until(lambda: p.polls >= 1, what="the first poll")
        time.sleep(random.uniform(0, 0.1))  # an arbitrary phase of the poll period
        t_kill = holder.kill()
        t_win = self.finish(p, holder)
        one(self.cand, "SELECT pg_advisory_unlock_all()")
        return t_win - t_kill

    def shedlock_poll(self, i):
        name = self.name("shedlock", i)
        holder = Holder("shedlock", name)
        p = Poller(self.cand, "SELECT shedlock.le_try(%s, 'B', interval '1 s'), clock_timestamp()", (name,))
        p.start()
        wait_until(lambda: p.polls >= 1, what="the first poll")
        time.sleep(random.uniform(0, 0.1))
        t_kill = holder.kill()
        t_win = self.finish(p, holder)
        return t_win - t_kill

    def ext_expiry(self, i):
        name = self.name("ext_expiry", i)
        cand_pid = one(self.cand, "SELECT pg_backend_pid()")[0]
        one(self.ctl, "SELECT try_acquire_leader(%s, interval '500 ms', 'A')", (name,))
        expires = ts(one(self.ctl, "SELECT expires_at FROM current_leader(%s)", (name,))[0])
        c = Candidate(self.cand, "SELECT wait_for_leadership(%s, interval '1 s', interval '30 s', 'B'),"
                                 " clock_timestamp()", (name,))
        c.start()
        wait_until(lambda: (one(self.ctl, "SELECT leader_election.waiting_candidates(%s)", (name,))[0] or 0) >= 1
                   and one(self.ctl, "SELECT state = 'active' FROM pg_stat_activity WHERE pid = %s", (cand_pid,))[0],
                   what="the candidate to wait", thread=c)
        if time.time() >= expires:
            raise RuntimeError("the candidate started waiting after the lease expired (machine too loaded)")
        c.join(timeout=30)
        if c.is_alive() or c.error or not c.result or not c.result[0]:
            raise RuntimeError(f"candidate did not win: {c.error}")
        return ts(c.result[1]) - expires

    def shedlock_expiry(self, i):
        name = self.name("shedlock_expiry", i)
        one(self.ctl, "SELECT shedlock.le_try(%s, 'A', interval '500 ms')", (name,))
        expires = ts(one(self.ctl, "SELECT lock_until FROM shedlock.leases WHERE name = %s", (name,))[0])
        time.sleep(random.uniform(0, 0.1))
        p = Poller(self.cand, "SELECT shedlock.le_try(%s, 'B', interval '1 s'), clock_timestamp()", (name,))
        p.start()
        p.join(timeout=30)
        if p.is_alive() or p.error or not p.result:
            raise RuntimeError(f"candidate did not win: {p.error}")
        return ts(p.result[1]) - expires

    def run(self):
        methods = [
            ("ext_client_kill", "extension: holder's client process killed, candidate in wait_for_leadership",
             lambda i: self.ext_failover(i, "client_kill")),
            ("ext_backend_terminate", "extension: holder's backend terminated, candidate in wait_for_leadership",
             lambda i: self.ext_failover(i, "backend_terminate")),
            ("advisory_wait_client_kill", "limit: pg_advisory_lock waiter, holder's client process killed",
             lambda i: self.advisory_wait(i, "client_kill")),
            ("advisory_wait_backend_terminate", "limit: pg_advisory_lock waiter, holder's backend terminated",
             lambda i: self.advisory_wait(i, "backend_terminate")),
            ("advisory_poll_100ms", "pg_try_advisory_lock poller, 100 ms period, holder's client killed",
             self.advisory_poll),
            ("shedlock_poll_100ms", "shedlock table, ttl 1 s, renew and poll every 100 ms, holder's client killed",
             self.shedlock_poll),
            ("ext_expiry", "extension: named holder stops renewing (ttl 500 ms); from expires_at to the"
                           " waiting candidate's true", self.ext_expiry),
            ("shedlock_expiry", "shedlock: holder stops renewing (ttl 500 ms); from lock_until to the"
                                " 100 ms poller's win", self.shedlock_expiry),
        ]
        out = {}
        for key, what, fn in methods:
            samples, misses = [], 0
            while len(samples) < self.trials and misses < self.trials:
                try:
                    samples.append(fn(len(samples) + misses) * 1000.0)
                except RuntimeError as e:
                    misses += 1
                    print(f"  {key}: trial failed: {e}", file=sys.stderr, flush=True)
                    self.reset()
            out[key] = stats(samples)
            out[key].update(what=what, misses=misses)
            s = out[key]
            if samples:
                print(f"  {key:32} n={s['trials']:3} min {s['min_ms']:8.2f}  median {s['median_ms']:8.2f}"
                      f"  p99 {s['p99_ms']:8.2f}  max {s['max_ms']:8.2f} ms", flush=True)
        return out


def stats(samples):
    if not samples:
        return {"trials": 0, "min_ms": None, "median_ms": None, "p99_ms": None, "max_ms": None}
    s = sorted(samples)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    p99 = s[min(n - 1, max(0, -(-99 * n // 100) - 1))]  # nearest rank
    return {"trials": n, "min_ms": s[0], "median_ms": median, "p99_ms": p99, "max_ms": s[-1], "samples_ms": s}


def markdown(methods, machine):
    L = ["## Failover and expiry (T5, T6)\n",
         f"{machine}. Times in ms on the server's clock: from the kill (or expires_at) to the"
         " clock_timestamp() of the statement in which the candidate won. p99 is the nearest-rank"
         " percentile, which with fewer than 100 trials is the maximum or close to it.\n",
         "| method | what | trials | min | median | p99 | max |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, s in methods.items():
        if not s["trials"]:
            L.append(f"| {key} | {s['what']} | 0 (all {s['misses']} failed) | | | | |")
            continue
        miss = f" ({s['misses']} failed)" if s["misses"] else ""
        L.append(f"| {key} | {s['what']} | {s['trials']}{miss} | {s['min_ms']:.2f} | {s['median_ms']:.2f} |"
                 f" {s['p99_ms']:.2f} | {s['max_ms']:.2f} |")
    return "\n".join(L) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "holder":
        holder_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    conn = connect()
    ver = one(conn, "SELECT current_setting('server_version')")[0]
    pre = one(conn, "SELECT current_setting('shared_preload_libraries')")[0]
    conn.close()
    machine = (f"**Machine:** {platform.node()}, {os.cpu_count()} cores, PostgreSQL {ver},"
               f" {datetime.datetime.now().astimezone().isoformat(timespec='seconds')},"
               f" shared_preload_libraries '{pre}', load average {os.getloadavg()[0]:.1f}")
    methods = Failover(args.trials).run()
    md = markdown(methods, machine)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"methods": methods, "markdown": md}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# leader_election failover benchmark\n\n" + md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
