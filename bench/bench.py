#!/usr/bin/python3
"""bench/bench.py: the throughput, correctness, WAL and bloat parts of the
leader_election benchmark, and the Markdown report.

Run by bench/run.sh against a throwaway cluster it started (PGHOST, PGPORT,
PGUSER, PGDATABASE in the environment); see bench/README.md.  Every scenario
of ../shared/docs/PERFORMANCE.md is run with `pgbench -n -M prepared` for each
protocol, back to back in the same cluster, so that the ratios between
protocols are meaningful even on a noisy machine.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))

# The protocols, in report order.  "ext" is the extension under test.
PROTOCOLS = ["ext", "seed_kotlin", "upsert", "shedlock", "advisory", "floor", "select1"]
TABLE_PROTOCOLS = ["ext", "seed_kotlin", "upsert", "shedlock", "floor"]


def try_sql(proto, name, holder, ttl):
    """The SQL of one try-acquire/renew call of a protocol (pgbench syntax)."""
    if proto == "ext":
        return f"SELECT try_acquire_leader({name}, interval '{ttl}', {holder});"
    if proto == "select1":
        return "SELECT 1;"
    return f"SELECT {proto}.le_try({name}, {holder}, interval '{ttl}');"


def am_sql(proto, name, holder):
    if proto == "ext":
        return f"SELECT am_leader({name}, {holder});"
    if proto == "select1":
        return "SELECT 1;"
    return f"SELECT {proto}.le_am({name}, {holder});"


def acquire(conn, proto, name, holder, ttl):
    """Take a lease outside pgbench (pre-population); floor needs its row."""
    with conn.cursor() as cur:
        if proto == "ext":
            cur.execute("SELECT try_acquire_leader(%s, %s::interval, %s)", (name, ttl, holder))
        elif proto == "floor":
            cur.execute("INSERT INTO floor.leases VALUES (%s, %s, now() + %s::interval)"
                        " ON CONFLICT (name) DO NOTHING", (name, holder, ttl))
        elif proto in ("select1", "advisory"):
            return  # nothing to hold outside a pgbench session
        else:
            cur.execute(f"SELECT {proto}.le_try(%s, %s, %s::interval)", (name, holder, ttl))


def populate(conn, proto, prefix, first, last, clients, ttl):
    """Create names prefix||first .. prefix||last, name i held by h(i mod clients).

    Done in a server-side loop that commits every 1000 names, so no
    transaction holds more than 1000 of the extension's writer locks."""
    if proto in ("select1", "advisory"):
        return
    if proto == "ext":
        call = "PERFORM try_acquire_leader('{p}' || i, interval '{t}', 'h' || (i % {c}));"
    elif proto == "floor":
        call = ("INSERT INTO floor.leases VALUES ('{p}' || i, 'h' || (i % {c}), now() + interval '{t}')"
                " ON CONFLICT (name) DO NOTHING;")
    else:
        call = "PERFORM " + proto + ".le_try('{p}' || i, 'h' || (i % {c}), interval '{t}');"
    call = call.format(p=prefix, t=ttl, c=clients)
    with conn.cursor() as cur:
        cur.execute(f"""DO $$ BEGIN
            FOR i IN {first}..{last} LOOP
                {call}
                IF i % 1000 = 999 THEN COMMIT; END IF;
            END LOOP; END $$""")


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.duration = args.duration or (2 if args.quick else 5)
        # Throughput cells run in several rounds, the protocols in a rotated
        # order each round, and report the round with the median TPS: one
        # noisy moment on a shared 2-core machine then moves no ratio.
        self.rounds = args.rounds or (1 if args.quick else 3)
        self.samples = {}
        self.tmp = tempfile.mkdtemp(prefix="le_bench_logs.")
        self.conn = self.connect()
        self.results = {}      # scenario -> proto -> dict
        self.scenarios = []    # (key, title, reference(s))
        self.extra = {}

    def connect(self, dbname=None):
        conn = psycopg2.connect(dbname=dbname or os.environ.get("PGDATABASE", "postgres"))
        conn.autocommit = True
        return conn

    def q(self, sql, args=None, conn=None):
        with (conn or self.conn).cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None

    def log(self, msg):
        print(f"  {msg}", flush=True)

    # ---- pgbench ----

    def pgbench(self, script, clients, duration=None, transactions=None, env=None, dbname=None, log=True):
        """Run one pgbench cell; returns tps, mean/p99 latency (ms), count, WAL bytes."""
        path = os.path.join(self.tmp, "script.sql")
        with open(path, "w") as f:
            f.write(script)
        prefix = os.path.join(self.tmp, "lat")
        for old in glob.glob(prefix + ".*"):
            os.unlink(old)
        cmd = ["pgbench", "-n", "-M", "prepared", "-c", str(clients),
               "-j", str(min(clients, os.cpu_count() or 2)), "-f", path]
        if dbname:
            cmd += ["-d", dbname]
        cmd += ["-t", str(transactions)] if transactions else ["-T", str(duration or self.duration)]
        if log:
            cmd += ["-l", "--log-prefix=" + prefix]
        conn = self.connect(dbname) if dbname else self.conn
        self.q("CHECKPOINT", conn=conn)
        lsn0 = self.q("SELECT pg_current_wal_lsn()", conn=conn)[0][0]
        out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
        wal = self.q("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)::bigint", (lsn0,), conn=conn)[0][0]
        if dbname:
            conn.close()
        text = out.stdout + out.stderr
        m_tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
        m_n = re.search(r"number of transactions actually processed: (\d+)", text)
        m_fail = re.search(r"number of failed transactions: (\d+)", text)
        if out.returncode != 0 or not m_tps or not m_n:
            return {"error": text.strip().splitlines()[-1] if text.strip() else f"exit {out.returncode}"}
        res = {"tps": float(m_tps.group(1)), "n": int(m_n.group(1)),
               "failed": int(m_fail.group(1)) if m_fail else 0,
               "wal_per_tx": wal / max(1, int(m_n.group(1)))}
        if log:
            lat = []
            for fn in glob.glob(prefix + ".*"):
                with open(fn) as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) >= 3 and parts[2].isdigit():
                            lat.append(int(parts[2]))
            lat.sort()
            if lat:
                res["mean_ms"] = sum(lat) / len(lat) / 1000.0
                res["p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000.0
        return res

    def rotated(self, round_no):
        """The protocols in the order of one round: rotated by the round number."""
        k = round_no % len(PROTOCOLS)
        return PROTOCOLS[k:] + PROTOCOLS[:k]

    def cell(self, scenario, proto, script, clients):
        res = self.pgbench(script, clients)
        runs = self.samples.setdefault((scenario, proto), [])
        runs.append(res)
        good = sorted((r for r in runs if "error" not in r), key=lambda r: r["tps"])
        if good:
            median = dict(good[(len(good) - 1) // 2])
            median["rounds"] = len(good)
            median["tps_min"], median["tps_max"] = good[0]["tps"], good[-1]["tps"]
            self.results.setdefault(scenario, {})[proto] = median
        else:
            self.results.setdefault(scenario, {})[proto] = res
        if "error" in res:
            self.log(f"{scenario:18} {proto:12} ERROR {res['error']}")
        else:
            self.log(f"{scenario:18} {proto:12} {res['tps']:10.0f} tps  mean {res.get('mean_ms', 0):.3f} ms"
                     f"  p99 {res.get('p99_ms', 0):.3f} ms  WAL {res['wal_per_tx']:.0f} B/tx")

    # ---- scenarios ----

    def scenario_renew(self):
        key = "renew_1"
        self.scenarios.append((key, "1 client, one name, the holder renewing back to back (ttl 10 s)", ["floor"]))
        for r in range(self.rounds):
            for p in self.rotated(r):
                acquire(self.conn, p, "renew", "h0", "10 s")
                self.cell(key, p, try_sql(p, "'renew'", "'h' || :client_id", "10 s"), 1)

    def scenario_contend(self, clients, name=None):
        key = name or f"contend_{clients}"
        self.scenarios.append((key, f"{clients} clients, each its own holder, try-acquire on one name, ttl 1 s;"
                               " client 0 holds it at the start and renews, the others lose", ["shedlock", "select1"]))
        for r in range(self.rounds):
            for p in self.rotated(r):
                acquire(self.conn, p, key, "h0", "1 s")
                self.cell(key, p, try_sql(p, f"'{key}'", "'h' || :client_id", "1 s"), clients)

    def scenario_many(self, names, clients=32):
        key = f"many_names_{clients}_{names // 1000}k"
        self.scenarios.append((key, f"{clients} clients; {names} names m0..m{names - 1}, name i held by holder"
                               f" h(i mod {clients}); each client renews a uniformly random name of its own"
                               f" ({names // clients} each) with its own holder", ["shedlock"]))
        per = names // clients
        script = (f"\\set k random(0, {per - 1})\n"
                  f"\\set i :client_id + {clients} * :k\n")
        # Every protocol's names are created before the first round, and its
        # tables vacuumed: the bulk load is setup, and the autovacuum it
        # triggers would otherwise land in whichever cell happens to run
        # during the next autovacuum naptime.
        have = self.extra.setdefault("populated", 0)
        measured = []
        for p in PROTOCOLS:
            if p == "advisory" and names * 1 > 20000:
                # One session-level lock per name held: 100k names need a lock
                # table far beyond max_locks_per_transaction * max_connections.
                self.results.setdefault(key, {})[p] = {"error": "n/a: needs one lock-table slot per name held"}
                continue
            measured.append(p)
            t0 = time.time()
            populate(self.conn, p, "m", have, names - 1, clients, "1 h")
            if have < names and p not in ("select1", "advisory"):
                self.log(f"populated {names - have} names for {p} in {time.time() - t0:.1f} s")
        self.extra["populated"] = names
        self.q("VACUUM")
        for r in range(self.rounds):
            for p in self.rotated(r):
                if p in measured:
                    self.cell(key, p, script + try_sql(p, "'m' || :i", "'h' || :client_id", "10 s"), clients)

    def scenario_am(self, clients):
        key = f"am_{clients}"
        self.scenarios.append((key, f"{clients} clients asking am-I-leader about one lease held by h0"
                               " (client 0 is h0 and gets true, the others false)", ["select1"]))
        for r in range(self.rounds):
            for p in self.rotated(r):
                acquire(self.conn, p, "am", "h0", "1 h")
                self.cell(key, p, am_sql(p, "'am'", "'h' || :client_id"), clients)

    # ---- correctness ----

    def correctness(self):
        """Contention with takeovers; every win logged in its own transaction.

        8 clients try one name with ttl 200 ms; after a win, a client pauses
        300 ms one time in ten, so the lease expires and the others race to
        take it over.  A protocol is wrong if two holders' intervals
        [t_won, t_start + ttl) overlap."""
        protos = ["ext", "seed_kotlin", "upsert", "shedlock", "naive"]
        out = {}
        for p in protos:
            call = try_sql(p, "'corr'", "'h' || :client_id", "200 ms").rstrip(";")
            script = f"""BEGIN;
SELECT now() AS t_start, ({call.replace('SELECT ', '', 1)}) AS won, clock_timestamp() AS t_won \\gset
\\if :won
INSERT INTO bench.wins VALUES ('{p}', 'h' || :client_id, :t_start, :t_won, interval '200 ms');
\\endif
COMMIT;
\\if :won
\\set r random(1, 10)
\\if :r = 1
\\sleep 300 ms
\\endif
\\endif
"""
            if p == "naive":
                self.q("INSERT INTO naive.leases VALUES ('corr', 'h0', now()) ON CONFLICT DO NOTHING")
            res = self.pgbench(script, 8, duration=max(3, self.duration), log=False)
            row = self.q("""
                WITH w AS (SELECT * FROM bench.wins WHERE protocol = %s),
                     ordered AS (SELECT holder, lag(holder) OVER (ORDER BY t_won) AS prev FROM w)
                SELECT (SELECT count(*) FROM w),
                       (SELECT count(*) FROM ordered WHERE prev IS DISTINCT FROM holder),
                       (SELECT count(*) FROM w a JOIN w b
                           ON a.holder < b.holder
                          AND a.t_won < b.t_start + b.ttl AND b.t_won < a.t_start + a.ttl),
                       (SELECT max(extract(epoch FROM (least(a.t_start + a.ttl, b.t_start + b.ttl)
                                                       - greatest(a.t_won, b.t_won))) * 1000)
                          FROM w a JOIN w b
                           ON a.holder < b.holder
                          AND a.t_won < b.t_start + b.ttl AND b.t_won < a.t_start + a.ttl)""", (p,))[0]
            out[p] = {"wins": row[0], "changes": row[1], "overlaps": row[2],
                      "max_overlap_ms": float(row[3]) if row[3] is not None else 0.0,
                      "error": res.get("error")}
            self.log(f"correctness {p:12} wins {row[0]}  holder changes {row[1]}  overlapping pairs {row[2]}")
        self.extra["correctness"] = out

    # ---- bloat ----

    def bloat(self):
        """N renewals of one lease per table protocol, in a fresh database.

        synchronous_commit is off for these runs only (they measure sizes,
        HOT share and WAL volume, none of which it changes) to save time."""
        n = self.args.bloat or (100_000 if self.quick else 1_000_000)
        self.q("DROP DATABASE IF EXISTS bench_bloat")
        self.q("CREATE DATABASE bench_bloat")
        bc = self.connect("bench_bloat")
        self.q("CREATE EXTENSION leader_election", conn=bc)
        with open(os.path.join(HERE, "protocols.sql")) as f:
            self.q(f.read(), conn=bc)
        tables = {"ext": "leader_election.leases", "seed_kotlin": "seed_kotlin.leases",
                  "upsert": "upsert.leases", "shedlock": "shedlock.leases", "floor": "floor.leases"}
        out = {}
        stat_sql = """SELECT coalesce(n_tup_upd, 0), coalesce(n_tup_hot_upd, 0) FROM pg_stat_user_tables
                       WHERE relid = %s::regclass"""
        for p in TABLE_PROTOCOLS:
            acquire(bc, p, "bloat", "h0", "1 h")
            rel = tables[p]
            upd0, hot0 = self.q(stat_sql, (rel,), conn=bc)[0]
            hist0 = self.q("SELECT count(*), pg_total_relation_size('leader_election.history')"
                           " FROM leader_election.history", conn=bc)[0]
            res = self.pgbench(try_sql(p, "'bloat'", "'h0'", "1 h"), 1, transactions=n, log=False,
                               env={"PGOPTIONS": "-c synchronous_commit=off"}, dbname="bench_bloat")
            # Backends flush their table statistics when they exit; wait for them.
            deadline = time.time() + 30
            while True:
                self.q("SELECT pg_stat_clear_snapshot()", conn=bc)
                upd, hot = self.q(stat_sql, (rel,), conn=bc)[0]
                if upd - upd0 >= n or time.time() > deadline:
                    break
                time.sleep(0.2)
            size = self.q("SELECT pg_total_relation_size(%s::regclass), pg_relation_size(%s::regclass),"
                          " pg_indexes_size(%s::regclass)", (rel, rel, rel), conn=bc)[0]
            hist = self.q("SELECT count(*), pg_total_relation_size('leader_election.history')"
                          " FROM leader_election.history", conn=bc)[0]
            out[p] = {"renewals": n, "tps": res.get("tps"), "error": res.get("error"),
                      "upd": upd - upd0, "hot": hot - hot0,
                      "total": size[0], "heap": size[1], "indexes": size[2],
                      "wal_per_tx": res.get("wal_per_tx"),
                      "history_rows": hist[0] - hist0[0] if p == "ext" else None,
                      "history_bytes": (hist0[1], hist[1]) if p == "ext" else None}
            self.log(f"bloat {p:12} {n} renewals: total {size[0]} B (heap {size[1]}, idx {size[2]}),"
                     f" HOT {hot - hot0}/{upd - upd0}, WAL {out[p]['wal_per_tx'] or 0:.0f} B/tx")
        bc.close()
        self.extra["bloat"] = out

    # ---- report ----

    def machine(self):
        ver = self.q("SELECT current_setting('server_version')")[0][0]
        settings = dict(self.q("SELECT name, setting FROM pg_settings WHERE name IN"
                               " ('fsync', 'synchronous_commit', 'shared_preload_libraries', 'max_connections')"))
        load = os.getloadavg()
        return {"host": platform.node(), "cores": os.cpu_count(), "pg": ver,
                "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "settings": settings, "load_before": self.extra.get("load_before"), "load_after": load,
                "mode": "quick" if self.quick else "full", "duration": self.duration,
                "rounds": self.rounds}

    def run(self):
        self.extra["load_before"] = os.getloadavg()
        steps = [("renew", self.scenario_renew),
                 ("contend_8", lambda: self.scenario_contend(8)),
                 ("contend_32", lambda: self.scenario_contend(32)),
                 ("many_10k", lambda: self.scenario_many(10_000)),
                 ("many_100k", lambda: self.scenario_many(100_000)),
                 ("am_8", lambda: self.scenario_am(8)),
                 ("am_32", lambda: self.scenario_am(32)),
                 ("candidates_200", lambda: self.scenario_contend(200, "candidates_200")),
                 ("correctness", self.correctness),
                 ("bloat", self.bloat)]
        if self.quick:
            skip = {"contend_8", "many_100k", "am_32"}
            steps = [s for s in steps if s[0] not in skip]
        if self.args.only:
            steps = [s for s in steps if s[0] in self.args.only.split(",")]
        for name, fn in steps:
            print(f"==> {name}", flush=True)
            fn()
        data = {"machine": self.machine(), "scenarios": self.scenarios, "results": self.results,
                "extra": self.extra}
        shutil.rmtree(self.tmp, ignore_errors=True)
        return data


# ---------------------------------------------------------------- report

def fmt_ratio(x):
    return "—" if x is None else f"{x:.2f}×"


def ratio(results, scen, proto, ref):
    a, b = results.get(scen, {}).get(proto, {}), results.get(scen, {}).get(ref, {})
    if "tps" not in a or "tps" not in b or not b["tps"]:
        return None
    return a["tps"] / b["tps"]


def verdict(ok):
    return "—" if ok is None else ("**met**" if ok else "**not met**")


def targets(data):
    r = data["results"]
    rows = []

    def both(*xs):
        return None if any(x is None for x in xs) else all(xs)

    t1 = ratio(r, "renew_1", "ext", "floor")
    rows.append(("T1", "renew_1 ≥ 1.0 × floor", f"{fmt_ratio(t1)} floor", verdict(None if t1 is None else t1 >= 1.0)))
    a, b = ratio(r, "contend_32", "ext", "shedlock"), ratio(r, "contend_32", "ext", "select1")
    rows.append(("T2", "contend_32 ≥ 2.0 × shedlock and ≥ 0.6 × select1",
                 f"{fmt_ratio(a)} shedlock, {fmt_ratio(b)} select1",
                 verdict(both(None if a is None else a >= 2.0, None if b is None else b >= 0.6))))
    a, b = ratio(r, "am_8", "ext", "select1"), ratio(r, "am_32", "ext", "select1")
    rows.append(("T3", "am_8, am_32 ≥ 0.8 × select1", f"am_8 {fmt_ratio(a)}, am_32 {fmt_ratio(b)}",
                 verdict(both(*[None if x is None else x >= 0.8 for x in (a, b) if x is not None]) if (a or b) else None)))
    a, b = ratio(r, "many_names_32_10k", "ext", "shedlock"), ratio(r, "many_names_32_100k", "ext", "shedlock")
    s10 = r.get("many_names_32_10k", {}).get("ext", {}).get("tps")
    s100 = r.get("many_names_32_100k", {}).get("ext", {}).get("tps")
    sc = s100 / s10 if s10 and s100 else None
    oks = [x >= 1.0 for x in (a, b) if x is not None] + ([sc >= 0.8] if sc is not None else [])
    rows.append(("T4", "many_names_32 (10k, 100k) ≥ 1.0 × shedlock; 100k ≥ 0.8 × 10k",
                 f"10k {fmt_ratio(a)}, 100k {fmt_ratio(b)} shedlock; 100k/10k {fmt_ratio(sc)}",
                 verdict(all(oks) if oks else None)))
    fo = data.get("failover") or {}
    for t, key, label in (("T5", "ext_client_kill", "failover (client killed)"),
                          ("T5", "ext_backend_terminate", "failover (backend terminated)"),
                          ("T6", "ext_expiry", "expiry")):
        st = fo.get("methods", {}).get(key)
        if st and st.get("median_ms") is not None:
            rows.append((t, f"{label}: median ≤ 5 ms, p99 ≤ 20 ms",
                         f"median {st['median_ms']:.2f} ms, p99 {st['p99_ms']:.2f} ms",
                         verdict(st["median_ms"] <= 5 and st["p99_ms"] <= 20)))
        else:
            rows.append((t, f"{label}: median ≤ 5 ms, p99 ≤ 20 ms", "not measured", verdict(None)))
    b = data["extra"].get("bloat", {}).get("ext")
    if b and not b.get("error"):
        hot = b["hot"] / b["upd"] if b["upd"] else 0
        ok = hot >= 0.99 and b["total"] <= 64 * 1024 and b["history_rows"] == 0
        rows.append(("T7", "bloat: ≥ 99 % HOT, table + indexes ≤ 64 kB, history does not grow",
                     f"{hot * 100:.2f} % HOT, {b['total'] / 1024:.0f} kB, history +{b['history_rows']} rows"
                     f" after {b['renewals']:,} renewals", verdict(ok)))
    return rows


def report(data):
    m = data["machine"]
    L = []
    L.append("# leader_election benchmark results\n")
    L.append(f"**Machine:** {m['host']}, {m['cores']} cores, PostgreSQL {m['pg']}, {m['date']}; "
             f"mode {m['mode']} ({m['duration']} s per cell, {m.get('rounds', 1)} rounds); fsync {m['settings'].get('fsync')}, "
             f"synchronous_commit {m['settings'].get('synchronous_commit')}, "
             f"shared_preload_libraries '{m['settings'].get('shared_preload_libraries')}', "
             f"max_connections {m['settings'].get('max_connections')}; "
             f"load average before {m['load_before'][0]:.1f}, after {m['load_after'][0]:.1f}.\n")
    if m["load_before"][0] > 0.5 * m["cores"]:
        L.append("> Measured while other work was running on this machine (see the load average): absolute"
                 " numbers are noisy; compare ratios within one scenario.\n")
    L.append("## Targets (PERFORMANCE.md)\n")
    L.append("| # | target | measured | |\n|---|---|---|---|")
    for row in targets(data):
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append("## Throughput (pgbench -n -M prepared)\n")
    L.append("Ratios are TPS divided by the TPS of the scenario's reference protocol, measured in the same"
             " run. Latency is per transaction, from pgbench's per-transaction log. WAL is"
             " pg_current_wal_lsn() advance over the cell divided by transactions (a CHECKPOINT precedes"
             " every cell). Every cell runs in several rounds, the protocols in a rotated order each"
             " round; the round with the median TPS is shown, and the TPS range over the rounds is in the"
             " last column. The many_names cells start after every protocol's names exist and a VACUUM.\n")
    for key, title, refs in data["scenarios"]:
        res = data["results"].get(key, {})
        L.append(f"### {key}\n\n{title}.\n")
        L.append("| protocol | TPS | mean ms | p99 ms | WAL B/tx | " + " | ".join(f"× {r}" for r in refs)
                 + " | TPS range |")
        L.append("|---|---:|---:|---:|---:|" + "---:|" * len(refs) + "---:|")
        for p in PROTOCOLS:
            c = res.get(p)
            if c is None:
                continue
            if "error" in c:
                L.append(f"| {p} | {c['error']} |" + " |" * (4 + len(refs)))
                continue
            rs = " | ".join(fmt_ratio(ratio(data["results"], key, p, r)) for r in refs)
            name = f"**{p}**" if p == "ext" else p
            spread = (f"{c['tps_min']:,.0f}–{c['tps_max']:,.0f} ({c['rounds']})"
                      if c.get("rounds", 1) > 1 else "one round")
            L.append(f"| {name} | {c['tps']:,.0f} | {c.get('mean_ms', 0):.3f} | {c.get('p99_ms', 0):.3f} |"
                     f" {c['wal_per_tx']:.0f} | {rs} | {spread} |")
        L.append("")
    b = data["extra"].get("bloat")
    if b:
        n = next(iter(b.values()))["renewals"]
        L.append(f"## Bloat and WAL: {n:,} renewals of one lease\n")
        L.append("One client renews one lease back to back in a fresh database (synchronous_commit off for this"
                 " part only; it changes neither sizes nor WAL volume). Sizes after the run: total ="
                 " pg_total_relation_size (heap, indexes, TOAST, FSM, VM); HOT share from pg_stat_user_tables.\n")
        L.append("| protocol | total kB | heap kB | indexes kB | HOT updates | WAL B/renewal | history |")
        L.append("|---|---:|---:|---:|---:|---:|---|")
        for p, c in b.items():
            if c.get("error"):
                L.append(f"| {p} | {c['error']} | | | | | |")
                continue
            hot = f"{c['hot'] / c['upd'] * 100:.2f} % of {c['upd']:,}" if c["upd"] else "no updates counted"
            hist = "—"
            if c.get("history_rows") is not None:
                hist = f"+{c['history_rows']} rows, {c['history_bytes'][0] // 1024} → {c['history_bytes'][1] // 1024} kB"
            L.append(f"| {p} | {c['total'] / 1024:.0f} | {c['heap'] / 1024:.0f} | {c['indexes'] / 1024:.0f} |"
                     f" {hot} | {c['wal_per_tx'] or 0:.0f} | {hist} |")
        L.append("")
    c = data["extra"].get("correctness")
    if c:
        L.append("## Correctness: no two leaders at once\n")
        L.append("8 clients, each its own holder, try one name with ttl 200 ms; a winner pauses 300 ms one time in"
                 " ten so that the lease expires and the others race for it. Every win is inserted into"
                 " bench.wins by the winning transaction itself, with now() (t_start) and clock_timestamp() right"
                 " after the call (t_won). The winner may rely on [t_won, t_start + ttl); the check counts pairs of"
                 " wins by different holders whose intervals overlap. It must be 0 for a correct protocol, and it"
                 " catches `naive` (floor as read-then-write, no lock).\n")
        L.append("| protocol | wins | holder changes | overlapping pairs | worst overlap ms | verdict |")
        L.append("|---|---:|---:|---:|---:|---|")
        for p, v in c.items():
            if v["overlaps"]:
                ver = "two leaders at once (caught)" if p == "naive" else "**VIOLATION**"
            else:
                ver = ("not caught in this run (too few races)" if p == "naive" else "ok")
            if v["changes"] < 3:
                ver += "; too few takeovers to be meaningful"
            L.append(f"| {p} | {v['wins']:,} | {v['changes']:,} | {v['overlaps']:,} | {v['max_overlap_ms']:.1f} | {ver} |")
        L.append("")
    fo = data.get("failover")
    if fo and fo.get("markdown"):
        L.append(fo["markdown"])
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration", type=int, help="seconds per cell")
    ap.add_argument("--rounds", type=int, help="rounds of each throughput cell (median reported)")
    ap.add_argument("--bloat", type=int, help="renewals in the bloat scenario")
    ap.add_argument("--only", help="comma-separated steps (renew, contend_8, contend_32, many_10k, many_100k,"
                                   " am_8, am_32, candidates_200, correctness, bloat)")
    ap.add_argument("--failover-json", help="results of failover.py to include")
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    data = Bench(args).run()
    if args.failover_json and os.path.exists(args.failover_json):
        with open(args.failover_json) as f:
            data["failover"] = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1, default=str)
    md = report(data)
    os.makedirs(args.results, exist_ok=True)
    day = datetime.date.today().isoformat()
    name = f"{day}-{platform.node()}{'-quick' if args.quick else ''}.md"
    for fn in (name, "latest.md"):
        with open(os.path.join(args.results, fn), "w") as f:
            f.write(md)
    print(f"==> report: {os.path.join(args.results, name)} (and latest.md)")


if __name__ == "__main__":
    sys.exit(main())
