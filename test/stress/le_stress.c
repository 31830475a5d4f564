/*-------------------------------------------------------------------------
 *
 * le_stress.c
 *	  Stress driver for leader_election: N client processes contend for a
 *	  lease on loopback for a bounded time and record a history that
 *	  test/stress/check.pl checks (research/anchors-reliability.md §B.4).
 *
 * Each client is its own process, so a nemesis can SIGSTOP/SIGCONT exactly
 * the client that holds the lease.  A client loops:
 *
 *	 not leader:  BEGIN; try_acquire_leader(name, ttl, holder); on true an
 *				  audit row (term, holder, acquired/renewed/expires_at read
 *				  from leader_election.leases) in the same transaction; COMMIT
 *	 leader:	  fenced effect: BEGIN; assert_leader(name, term, holder);
 *				  append (term, client, seq) at the next position of the name's
 *				  effect counter; COMMIT -- then renew (as above), sometimes
 *				  release, sleep with jitter
 *
 * and reconnects after errors.  --unfenced is the negative control: it asks
 * am_leader() in its own statement and writes in a later transaction, the
 * classic unsafe check-then-act.  --stall-prob/--stall-ms make a client
 * sleep between its leadership check and its write (a "GC pause"): inside
 * the fenced transaction, where it only delays takeover, or in the gap of
 * the unfenced one, where a stale write follows.
 *
 * Every operation is logged, one line written with one write(2) to a file
 * opened O_APPEND so lines of concurrent clients never interleave:
 *
 *	 client op invoke_ns complete_ns result term sqlstate seq name holder
 *
 * times on CLOCK_MONOTONIC (shared by every process of the machine, so the
 * nemesis's log uses the same clock), result ok | fail | info, where info
 * means indeterminate: the connection was lost while COMMIT was in flight,
 * or COMMIT reported an error.  A failure before COMMIT was sent is
 * definite (the server aborts the transaction of a lost connection), and so
 * is a COMMIT the server answers with ROLLBACK.
 *
 * SIGUSR1 to a client: for --timeout-window-ms it runs every operation with
 * a short random statement_timeout and lock_timeout (the nemesis's
 * "timeouts" fault).
 *
 * Under a failover manager (test/t/400_patroni.pl): --client-conninfo (given
 * several times) lets client i connect with the i-th string modulo their
 * number, say multi-host strings listing the nodes in different orders, and
 * --reconnect-prob makes clients drop their session now and then, so that
 * during a split brain some reach the old primary and some the new one.  A
 * COMMIT after which the server warned that it stopped waiting for
 * synchronous replication committed locally only: it is logged as info.
 * --stop-file ends the run early (before --seconds) once that file exists,
 * for a test whose faults take as long as they take.
 *
 * After the clients end, the driver dumps the server side of the history
 * (leader_election.history, stress.audit, stress.effects) as TSV files into
 * --out for the checker.  Timestamps there are epoch microseconds.
 *
 * Build: make stress-driver (links libpq).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define MAX_CLIENTS 64

/* Command line, shared by parent and children (copied on fork). */
static struct
{
	const char *conninfo;
	const char *client_conninfo[8];	/* --client-conninfo: client i uses [i % n] */
	int			n_client_conninfo;
	double		reconnect_prob; /* drop the session before an operation */
	const char *stop_file;		/* --stop-file: clients end once it exists */
	const char *out;
	const char *prefix;
	int			clients;
	int			names;
	int			seconds;
	int			ttl_ms;
	int			retry_ms;
	int			stall_ms;
	double		stall_prob;
	double		release_prob;
	int			timeout_window_ms;
	int			waiters;
	unsigned	seed;
	bool		unfenced;
	bool		session_identity;
}			opt = {
	.conninfo = "",
	.out = ".",
	.prefix = "stress_",
	.clients = 8,
	.names = 1,
	.seconds = 60,
	.ttl_ms = 1000,
	.retry_ms = 250,
	.stall_ms = 0,
	.stall_prob = 0.0,
	.release_prob = 0.05,
	.timeout_window_ms = 2000,
	.seed = 1,
};

/* ---- small utilities ---- */

static int64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000};

	/* Restart after a signal (SIGUSR1) so the sleep keeps its length. */
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void
die(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	fprintf(stderr, "le_stress: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

/* xorshift64*: a per-client generator, reproducible from --seed. */
static uint64_t rng_state;

static uint64_t
rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static double
rng_unit(void)
{
	return (rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

/* base * [0.5, 1.5): jitter so clients do not move in lockstep. */
static int
jitter(int base)
{
	return (int) (base * (0.5 + rng_unit()));
}

/* ---- one client ---- */

typedef struct Client
{
	int			id;
	PGconn	   *conn;
	char		name[128];
	bool		leader;
	long long	term;			/* the term we believe we hold, if leader */
	char		holder[160];	/* our holder string as the server knows it */
	long long	seq;			/* operation counter of this client */
	int			logfd;
	bool		timeouts_set;	/* short timeouts in force on this session */
	int64_t		timeouts_until; /* ... until this CLOCK_MONOTONIC time */
} Client;

/*
 * Set when the server warned that it stopped waiting for synchronous
 * replication (a cancel or statement_timeout during COMMIT): the commit is
 * then local only and may be lost in a failover, so COMMIT's "ok" is not an
 * acknowledgement (commit() reports it as info).
 */
static bool sync_wait_cut = false;

static volatile sig_atomic_t got_usr1 = 0;

static void
on_usr1(int signo)
{
	(void) signo;
	got_usr1 = 1;
}

/* The outcome of one operation. */
typedef struct Outcome
{
	const char *result;			/* "ok", "fail", "info" */
	long long	term;			/* -1: none */
	char		sqlstate[6];
} Outcome;

static void
log_op(Client *c, const char *op, long long seq, int64_t t0, int64_t t1,
	   const Outcome *o)
{
	char		line[512];
	char		term[32];
	int			n;

	if (o->term >= 0)
		snprintf(term, sizeof(term), "%lld", o->term);
	else
		strcpy(term, "-");
	n = snprintf(line, sizeof(line), "%d %s %lld %lld %s %s %s %lld %s %s\n",
				 c->id, op, (long long) t0, (long long) t1, o->result, term,
				 o->sqlstate[0] ? o->sqlstate : "-", seq, c->name,
				 c->holder[0] ? c->holder : "-");
	if (n > 0 && write(c->logfd, line, n) != n)
		die("cannot write the client log: %s", strerror(errno));
}

static void
set_outcome(Outcome *o, const char *result, long long term, const char *state)
{
	o->result = result;
	o->term = term;
	snprintf(o->sqlstate, sizeof(o->sqlstate), "%s", state ? state : "");
}

/*
 * Did this error end the session?  libpq reports a connection lost in the
 * middle of a command without a SQLSTATE (and may still say CONNECTION_OK
 * until the next call); the server ends sessions with class 57P0x (admin
 * shutdown, crash of another process) and 08.
 */
static bool
session_lost(Client *c, const char *state)
{
	return PQstatus(c->conn) != CONNECTION_OK || state == NULL ||
		strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0;
}

/* Drop a session that is gone; the main loop reconnects. */
static void
drop_session(Client *c)
{
	PQfinish(c->conn);
	c->conn = NULL;
}

/*
 * Classify a failed statement (not COMMIT): the transaction did not commit,
 * whatever happened to the session, so this is a definite failure.  A lost
 * session is reported as 08006 and dropped; otherwise the session is left
 * outside any transaction.
 */
static void
failed(Client *c, PGresult *res, Outcome *o)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (session_lost(c, state))
	{
		set_outcome(o, "fail", -1, state ? state : "08006");
		drop_session(c);
		return;
	}
	set_outcome(o, "fail", -1, state);
	if (PQtransactionStatus(c->conn) != PQTRANS_IDLE)
		PQclear(PQexec(c->conn, "ROLLBACK"));
}

/* Run a statement expected to succeed; false (and *o filled) if not. */
static bool
run(Client *c, Outcome *o, PGresult **out, const char *sql, int nparams,
	const char *const *params)
{
	PGresult   *res = PQexecParams(c->conn, sql, nparams, NULL, params,
								   NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
	{
		if (out)
			*out = res;
		else
			PQclear(res);
		return true;
	}
	failed(c, res, o);
	PQclear(res);
	return false;
}

/*
 * COMMIT, the linearisation point.  ok if it committed; fail if the server
 * answers ROLLBACK (the transaction had already failed); info for any error
 * during COMMIT, a lost session or a cancel alike: as in Jepsen, an outcome
 * is definite only when the server said which one it was.
 */
static bool
commit(Client *c, Outcome *o, long long term)
{
	PGresult   *res;
	ExecStatusType st;
	const char *state;
	bool		ok = false;

	sync_wait_cut = false;
	res = PQexec(c->conn, "COMMIT");
	st = PQresultStatus(res);
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (st == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "COMMIT") == 0 &&
		sync_wait_cut)
		set_outcome(o, "info", term, "01000");	/* committed locally only */
	else if (st == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "COMMIT") == 0)
	{
		set_outcome(o, "ok", term, NULL);
		ok = true;
	}
	else if (st == PGRES_COMMAND_OK)
		set_outcome(o, "fail", term, "40000");	/* COMMIT of an aborted txn */
	else if (session_lost(c, state))
	{
		set_outcome(o, "info", term, state ? state : "08006");
		drop_session(c);
	}
	else
	{
		set_outcome(o, "info", term, state);
		if (PQtransactionStatus(c->conn) != PQTRANS_IDLE)
			PQclear(PQexec(c->conn, "ROLLBACK"));
	}
	PQclear(res);
	return ok;
}

/* Server notices (the crash WARNING, say) would only clutter stderr. */
static void
quiet_notices(void *arg, const PGresult *res)
{
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	(void) arg;
	if (msg && strstr(msg, "wait for synchronous replication"))
		sync_wait_cut = true;
}

static void
connect_client(Client *c)
{
	char		appname[64];
	const char *keys[] = {"dbname", "application_name", "connect_timeout",
	"options", NULL};
	const char *vals[5];
	Outcome		o;
	int64_t		t0 = mono_ns();

	snprintf(appname, sizeof(appname), "le_stress c%d", c->id);
	vals[0] = opt.n_client_conninfo > 0 ?
		opt.client_conninfo[c->id % opt.n_client_conninfo] : opt.conninfo;
	vals[1] = appname;
	vals[2] = "5";
	/* Bound every statement: a hung client would hide the history's end. */
	vals[3] = "-c statement_timeout=10s -c lock_timeout=10s";
	vals[4] = NULL;

	if (c->conn)
		PQfinish(c->conn);
	c->conn = PQconnectdbParams(keys, vals, 1);
	c->timeouts_set = false;
	if (PQstatus(c->conn) == CONNECTION_OK)
	{
		PQsetNoticeReceiver(c->conn, quiet_notices, NULL);
		set_outcome(&o, "ok", -1, NULL);
	}
	else
	{
		set_outcome(&o, "fail", -1, "08001");
		PQfinish(c->conn);
		c->conn = NULL;
	}
	/* A new session: a session-bound lease of the old one is gone. */
	if (opt.session_identity)
	{
		c->leader = false;
		c->holder[0] = '\0';
	}
	log_op(c, "connect", ++c->seq, t0, mono_ns(), &o);
}

/* The nemesis's timeouts fault: short timeouts while the window lasts. */
static void
apply_timeouts(Client *c)
{
	char		sql[160];

	if (got_usr1)
	{
		got_usr1 = 0;
		c->timeouts_until = mono_ns() + (int64_t) opt.timeout_window_ms * 1000000;
	}
	if (mono_ns() < c->timeouts_until)
	{
		snprintf(sql, sizeof(sql),
				 "SET statement_timeout = '%dms'; SET lock_timeout = '%dms'",
				 1 + (int) (rng_unit() * 5), 1 + (int) (rng_unit() * 3));
		PQclear(PQexec(c->conn, sql));
		c->timeouts_set = true;
	}
	else if (c->timeouts_set)
	{
		PQclear(PQexec(c->conn,
					   "SET statement_timeout = '10s'; SET lock_timeout = '10s'"));
		c->timeouts_set = false;
	}
}

static const char *
holder_param(Client *c)
{
	return opt.session_identity ? NULL : c->holder;
}

/*
 * try_acquire_leader (or, for op "wait", wait_for_leadership with a timeout
 * of 2 x ttl) and, if granted, the audit row in the same transaction.  op
 * is "acquire", "wait" or "renew" (what the client believes).
 */
static void
op_acquire(Client *c, const char *op)
{
	long long	seq = ++c->seq;
	int64_t		t0 = mono_ns();
	char		ttl[32];
	char		timeout[32];
	char		client[16];
	char		seqs[32];
	const char *p[4];
	PGresult   *res;
	Outcome		o;
	long long	term = -1;
	bool		wait = strcmp(op, "wait") == 0;

	snprintf(ttl, sizeof(ttl), "%d ms", opt.ttl_ms);
	snprintf(timeout, sizeof(timeout), "%d ms", 2 * opt.ttl_ms);
	snprintf(client, sizeof(client), "%d", c->id);
	snprintf(seqs, sizeof(seqs), "%lld", seq);

	if (!run(c, &o, NULL, "BEGIN", 0, NULL))
		goto done;
	p[0] = c->name;
	p[1] = ttl;
	p[2] = holder_param(c);
	p[3] = timeout;
	if (!run(c, &o, &res, wait ?
			 "SELECT wait_for_leadership($1, $2::interval, $4::interval, $3)" :
			 "SELECT try_acquire_leader($1, $2::interval, $3)",
			 wait ? 4 : 3, p))
		goto done;
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
	{
		PQclear(res);
		PQclear(PQexec(c->conn, "ROLLBACK"));
		set_outcome(&o, "fail", -1, NULL);
		goto done;
	}
	PQclear(res);

	p[0] = c->name;
	p[1] = op;
	p[2] = client;
	p[3] = seqs;
	if (!run(c, &o, &res,
			 "INSERT INTO stress.audit (name, term, holder, kind, client, seq,"
			 " acquired_at, renewed_at, expires_at)"
			 " SELECT name, term, holder, $2, $3, $4,"
			 " acquired_at, renewed_at, expires_at"
			 " FROM leader_election.leases WHERE name = $1"
			 " RETURNING term, holder", 4, p))
		goto done;
	if (PQntuples(res) != 1)
		die("client %d: no lease row after a grant of %s", c->id, c->name);
	term = atoll(PQgetvalue(res, 0, 0));
	/* In session-identity mode this is how we learn our holder string. */
	snprintf(c->holder, sizeof(c->holder), "%s", PQgetvalue(res, 0, 1));
	PQclear(res);
	if (commit(c, &o, term))
	{
		c->leader = true;
		c->term = term;
	}
done:
	if (strcmp(o.result, "ok") != 0)
		c->leader = false;
	log_op(c, op, seq, t0, mono_ns(), &o);
}

/* The protected write: the next position of the name's effect counter. */
static const char effect_sql[] =
"WITH p AS (UPDATE stress.effect_pos SET n = n + 1 WHERE name = $1 RETURNING n)"
" INSERT INTO stress.effects (name, pos, term, holder, client, seq)"
" SELECT $1, n, $2, $3, $4, $5 FROM p";

/* The "GC pause" between the leadership check and the write, logged. */
static void
maybe_stall(Client *c)
{
	Outcome		o;
	int64_t		t0;

	if (opt.stall_ms <= 0 || rng_unit() >= opt.stall_prob)
		return;
	t0 = mono_ns();
	sleep_ms(opt.stall_ms);
	set_outcome(&o, "ok", c->term, NULL);
	log_op(c, "stall", ++c->seq, t0, mono_ns(), &o);
}

static void
op_effect(Client *c)
{
	long long	seq = ++c->seq;
	int64_t		t0 = mono_ns();
	char		term[32];
	char		client[16];
	char		seqs[32];
	const char *p[5];
	PGresult   *res;
	Outcome		o;

	snprintf(term, sizeof(term), "%lld", c->term);
	snprintf(client, sizeof(client), "%d", c->id);
	snprintf(seqs, sizeof(seqs), "%lld", seq);

	if (opt.unfenced)
	{
		/* Negative control: check, then act in another transaction. */
		p[0] = c->name;
		p[1] = holder_param(c);
		if (!run(c, &o, &res, "SELECT am_leader($1, $2)", 2, p))
			goto done;
		if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		{
			PQclear(res);
			set_outcome(&o, "fail", c->term, NULL);	/* not leader */
			goto done;
		}
		PQclear(res);
		maybe_stall(c);
		if (!run(c, &o, NULL, "BEGIN", 0, NULL))
			goto done;
	}
	else
	{
		if (!run(c, &o, NULL, "BEGIN", 0, NULL))
			goto done;
		p[0] = c->name;
		p[1] = term;
		p[2] = holder_param(c);
		if (!run(c, &o, NULL, "SELECT assert_leader($1, $2::bigint, $3)", 3, p))
			goto done;
		/* A pause with the fence held only delays a takeover. */
		maybe_stall(c);
	}
	p[0] = c->name;
	p[1] = term;
	p[2] = c->holder;
	p[3] = client;
	p[4] = seqs;
	if (!run(c, &o, NULL, effect_sql, 5, p))
		goto done;
	commit(c, &o, c->term);
done:
	if (o.term < 0)
		o.term = c->term;
	if (strcmp(o.result, "ok") != 0)
		c->leader = false;
	log_op(c, "effect", seq, t0, mono_ns(), &o);
}

static void
op_release(Client *c)
{
	long long	seq = ++c->seq;
	int64_t		t0 = mono_ns();
	char		term[32];
	char		client[16];
	char		seqs[32];
	const char *p[5];
	PGresult   *res;
	Outcome		o;

	snprintf(term, sizeof(term), "%lld", c->term);
	snprintf(client, sizeof(client), "%d", c->id);
	snprintf(seqs, sizeof(seqs), "%lld", seq);
	c->leader = false;

	if (!run(c, &o, NULL, "BEGIN", 0, NULL))
		goto done;
	p[0] = c->name;
	p[1] = holder_param(c);
	if (!run(c, &o, &res, "SELECT release_leader($1, $2)", 2, p))
		goto done;
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
	{
		PQclear(res);
		PQclear(PQexec(c->conn, "ROLLBACK"));
		set_outcome(&o, "fail", c->term, NULL);
		goto done;
	}
	PQclear(res);
	/* The release time on the server clock, for the overlap checker. */
	p[0] = c->name;
	p[1] = term;
	p[2] = c->holder;
	p[3] = client;
	p[4] = seqs;
	if (!run(c, &o, NULL,
			 "INSERT INTO stress.audit (name, term, holder, kind, client, seq)"
			 " VALUES ($1, $2, $3, 'release', $4, $5)", 5, p))
		goto done;
	commit(c, &o, c->term);
done:
	if (o.term < 0)
		o.term = c->term;
	log_op(c, "release", seq, t0, mono_ns(), &o);
}

static void
run_client(int id, int64_t deadline, int logfd)
{
	Client		c = {0};
	struct sigaction sa = {0};

	/* Die with the driver, whatever kills it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);

	c.id = id;
	c.logfd = logfd;
	c.term = -1;
	rng_state = ((uint64_t) opt.seed << 16) ^ (uint64_t) (id + 1) * UINT64_C(0x9E3779B97F4A7C15);
	if (rng_state == 0)
		rng_state = 1;
	snprintf(c.name, sizeof(c.name), "%s%d", opt.prefix, id % opt.names);
	if (!opt.session_identity)
		snprintf(c.holder, sizeof(c.holder), "c%d", id);

	while (mono_ns() < deadline &&
		   (opt.stop_file == NULL || access(opt.stop_file, F_OK) != 0))
	{
		/* --reconnect-prob: a new session may reach another primary. */
		if (c.conn != NULL && opt.reconnect_prob > 0 &&
			rng_unit() < opt.reconnect_prob)
			drop_session(&c);
		if (c.conn == NULL || PQstatus(c.conn) != CONNECTION_OK)
		{
			connect_client(&c);
			if (c.conn == NULL)
			{
				sleep_ms(jitter(200));
				continue;
			}
		}
		apply_timeouts(&c);

		if (!c.leader)
		{
			/* The first --waiters clients block in wait_for_leadership. */
			op_acquire(&c, id < opt.waiters ? "wait" : "acquire");
			if (!c.leader)
				sleep_ms(jitter(opt.retry_ms));
			continue;
		}
		op_effect(&c);
		if (!c.leader)
			continue;
		op_acquire(&c, "renew");
		if (c.leader && rng_unit() < opt.release_prob)
		{
			op_release(&c);
			/* Give the others a chance before trying again. */
			sleep_ms(jitter(opt.retry_ms * 2));
			continue;
		}
		sleep_ms(jitter(opt.ttl_ms / 4));
	}
	if (c.conn)
		PQfinish(c.conn);
	_exit(0);
}

/* ---- the driver: setup, fork, wait, dump ---- */

static PGconn *
connect_retry(int seconds)
{
	int64_t		until = mono_ns() + (int64_t) seconds * 1000000000;
	PGconn	   *conn;

	for (;;)
	{
		conn = PQconnectdb(opt.conninfo);
		if (PQstatus(conn) == CONNECTION_OK)
			return conn;
		if (mono_ns() > until)
			die("cannot connect: %s", PQerrorMessage(conn));
		PQfinish(conn);
		sleep_ms(200);
	}
}

static void
exec_or_die(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
		PQresultStatus(res) != PGRES_TUPLES_OK)
		die("%s\nfailed: %s", sql, PQerrorMessage(conn));
	PQclear(res);
}

static void
setup(void)
{
	PGconn	   *conn = connect_retry(30);
	char		sql[512];

	exec_or_die(conn,
				"SET client_min_messages = warning;"
				"CREATE SCHEMA IF NOT EXISTS stress;"
				"CREATE TABLE IF NOT EXISTS stress.audit ("
				" id bigserial PRIMARY KEY, name text NOT NULL, term bigint,"
				" holder text, kind text NOT NULL, client int NOT NULL,"
				" seq bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),"
				" acquired_at timestamptz, renewed_at timestamptz,"
				" expires_at timestamptz, backend_pid int DEFAULT pg_backend_pid());"
				"CREATE TABLE IF NOT EXISTS stress.effect_pos ("
				" name text PRIMARY KEY, n bigint NOT NULL);"
				"CREATE TABLE IF NOT EXISTS stress.effects ("
				" name text NOT NULL, pos bigint NOT NULL, term bigint NOT NULL,"
				" holder text NOT NULL, client int NOT NULL, seq bigint NOT NULL,"
				" at timestamptz NOT NULL DEFAULT clock_timestamp(),"
				" PRIMARY KEY (name, pos))");
	snprintf(sql, sizeof(sql),
			 "INSERT INTO stress.effect_pos"
			 " SELECT '%s' || i, 0 FROM generate_series(0, %d) i"
			 " ON CONFLICT DO NOTHING", opt.prefix, opt.names - 1);
	exec_or_die(conn, sql);
	PQfinish(conn);
}

/* COPY (query) TO STDOUT into dir/file. */
static void
dump(PGconn *conn, const char *file, const char *query)
{
	char		path[1024];
	char		sql[2048];
	FILE	   *f;
	PGresult   *res;
	char	   *buf;
	int			n;

	snprintf(path, sizeof(path), "%s/%s", opt.out, file);
	f = fopen(path, "w");
	if (!f)
		die("cannot write %s: %s", path, strerror(errno));
	snprintf(sql, sizeof(sql), "COPY (%s) TO STDOUT", query);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COPY_OUT)
		die("%s\nfailed: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	while ((n = PQgetCopyData(conn, &buf, 0)) > 0)
	{
		fwrite(buf, 1, n, f);
		PQfreemem(buf);
	}
	if (n == -2)
		die("COPY failed: %s", PQerrorMessage(conn));
	PQclear(PQgetResult(conn));
	fclose(f);
}

#define EPOCH_US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"

static void
dump_all(void)
{
	PGconn	   *conn = connect_retry(60);
	char		q[1024];
	PGresult   *res;

	/* The owner of the names can read history through its RLS policy. */
	snprintf(q, sizeof(q),
			 "SELECT name, term, holder, " EPOCH_US("acquired_at") ", "
			 EPOCH_US("ended_at") ", coalesce(end_reason, '-'), session_bound"
			 " FROM leader_election.history WHERE starts_with(name, '%s')"
			 " ORDER BY name, term", opt.prefix);
	dump(conn, "history.tsv", q);
	snprintf(q, sizeof(q),
			 "SELECT id, name, term, holder, kind, client, seq, " EPOCH_US("at") ", "
			 EPOCH_US("acquired_at") ", " EPOCH_US("renewed_at") ", "
			 EPOCH_US("expires_at") " FROM stress.audit"
			 " WHERE starts_with(name, '%s') ORDER BY id", opt.prefix);
	dump(conn, "audit.tsv", q);
	snprintf(q, sizeof(q),
			 "SELECT name, pos, term, holder, client, seq, " EPOCH_US("at")
			 " FROM stress.effects WHERE starts_with(name, '%s')"
			 " ORDER BY name, pos", opt.prefix);
	dump(conn, "effects.tsv", q);

	/* How many terms the history may keep: the checker needs all of them. */
	res = PQexec(conn, "SHOW leader_election.history_max_terms");
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		fprintf(stderr, "le_stress: history_max_terms = %s\n", PQgetvalue(res, 0, 0));
	PQclear(res);
	PQfinish(conn);
}

static void
write_params(void)
{
	char		path[1024];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/params", opt.out);
	f = fopen(path, "w");
	if (!f)
		die("cannot write %s: %s", path, strerror(errno));
	fprintf(f, "clients %d\nnames %d\nseconds %d\nttl_ms %d\nretry_ms %d\n"
			"stall_ms %d\nstall_prob %g\nrelease_prob %g\ntimeout_window_ms %d\n"
			"seed %u\nunfenced %d\nsession_identity %d\nprefix %s\n"
			"waiters %d\nstart_ns %lld\n",
			opt.clients, opt.names, opt.seconds, opt.ttl_ms, opt.retry_ms,
			opt.stall_ms, opt.stall_prob, opt.release_prob,
			opt.timeout_window_ms, opt.seed, opt.unfenced, opt.session_identity,
			opt.prefix, opt.waiters, (long long) mono_ns());
	fclose(f);
}

static volatile sig_atomic_t got_term = 0;

static void
on_term(int signo)
{
	(void) signo;
	got_term = 1;
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: le_stress --conninfo STR --out DIR [options]\n"
			"  --clients N (8)  --names N (1)  --seconds N (60)  --ttl-ms N (1000)\n"
			"  --retry-ms N (250)  --release-prob P (0.05)  --seed N (1)\n"
			"  --stall-prob P (0)  --stall-ms N (0)  --timeout-window-ms N (2000)\n"
			"  --waiters N (0: clients that wait_for_leadership instead of trying)\n"
			"  --prefix STR (stress_)  --unfenced  --session-identity\n"
			"  --client-conninfo STR (repeatable)  --reconnect-prob P (0)\n"
			"  --stop-file PATH (clients end early once it exists)\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"conninfo", required_argument, NULL, 'c'},
		{"out", required_argument, NULL, 'o'},
		{"clients", required_argument, NULL, 'n'},
		{"names", required_argument, NULL, 'N'},
		{"seconds", required_argument, NULL, 's'},
		{"ttl-ms", required_argument, NULL, 't'},
		{"retry-ms", required_argument, NULL, 'r'},
		{"release-prob", required_argument, NULL, 'R'},
		{"seed", required_argument, NULL, 'S'},
		{"stall-prob", required_argument, NULL, 'p'},
		{"stall-ms", required_argument, NULL, 'm'},
		{"timeout-window-ms", required_argument, NULL, 'w'},
		{"waiters", required_argument, NULL, 'W'},
		{"prefix", required_argument, NULL, 'P'},
		{"unfenced", no_argument, NULL, 'u'},
		{"session-identity", no_argument, NULL, 'i'},
		{"client-conninfo", required_argument, NULL, 'C'},
		{"reconnect-prob", required_argument, NULL, 'X'},
		{"stop-file", required_argument, NULL, 'F'},
		{NULL, 0, NULL, 0}
	};
	pid_t		pids[MAX_CLIENTS];
	int			ch;
	int			logfd;
	int			alive;
	int64_t		deadline;
	int64_t		hard_deadline;
	char		path[1024];
	char		tmp[1024];
	FILE	   *f;
	struct sigaction sa = {0};

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1)
	{
		switch (ch)
		{
			case 'c': opt.conninfo = optarg; break;
			case 'o': opt.out = optarg; break;
			case 'n': opt.clients = atoi(optarg); break;
			case 'N': opt.names = atoi(optarg); break;
			case 's': opt.seconds = atoi(optarg); break;
			case 't': opt.ttl_ms = atoi(optarg); break;
			case 'r': opt.retry_ms = atoi(optarg); break;
			case 'R': opt.release_prob = atof(optarg); break;
			case 'S': opt.seed = (unsigned) strtoul(optarg, NULL, 10); break;
			case 'p': opt.stall_prob = atof(optarg); break;
			case 'm': opt.stall_ms = atoi(optarg); break;
			case 'w': opt.timeout_window_ms = atoi(optarg); break;
			case 'W': opt.waiters = atoi(optarg); break;
			case 'P': opt.prefix = optarg; break;
			case 'u': opt.unfenced = true; break;
			case 'i': opt.session_identity = true; break;
			case 'C':
				if (opt.n_client_conninfo == 8)
					usage();
				opt.client_conninfo[opt.n_client_conninfo++] = optarg;
				break;
			case 'X': opt.reconnect_prob = atof(optarg); break;
			case 'F': opt.stop_file = optarg; break;
			default: usage();
		}
	}
	if (opt.clients < 1 || opt.clients > MAX_CLIENTS || opt.names < 1 ||
		opt.seconds < 1 || opt.ttl_ms < 100 || opt.retry_ms < 1 ||
		strlen(opt.prefix) > 64)
		usage();

	setup();
	write_params();

	snprintf(path, sizeof(path), "%s/client.log", opt.out);
	logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
	if (logfd < 0)
		die("cannot open %s: %s", path, strerror(errno));

	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	deadline = mono_ns() + (int64_t) opt.seconds * 1000000000;
	for (int i = 0; i < opt.clients; i++)
	{
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork: %s", strerror(errno));
		if (pids[i] == 0)
			run_client(i, deadline, logfd);
	}

	/* "id pid" per line, renamed into place so a reader sees all or none. */
	snprintf(path, sizeof(path), "%s/pids", opt.out);
	snprintf(tmp, sizeof(tmp), "%s/pids.tmp", opt.out);
	f = fopen(tmp, "w");
	if (!f)
		die("cannot write %s: %s", tmp, strerror(errno));
	for (int i = 0; i < opt.clients; i++)
		fprintf(f, "%d %d\n", i, (int) pids[i]);
	fclose(f);
	if (rename(tmp, path) != 0)
		die("rename %s: %s", tmp, strerror(errno));

	/*
	 * Wait for the clients.  One that is still running long after the
	 * deadline (stopped and never continued, or stuck) is killed; its last
	 * operation then has no line in the log, which the checker tolerates.
	 */
	hard_deadline = deadline + (int64_t) 40 * 1000000000;
	alive = opt.clients;
	while (alive > 0)
	{
		pid_t		pid = waitpid(-1, NULL, WNOHANG);

		if (pid > 0)
		{
			alive--;
			continue;
		}
		if (got_term || mono_ns() > hard_deadline)
		{
			for (int i = 0; i < opt.clients; i++)
			{
				kill(pids[i], SIGCONT);
				kill(pids[i], SIGKILL);
			}
			if (got_term)
				exit(1);
			fprintf(stderr, "le_stress: killed clients still running after the deadline\n");
			hard_deadline = INT64_MAX;
		}
		sleep_ms(50);
	}
	close(logfd);

	dump_all();
	printf("le_stress: done, history in %s\n", opt.out);
	return 0;
}
