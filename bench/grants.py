#!/usr/bin/python3
"""bench/grants.py: grants and storms (PERFORMANCE.md T8-T11), and how fast
observers hear of them.

Run by bench/grants.sh against a throwaway cluster it started (PGHOST,
PGPORT, PGUSER, PGDATABASE in the environment).  Same conventions as
bench.py (whose pgbench cells it reuses): every target is a ratio to a
reference run in the same cluster in the same run, throughput cells run in
rotated rounds and report the median round.

Scenarios:

  new_grants_32   T8: 32 clients, every transaction a brand-new name
                  (try_acquire_leader), against a one-row INSERT ... ON
                  CONFLICT DO NOTHING into a ShedLock-style table, and the
                  same INSERT plus pg_notify() in the transaction.
  first_use_32_10k, _100k
                  T9: many_names_32 where the names are first used during
                  the run (fresh names for every protocol and round): each
                  client tries a uniformly random name of its own N/32.
  storm           T10: one session holds 250 session-bound leases and is
                  terminated while 250 candidates wait in
                  wait_for_leadership, one per name; time from the
                  terminate to the last winner's return (its answer's
                  arrival at its client, taken when execute() returns, for
                  both kinds; beside it, by the server's clock, when the
                  last winner's commit had completed, and the server's CPU
                  from /proc).  Reference: the
                  same with pg_advisory_lock waiters that each commit one
                  row.  An observer (a process of its own) LISTENs on
                  leader_election during ext storms of their own
                  (ext_observed, not part of T10) and must get every
                  "elected" (completeness and per-name term order are
                  checked).  Its delay is counted twice: from the moment
                  the grant's commit had completed (durable and visible:
                  the winner's backend's state_change on going idle after
                  it), and from the grant's commit timestamp
                  (pg_xact_commit_timestamp of its history row, which
                  PostgreSQL takes before the commit's WAL flush;
                  grants.sh turns track_commit_timestamp on).  Reference:
                  the same storms with every grant sending its own NOTIFY
                  in its transaction (ext_observed_in_tx,
                  notify_delivery = in_transaction, 1.0's way).
  notify_rtt      T11: an unrelated application's NOTIFY/LISTEN round trip
                  (a process of its own), idle, during the storms and during
                  new_grants_32.
"""

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import select
import sys
import threading
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (pgbench cells, connection helpers)

STORM_NAMES = 250


def pct(xs, p):
    """Nearest-rank percentile of xs (p in 0..100)."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def median(xs):
    return pct(xs, 50)


class Pinger:
    """An unrelated application: NOTIFY app_ping, payload a sequence number,
    timed until its LISTENing connection receives it."""

    def __init__(self, connect):
        self.listener = connect()
        self.sender = connect()
        with self.listener.cursor() as cur:
            cur.execute("LISTEN app_ping")
        self.seq = 0

    def ping(self, timeout=5.0):
        self.seq += 1
        t0 = time.perf_counter()
        with self.sender.cursor() as cur:
            cur.execute("NOTIFY app_ping, %s", (str(self.seq),))
        while True:
            self.listener.poll()
            while self.listener.notifies:
                n = self.listener.notifies.pop(0)
                if n.payload == str(self.seq):
                    return (time.perf_counter() - t0) * 1000.0
            left = timeout - (time.perf_counter() - t0)
            if left <= 0:
                return None
            select.select([self.listener], [], [], left)

    def close(self):
        self.listener.close()
        self.sender.close()


def _connect():
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    conn.autocommit = True
    return conn


def parent_pid_of(pid):
    """The parent of process pid, from /proc (Linux); None if it cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def cpu_us_of_children(parent):
    """CPU time (µs, user and system) each child process of `parent` has used
    so far, from /proc (Linux); {} where /proc cannot tell."""
    out = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        if parent_pid_of(pid) != parent:
            continue
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                out[int(pid)] = int(f.read().split()[0]) // 1000
        except (OSError, ValueError, IndexError):
            pass
    return out


def observer_process(names, ready, out):
    """A LISTENer in its own process (no GIL shared with the storm's 250
    client threads): records when each notification arrives, until every
    name in `names` was heard as elected (or 30 s)."""
    conn = _connect()
    with conn.cursor() as cur:
        cur.execute("LISTEN leader_election")
    ready.set()
    heard, left = [], set(names)
    deadline = time.time() + 30
    while left and time.time() < deadline:
        select.select([conn], [], [], 0.05)
        conn.poll()
        now = time.time()
        while conn.notifies:
            payload = conn.notifies.pop(0).payload
            heard.append((payload, now))
            p = json.loads(payload)
            if p.get("event") == "elected":
                left.discard(p.get("name"))
    out.put(heard)
    conn.close()


def pinger_process(stop, ready, out):
    """The unrelated application, in its own process: NOTIFY/LISTEN round
    trips every 2 ms until stop is set."""
    pinger = Pinger(_connect)
    ready.set()
    pings = []
    while not stop.is_set():
        ms = pinger.ping()
        if ms is not None:
            pings.append(ms)
        time.sleep(0.002)
    pinger.close()
    out.put(pings)


class Grants(bench.Bench):
    def __init__(self, args):
        super().__init__(args)
        self.own_delays = {}
        self.storm_trials = args.storm_trials or (3 if self.quick else 7)
        self.q("CREATE SCHEMA IF NOT EXISTS grants_ref")
        self.q("CREATE TABLE IF NOT EXISTS grants_ref.storm (k int, at timestamptz)")
        self.round_id = 0

    # ---- T8 ----

    def new_grants(self, clients=32):
        key = f"new_grants_{clients}"
        self.scenarios.append((key, f"{clients} clients, every transaction a brand-new name (ttl 1 minute)",
                               ["insert"]))
        name = "'g' || :client_id || '_' || :r"
        scripts = {
            "ext": f"\\set r random(1, 1000000000000)\nSELECT try_acquire_leader({name}, interval '1 minute', 'h' || :client_id);\n",
            "insert": (f"\\set r random(1, 1000000000000)\nINSERT INTO shedlock.leases VALUES ({name}, now() + interval '1 minute',"
                       f" now(), 'h' || :client_id) ON CONFLICT (name) DO NOTHING;\n"),
            "insert_notify": ("\\set r random(1, 1000000000000)\nBEGIN;\n"
                              f"INSERT INTO shedlock.leases VALUES ({name}, now() + interval '1 minute',"
                              f" now(), 'h' || :client_id) ON CONFLICT (name) DO NOTHING;\n"
                              f"SELECT pg_notify('grants_ref', {name});\nCOMMIT;\n"),
            "shedlock": f"\\set r random(1, 1000000000000)\nSELECT shedlock.le_try({name}, 'h' || :client_id, interval '1 minute');\n",
        }
        order = list(scripts)
        for r in range(self.rounds):
            k = r % len(order)
            for p in order[k:] + order[:k]:
                self.cell(key, p, scripts[p], clients)

    # ---- T9 ----

    def first_use(self, names, clients=32):
        key = f"first_use_{clients}_{names // 1000}k"
        self.scenarios.append((key, f"{clients} clients; {names} names first used during the run (fresh for every"
                               f" protocol and round); each client tries a uniformly random name of its own"
                               f" ({names // clients} each) with its own holder, ttl 10 s", ["shedlock"]))
        per = names // clients
        order = ["ext", "shedlock", "upsert", "seed_kotlin"]
        for r in range(self.rounds):
            k = r % len(order)
            for p in order[k:] + order[:k]:
                self.round_id += 1
                prefix = f"f{self.round_id}_"
                script = (f"\\set k random(0, {per - 1})\n"
                          f"\\set i :client_id + {clients} * :k\n")
                self.cell(key, p, script + bench.try_sql(p, f"'{prefix}' || :i", "'h' || :client_id", "10 s"),
                          clients)

    # ---- T10, observers, T11 ----

    def storm_once(self, kind, observe=False, in_transaction=False, ping=False):
        """One storm.  Returns (last winner ms after the terminate, first winner ms,
        pings during the storm, observer delays ms or None, the same counted after the
        commit completed or None, names not heard, names out of order, ms to the last
        winner's completed commit by the server's clock or None if not every winner's
        backend was found idle, and the server's CPU: a dict with the ms every server
        process used from the terminate until every winner had its answer, and the
        median µs of one winner's backend, or None where /proc cannot tell).
        The observer and the pinger run in processes of their own."""
        self.round_id += 1
        tag = f"s{self.round_id}_"
        names = [tag + str(i) for i in range(STORM_NAMES)]
        # Every storm starts from a checkpoint, as every throughput cell does:
        # one that the earlier steps' WAL triggers must not land in some
        # storms and not others (after it, each page's first change is
        # logged whole).
        self.q("CHECKPOINT")
        holder = self.connect()
        hpid = self.q("SELECT pg_backend_pid()", conn=holder)[0][0]
        if kind == "ext":
            for n in names:
                # The storm measures takeovers from a live holder: a name it
                # did not get (held by someone else) would let its candidate
                # return before the terminate.
                if not self.q("SELECT try_acquire_leader(%s, interval '1 minute')", (n,), conn=holder)[0][0]:
                    raise RuntimeError(f"storm: the holder did not get {n}")
        else:
            for i in range(STORM_NAMES):
                self.q("SELECT pg_advisory_lock(%s)", (self.round_id * 1000 + i,), conn=holder)
        done = {}
        errors = []
        conns = [self.connect() for _ in range(STORM_NAMES)]
        pids = [self.q("SELECT pg_backend_pid()", conn=c)[0][0] for c in conns]
        if in_transaction:
            for c in conns:
                self.q("SET leader_election.notify_delivery = in_transaction", conn=c)
        if kind != "ext":
            # Warm, as a long-lived waiter would be: an extension candidate's
            # first attempt, before it sleeps, has read its row and planned
            # its takeover (lease.c); without this the reference would
            # parse, plan and open its table for the first time after the
            # terminate.  EXPLAIN plans the INSERT without writing.
            for c in conns:
                self.q("EXPLAIN (COSTS OFF) INSERT INTO grants_ref.storm VALUES (0, clock_timestamp()) RETURNING true",
                       conn=c)

        def candidate(i):
            # A winner has won when its answer has arrived, which is when
            # execute() returns: the time is taken there for both kinds, and
            # both answers are one boolean row, read after it (the harness's
            # own Python work, in one process for all 250 candidates, is
            # neither side's).
            try:
                with conns[i].cursor() as cur:
                    if kind == "ext":
                        cur.execute("SELECT wait_for_leadership(%s, interval '1 minute', interval '60 s', %s)",
                                    (names[i], "c" + str(i)))
                        at = time.time()
                        ok = cur.fetchone()[0]
                    else:
                        cur.execute("SELECT pg_advisory_lock(%s);"
                                    " INSERT INTO grants_ref.storm VALUES (%s, clock_timestamp()) RETURNING true",
                                    (self.round_id * 1000 + i, self.round_id * 1000 + i))
                        at = time.time()
                        ok = cur.fetchone()[0]
                done[i] = (at, ok)
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=candidate, args=(i,)) for i in range(STORM_NAMES)]
        for t in threads:
            t.start()
        # Every candidate confirmed waiting before the kill.
        want = "Extension" if kind == "ext" else "Lock"
        for _ in range(3000):
            n = self.q("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event_type = %s",
                       (pids, want))[0][0]
            if n == STORM_NAMES:
                break
            time.sleep(0.01)
        ctx = multiprocessing.get_context("fork")
        obs = pin = None
        if observe:
            obs_q, obs_ready = ctx.Queue(), ctx.Event()
            obs = ctx.Process(target=observer_process, args=(names, obs_ready, obs_q))
            obs.start()
            obs_ready.wait(30)
            # A long-lived observer: its LISTEN has started the database's
            # notifier, which is running by the time leaders change.
            if not in_transaction:
                for _ in range(3000):
                    if self.q("SELECT count(*) FROM pg_stat_activity"
                              " WHERE backend_type = 'leader_election notifier'")[0][0]:
                        break
                    time.sleep(0.01)
        if ping:
            pin_q, pin_ready, pin_stop = ctx.Queue(), ctx.Event(), ctx.Event()
            pin = ctx.Process(target=pinger_process, args=(pin_stop, pin_ready, pin_q))
            pin.start()
            pin_ready.wait(30)
        # The server's CPU is where a storm on few cores goes: counted per
        # process (the holder's exit not included: it is gone at the end).
        postmaster = parent_pid_of(hpid)
        cpu_before = cpu_us_of_children(postmaster) if postmaster else {}
        t0 = self.q("SELECT extract(epoch FROM clock_timestamp())::float8 FROM pg_terminate_backend(%s)", (hpid,))[0][0]
        for t in threads:
            t.join(90)
        cpu_after = cpu_us_of_children(postmaster) if postmaster else {}
        cpu = None
        used = {p: cpu_after[p] - cpu_before[p] for p in cpu_after if p in cpu_before}
        winners = [used[p] for p in pids if p in used]
        if winners:
            cpu = {"ms": sum(used.values()) / 1000.0, "winner_us": median(winners)}
        pings = []
        if pin:
            pin_stop.set()
            pings = pin_q.get(timeout=60)
            pin.join()
        delays = missing = out_of_order = None
        done_delays = None
        # When each winner's commit had completed: its backend's
        # state_change, which it sets on going idle after the statement's
        # transaction committed (WAL flushed, visible to every session),
        # just before it sends the answer.  The server's clock, as t0's.
        finished = dict((r[0], r[1]) for r in self.q(
            "SELECT pid, extract(epoch FROM state_change)::float8 FROM pg_stat_activity"
            " WHERE pid = ANY(%s) AND state = 'idle'", (pids,)))
        server_last = (max(finished.values()) - t0) * 1000.0 if len(finished) == STORM_NAMES else None
        if obs:
            heard = obs_q.get(timeout=60)
            obs.join()
            granted = dict(((r[0], r[1]), r[2]) for r in self.q(
                "SELECT name, term, extract(epoch FROM coalesce(pg_xact_commit_timestamp(xmin), acquired_at))::float8"
                " FROM leader_election.history WHERE name LIKE %s AND holder LIKE 'c%%'", (tag + "%",)))
            got = {}
            for payload, at in heard:
                p = json.loads(payload)
                if p["event"] == "elected" and p["name"].startswith(tag):
                    got.setdefault(p["name"], []).append((p["term"], at))
            delays, done_delays, missing, out_of_order = [], [], 0, 0
            for (name, term), acquired in granted.items():
                evs = got.get(name, [])
                terms = [t for t, _ in evs]
                if term not in terms:
                    missing += 1
                    continue
                if terms != sorted(terms):
                    out_of_order += 1
                heard_at = dict(evs)[term]
                delays.append((heard_at - acquired) * 1000.0)
                at_idle = finished.get(pids[int(name[len(tag):])])
                if at_idle is not None:
                    done_delays.append((heard_at - at_idle) * 1000.0)
        for c in conns:
            c.close()
        try:
            holder.close()
        except Exception:
            pass
        if errors or len(done) != STORM_NAMES or not all(ok for _, ok in done.values()):
            raise RuntimeError(f"storm {kind}: {len(done)} winners, errors {errors[:3]}")
        last = max(at for at, _ in done.values())
        first = min(at for at, _ in done.values())
        # Each winner's own client: its answer's arrival minus its commit's
        # timestamp (the same reference point as the observers' delay).
        if kind == "ext":
            committed = dict((int(r[0][len(tag):]), r[1]) for r in self.q(
                "SELECT name, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8"
                " FROM leader_election.history WHERE starts_with(name, %s) AND holder LIKE 'c%%'", (tag,)))
        else:
            committed = dict((r[0] - self.round_id * 1000, r[1]) for r in self.q(
                "SELECT k, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8"
                " FROM grants_ref.storm WHERE k / 1000 = %s", (self.round_id,)))
        own = [(done[i][0] - committed[i]) * 1000.0 for i in done if committed.get(i) is not None]
        self.own_delays.setdefault(kind + ("_in_tx" if in_transaction else ""), []).extend(own)
        return ((last - t0) * 1000.0, (first - t0) * 1000.0, pings, delays, done_delays, missing, out_of_order,
                server_last, cpu)

    def storms(self):
        key = "storm_250"
        self.scenarios.append((key, "one session holding 250 session-bound leases is terminated while 250"
                               " candidates wait (one per name); ms from the terminate to the last winner", ["advisory"]))
        pinger = Pinger(self.connect)
        idle = []
        for _ in range(200):
            ms = pinger.ping()
            if ms is not None:
                idle.append(ms)
            time.sleep(0.002)
        # T10 compares ext and advisory storms as the same harness runs them
        # (a pinger each); the observer, which only the extension's storms
        # have anything to tell, listens in storms of their own
        # (ext_observed), so its process and backend load neither side of T10.
        # ext_observed_in_tx is the observers' reference: the same storm with
        # every grant sending its NOTIFY itself, in its own transaction (1.0's
        # way, leader_election.notify_delivery = in_transaction).
        kinds = ["ext", "advisory", "ext_observed", "ext_observed_in_tx"]
        res = {k: [] for k in kinds}
        firsts = {k: [] for k in kinds}
        servers = {k: [] for k in kinds}
        cpus = {k: [] for k in kinds}
        storm_pings = {k: [] for k in kinds}
        ref_delays = []
        ref_done_delays = []
        delays = []
        done_delays = []
        missing = 0
        out_of_order = 0
        for trial in range(self.storm_trials):
            k = trial % len(kinds)
            for kind in kinds[k:] + kinds[:k]:
                last_ms, first_ms, pings, d, dd, miss, ooo, server_ms, cpu = self.storm_once(
                    "advisory" if kind == "advisory" else "ext", observe=kind.startswith("ext_observed"),
                    in_transaction=(kind == "ext_observed_in_tx"), ping=True)
                res[kind].append(last_ms)
                firsts[kind].append(first_ms)
                if server_ms is not None:
                    servers[kind].append(server_ms)
                if cpu is not None:
                    cpus[kind].append(cpu)
                storm_pings[kind] += pings
                if kind == "ext_observed_in_tx":
                    ref_delays += d
                    ref_done_delays += dd
                    missing += miss
                    out_of_order += ooo
                elif d is not None:
                    delays += d
                    done_delays += dd
                    missing += miss
                    out_of_order += ooo
                self.log(f"storm {kind:9} trial {trial}: first winner {first_ms:.1f} ms, last winner {last_ms:.1f} ms"
                         f" (its commit completed at {f1(server_ms)} ms by the server's clock),"
                         f" server CPU {f1(cpu and cpu['ms'])} ms ({f1(cpu and cpu['winner_us'])} µs per winner),"
                         f" {len(pings)} pings (median {median(pings) or 0:.2f} ms)"
                         + (f", observer delay p50 {median(d):.2f} p99 {pct(d, 99):.2f} ms"
                            f" (after the commit completed: p50 {median(dd) or 0:.2f} p99 {pct(dd, 99) or 0:.2f} ms),"
                            f" missing {miss}" if d else ""))
        # Round trips during a grant load.
        load_pings = []
        stop = threading.Event()

        def pinging():
            time.sleep(0.5)
            while not stop.is_set():
                ms = pinger.ping()
                if ms is not None:
                    load_pings.append(ms)
                time.sleep(0.005)
        pt = threading.Thread(target=pinging)
        pt.start()
        self.pgbench("\\set r random(1, 1000000000000)\n"
                     "SELECT try_acquire_leader('p' || :client_id || '_' || :r, interval '1 minute', 'h' || :client_id);\n",
                     32, log=False)
        stop.set()
        pt.join()
        pinger.close()
        self.results[key] = {k: {"median_ms": median(v), "p99_ms": pct(v, 99), "all_ms": v,
                                 "first_median_ms": median(firsts[k]),
                                 "server_median_ms": median(servers[k]), "server_all_ms": servers[k],
                                 "server_cpu_median_ms": median([c["ms"] for c in cpus[k]]),
                                 "winner_cpu_median_us": median([c["winner_us"] for c in cpus[k]])}
                                for k, v in res.items()}
        self.extra["observer"] = {"delays_ms_p50": median(delays), "delays_ms_p99": pct(delays, 99),
                                  "delays_ms_max": max(delays) if delays else None, "n": len(delays),
                                  "after_done_ms_p50": median(done_delays), "after_done_ms_p99": pct(done_delays, 99),
                                  "after_done_ms_max": max(done_delays) if done_delays else None,
                                  "after_done_n": len(done_delays),
                                  "reference_delays_ms_p50": median(ref_delays),
                                  "reference_delays_ms_p99": pct(ref_delays, 99),
                                  "reference_after_done_ms_p50": median(ref_done_delays),
                                  "reference_after_done_ms_p99": pct(ref_done_delays, 99),
                                  "reference_after_done_n": len(ref_done_delays),
                                  "missing": missing, "out_of_order": out_of_order,
                                  "own_client_ms": {k: {"p50": median(v), "p99": pct(v, 99), "n": len(v)}
                                                    for k, v in self.own_delays.items()}}
        self.extra["notify_rtt"] = {
            "idle": {"p50": median(idle), "p99": pct(idle, 99), "n": len(idle)},
            "storm": {"p50": median(storm_pings["ext"]), "p99": pct(storm_pings["ext"], 99), "n": len(storm_pings["ext"])},
            "advisory_storm": {"p50": median(storm_pings["advisory"]), "p99": pct(storm_pings["advisory"], 99),
                               "n": len(storm_pings["advisory"])},
            "grant_load": {"p50": median(load_pings), "p99": pct(load_pings, 99), "n": len(load_pings)},
        }
        self.log(f"observer: {self.extra['observer']}")
        self.log(f"notify_rtt: {self.extra['notify_rtt']}")

    def run(self):
        self.extra["load_before"] = os.getloadavg()
        steps = [("new_grants", self.new_grants),
                 ("first_use_10k", lambda: self.first_use(10_000)),
                 ("first_use_100k", lambda: self.first_use(100_000)),
                 ("storm", self.storms)]
        if self.args.only:
            steps = [s for s in steps if s[0] in self.args.only.split(",")]
        for name, fn in steps:
            print(f"==> {name}", flush=True)
            fn()
        return {"machine": self.machine(), "scenarios": self.scenarios, "results": self.results,
                "extra": self.extra, "label": self.args.label}


def f1(x, unit=""):
    return "—" if x is None else f"{x:.2f}{unit}"


def report(runs):
    """Markdown for one or more runs (e.g. before and after), each a dict from Grants.run()."""
    out = ["# leader_election 1.1: grants and storms (T8–T11)", ""]
    for data in runs:
        m = data["machine"]
        res = data["results"]
        ex = data["extra"]
        out += [f"## {data.get('label') or 'run'}", "",
                f"Machine: {m['host']}, {m['cores']} cores, PostgreSQL {m['pg']}, {m['date']}, "
                f"fsync {m['settings'].get('fsync')}, synchronous_commit {m['settings'].get('synchronous_commit')}, "
                f"{m['mode']} mode ({m['duration']} s per cell, median of {m['rounds']} rounds), "
                f"load {', '.join(f'{x:.2f}' for x in m['load_before'])} before.", ""]

        def r(scen, p, ref):
            a, b = res.get(scen, {}).get(p, {}), res.get(scen, {}).get(ref, {})
            if "tps" in a and "tps" in b and b["tps"]:
                return a["tps"] / b["tps"]
            return None
        t = ["| # | target | measured | met |", "|---|---|---|---|"]
        x = r("new_grants_32", "ext", "insert")
        if x is not None:
            t.append(f"| T8 | new grants, 32 clients ≥ 0.5 × one-row INSERT | {x:.2f} × | {'yes' if x >= 0.5 else 'NO'} |")
        for n in ("10k", "100k"):
            x = r(f"first_use_32_{n}", "ext", "shedlock")
            if x is not None:
                t.append(f"| T9 | many_names_32, {n} names first used in the run ≥ 1.0 × shedlock | {x:.2f} × | {'yes' if x >= 1.0 else 'NO'} |")
        st = res.get("storm_250")
        if st and st["ext"]["median_ms"] and st["advisory"]["median_ms"]:
            x = st["ext"]["median_ms"] / st["advisory"]["median_ms"]
            se, sa = st["ext"].get("server_median_ms"), st["advisory"].get("server_median_ms")
            ne, na = len(st["ext"].get("server_all_ms", [])), len(st["advisory"].get("server_all_ms", []))
            srv = (f"; the last winner's commit completed, by the server's clock: {se / sa:.2f} × "
                   f"({se:.1f} vs {sa:.1f} ms, {ne} and {na} storms)" if se and sa else "")
            ce, ca = st["ext"].get("server_cpu_median_ms"), st["advisory"].get("server_cpu_median_ms")
            we, wa = st["ext"].get("winner_cpu_median_us"), st["advisory"].get("winner_cpu_median_us")
            srv += (f"; the server's CPU per storm {ce / ca:.2f} × ({ce:.1f} vs {ca:.1f} ms; one winner's backend"
                    f" {we:.0f} vs {wa:.0f} µs)" if ce and ca and we and wa else "")
            t.append(f"| T10 | storm of 250: last winner ≤ 1.0 × advisory-lock storm (medians) | {x:.2f} × "
                     f"({st['ext']['median_ms']:.1f} vs {st['advisory']['median_ms']:.1f} ms){srv} | {'yes' if x <= 1.0 else 'NO'} |")
        rtt = ex.get("notify_rtt")
        if rtt and rtt["idle"]["p50"]:
            x = rtt["storm"]["p50"] / rtt["idle"]["p50"] if rtt["storm"]["p50"] else None
            y = rtt["grant_load"]["p50"] / rtt["idle"]["p50"] if rtt["grant_load"]["p50"] else None
            a = rtt.get("advisory_storm", {}).get("p50")
            z = a / rtt["idle"]["p50"] if a else None
            t.append(f"| T11 | an unrelated NOTIFY/LISTEN round trip during storms ≤ 2 × idle (medians) | "
                     f"{f1(x, ' ×')} (storm), {f1(y, ' ×')} (32 clients granting); "
                     f"reference: {f1(z, ' ×')} during the advisory-lock storm | "
                     f"{'yes' if x is not None and x <= 2 else 'NO'} |")
        obs = ex.get("observer")
        if obs:
            done_p99 = obs.get("after_done_ms_p99")
            if done_p99 is None:  # a run from before the completed-commit clock
                t.append(f"| — | observers: every change heard, in term order; p99 delay (commit timestamp → arrival) ≤ 10 ms | "
                         f"missing {obs['missing']}, out of order {obs['out_of_order']}, p50 {f1(obs['delays_ms_p50'])} ms, "
                         f"p99 {f1(obs['delays_ms_p99'])} ms, max {f1(obs['delays_ms_max'])} ms (n={obs['n']}) | "
                         f"{'yes' if obs['missing'] == 0 and obs['out_of_order'] == 0 and (obs['delays_ms_p99'] or 0) <= 10 else 'NO'} |")
            else:
                t.append(f"| — | observers: every change heard, in term order; p99 delay after the commit ≤ 10 ms | "
                         f"missing {obs['missing']}, out of order {obs['out_of_order']}; after the commit completed "
                         f"p50 {f1(obs['after_done_ms_p50'])} ms, p99 {f1(done_p99)} ms (n={obs['after_done_n']}); "
                         f"after the commit timestamp p50 {f1(obs['delays_ms_p50'])} ms, p99 {f1(obs['delays_ms_p99'])} ms; "
                         f"reference (each grant's own NOTIFY, in_transaction): after the commit completed "
                         f"p50 {f1(obs.get('reference_after_done_ms_p50'))} ms, p99 {f1(obs.get('reference_after_done_ms_p99'))} ms, "
                         f"after the commit timestamp p99 {f1(obs.get('reference_delays_ms_p99'))} ms | "
                         f"{'yes' if obs['missing'] == 0 and obs['out_of_order'] == 0 and done_p99 <= 10 else 'NO'} |")
            own = obs.get("own_client_ms") or {}
            if own:
                t.append("")
                t.append("For scale, the same storms' winners' own clients: the answer to the winning call"
                         " arrived, after that transaction's commit timestamp, "
                         + "; ".join(f"{k}: p50 {f1(v['p50'])} ms, p99 {f1(v['p99'])} ms (n={v['n']})"
                                     for k, v in sorted(own.items()))
                         + " (advisory: the reference storm's one-row INSERT).")
        out += t + [""]
        for key, title, refs in data["scenarios"]:
            if key == "storm_250":
                continue
            out += [f"### {key}", "", title + ".", "",
                    "| protocol | TPS | range over rounds | mean ms | p99 ms | WAL B/tx | × " + refs[0] + " |",
                    "|---|---:|---:|---:|---:|---:|---:|"]
            ref = res.get(key, {}).get(refs[0], {}).get("tps")
            for p, v in res.get(key, {}).items():
                if "error" in v:
                    out.append(f"| {p} | {v['error']} | | | | | |")
                    continue
                out.append(f"| {p} | {v['tps']:.0f} | {v.get('tps_min', v['tps']):.0f}–{v.get('tps_max', v['tps']):.0f} | "
                           f"{v.get('mean_ms', 0):.2f} | {v.get('p99_ms', 0):.2f} | {v['wal_per_tx']:.0f} | "
                           f"{(v['tps'] / ref) if ref else 0:.2f} |")
            out.append("")
        if st:
            out += ["### storm_250", "", "ms from pg_terminate_backend of the holder to the last of 250 winners' returns"
                    " (the answer's arrival at its client); \"server\": to the last winner's commit completed"
                    " (its backend's state_change on going idle, the server's clock); \"CPU\": what every"
                    " server process used from the terminate until every winner had its answer, and one"
                    " winner's backend (medians, from /proc).", "",
                    "| method | trials | first winner (median) ms | last winner median ms | p99 (max) ms | server median ms"
                    " | server CPU ms | CPU per winner µs | all |",
                    "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
            for k, v in st.items():
                out.append(f"| {k} | {len(v['all_ms'])} | {f1(v.get('first_median_ms'))} | {f1(v['median_ms'])} | {f1(v['p99_ms'])} | "
                           f"{f1(v.get('server_median_ms'))} | {f1(v.get('server_cpu_median_ms'))} | "
                           f"{f1(v.get('winner_cpu_median_us'))} | {', '.join(f'{x:.0f}' for x in v['all_ms'])} |")
            out.append("")
        if rtt:
            out += ["### notify_rtt", "", "An unrelated application's NOTIFY → LISTEN round trip (ms).", "",
                    "| when | n | p50 | p99 |", "|---|---:|---:|---:|"]
            for k, v in rtt.items():
                out.append(f"| {k} | {v['n']} | {f1(v['p50'])} | {f1(v['p99'])} |")
            out.append("")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration", type=int, help="seconds per cell")
    ap.add_argument("--rounds", type=int, help="rounds of each throughput cell (median reported)")
    ap.add_argument("--storm-trials", type=int, help="storms per method")
    ap.add_argument("--only", help="comma-separated steps (new_grants, first_use_10k, first_use_100k, storm)")
    ap.add_argument("--label", help="title of this run in the report")
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--render", nargs="+", metavar="JSON",
                    help="only print the Markdown report of these runs (JSON files of --json)")
    args = ap.parse_args()
    if args.render:
        runs = []
        for fn in args.render:
            with open(fn) as f:
                runs.append(json.load(f))
        print(report(runs), end="")
        return 0
    data = Grants(args).run()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1, default=str)
    print(report([data]))


if __name__ == "__main__":
    sys.exit(main())
