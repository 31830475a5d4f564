/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The background task runner: a launcher and one worker per task that
 *	  CALLs a registered procedure only while it holds the task's lease.
 *
 * THE DESIGN
 *
 * Registration (register_task and friends, below) only writes a row of
 * leader_election.tasks; it works with or without preloading.  With
 * shared_preload_libraries = 'leader_election' the postmaster starts the
 * launcher once recovery has finished (so a hot standby runs nothing and a
 * promoted standby starts by itself).  The launcher connects to the
 * database named by leader_election.database as the bootstrap superuser
 * and, about once a second:
 *	  - reads the enabled tasks and checks each one's owner and procedure
 *		(le_task_problem); a task that fails a check is disabled with a
 *		'skipped' row in task_runs and a log line;
 *	  - starts a dynamic worker per enabled task, up to max_task_workers,
 *		and stops the workers of tasks that were disabled or unregistered.
 * In between, as often as the shortest ttl needs, it renews the leases of
 * tasks that are in the middle of a run (see "long runs").
 *
 * A task worker connects as the task's owner (never switches to it), so
 * the procedure runs with exactly that role's rights and session_user.
 * Its session's leader_election.holder_id is the runner identity, so
 * am_leader() and assert_leader() inside the procedure answer for the
 * runner.  It loops: in one short transaction it campaigns for the lease
 * (le_try_acquire: acquires, or renews its own); when it holds the lease
 * and the task is due it records a 'running' row in that same transaction
 * and commits, so a run never starts without a lease that was valid an
 * instant before.  It then CALLs the procedure non-atomically (it may
 * COMMIT) and records the outcome.  Runs are start-to-start run_every
 * apart; an overrun delays the next run and never overlaps it.
 *
 * Long runs.  While the worker is inside CALL it cannot renew, so the
 * launcher renews for it, under the same runner identity, every ttl/3.
 * The worker publishes (term, confirmed expiry) in its shared-memory slot.
 * If a renewal finds the lease held by someone else or in another term, or
 * no renewal has succeeded and the lease is within ttl/4 of expiring, the
 * launcher cancels the run (SIGINT: a query cancel) and the worker records
 * it 'cancelled' with the reason.  Afterwards the worker campaigns again.
 *
 * Shutdown.  SIGTERM (server shutdown, pg_terminate_backend, the launcher
 * stopping a task) cancels a run in progress, records it, releases the
 * lease and exits; the launcher starts a new worker if the task is still
 * enabled.  A worker that dies otherwise leaves a 'running' row, which the
 * next worker of the task closes as 'failed'.
 *
 * The runner identity is leader_election.task_holder_id, or by default
 * 'task-runner:<system identifier>:<timeline>'.  The timeline makes a
 * promoted standby a different holder from its old primary: it waits out
 * the old primary's leases instead of silently continuing their terms.
 *
 * LOCKING: each shared slot has a spinlock; the launcher owns in_use and
 * task_id, the worker owns pid and running/term, both write
 * confirmed_expires (under the spinlock, for the same term only).
 *
 * This file never writes lease rows itself: it calls le_try_acquire(),
 * le_store_read() and release_leader() like any other caller.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/pquery.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/portal.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

PG_FUNCTION_INFO_V1(register_task);
PG_FUNCTION_INFO_V1(unregister_task);
PG_FUNCTION_INFO_V1(enable_task);
PG_FUNCTION_INFO_V1(disable_task);

/* lease.c's SQL function; called directly to release on shutdown. */
extern Datum release_leader(PG_FUNCTION_ARGS);

#define LE_LAUNCHER_SCAN_MS		1000	/* how often tasks are re-read */
#define LE_CAMPAIGN_MS			250 /* how often a non-leader retries */
#define LE_LOCK_TIMEOUT			"500ms" /* runner's own lease writes */
#define LE_TASK_MIN_USECS		USECS_PER_SEC
#define LE_TASK_MAX_TTL_USECS	USECS_PER_DAY
#define LE_TASK_MAX_EVERY_USECS	(7 * USECS_PER_DAY)
#define LE_REASON_LEN			160

/* ---- settings ---- */

char	   *le_task_database = NULL;
int			le_max_task_workers = 4;
char	   *le_task_holder_id = NULL;
bool		le_allow_superuser_tasks = false;
int			le_task_runs_max = 1000;

/* Set in the postmaster when loaded from shared_preload_libraries. */
static bool le_task_runner_preloaded = false;

/* ---- shared memory ---- */

typedef struct LeTaskSlot
{
	slock_t		mutex;
	bool		in_use;			/* launcher: slot assigned to task_id */
	int64		task_id;
	pid_t		pid;			/* worker: its pid once connected */
	bool		running;		/* worker: inside CALL */
	int64		term;			/* term of the run */
	int64		ttl_usecs;
	TimestampTz confirmed_expires;	/* last expiry known to be ours */
	pg_atomic_uint64 expires_atomic;	/* the same, for the worker's watchdog */
	bool		cancel_requested;	/* launcher: run must stop */
	char		cancel_reason[LE_REASON_LEN];
} LeTaskSlot;

typedef struct LeTaskShared
{
	slock_t		mutex;
	PGPROC	   *launcher;		/* to wake it when a run starts */
	char		identity[LE_MAX_HOLDER_BYTES + 1];
	int			nslots;
	LeTaskSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} LeTaskShared;

static LeTaskShared *le_tasks = NULL;

Size
le_task_shmem_size(void)
{
	return add_size(offsetof(LeTaskShared, slots),
					mul_size(sizeof(LeTaskSlot), le_max_task_workers));
}

void
le_task_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_tasks = ShmemInitStruct("leader_election task runner",
							   le_task_shmem_size(), &found);
	if (!found)
	{
		memset(le_tasks, 0, le_task_shmem_size());
		SpinLockInit(&le_tasks->mutex);
		le_tasks->nslots = le_max_task_workers;
		for (int i = 0; i < le_tasks->nslots; i++)
		{
			SpinLockInit(&le_tasks->slots[i].mutex);
			pg_atomic_init_u64(&le_tasks->slots[i].expires_atomic, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ---- settings ---- */

static bool
le_check_task_holder_id(char **newval, void **extra, GucSource source)
{
	const char *problem;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;			/* derived at run time */
	problem = le_label_problem(*newval, LE_MAX_HOLDER_BYTES);
	if (problem == NULL &&
		strncmp(*newval, LE_SESSION_PREFIX, strlen(LE_SESSION_PREFIX)) == 0)
		problem = "must not start with \"" LE_SESSION_PREFIX "\"";
	if (problem != NULL)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("leader_election.task_holder_id %s", problem);
		return false;
	}
	return true;
}

void
le_task_define_settings(void)
{
	DefineCustomStringVariable("leader_election.database",
							   "Database whose leader_election.tasks the task runner runs.",
							   NULL,
							   &le_task_database,
							   "postgres",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("leader_election.max_task_workers",
							"Most tasks the task runner runs at once.",
							"Each running task uses one background worker process.",
							&le_max_task_workers,
							4, 0, 64,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("leader_election.task_holder_id",
							   "Holder identity under which the task runner takes leases.",
							   "Empty means 'task-runner:<system identifier>:<timeline>'.",
							   &le_task_holder_id,
							   "",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   le_check_task_holder_id, NULL, NULL);

	DefineCustomBoolVariable("leader_election.allow_superuser_tasks",
							 "Whether tasks registered by superusers may run.",
							 NULL,
							 &le_allow_superuser_tasks,
							 false,
							 PGC_SIGHUP,
							 GUC_SUPERUSER_ONLY,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("leader_election.task_runs_max",
							"Rows kept per task in leader_election.task_runs.",
							NULL,
							&le_task_runs_max,
							1000, 1, INT_MAX,
							PGC_SIGHUP,
							GUC_SUPERUSER_ONLY,
							NULL, NULL, NULL);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
le_task_runner_register(void)
{
	BackgroundWorker worker;

	le_task_runner_preloaded = true;
	if (le_max_task_workers == 0)
		return;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "leader_election");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "le_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "leader_election launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "leader_election launcher");
	RegisterBackgroundWorker(&worker);
}

/* ---- helpers shared by the launcher, the workers and the SQL functions ---- */

/* What the launcher tells a worker it starts. */
typedef struct LeWorkerArgs
{
	Oid			database;
	Oid			owner;
	int64		task_id;
} LeWorkerArgs;

/* One task as read from the table, joined with what the checks need. */
typedef struct LeTask
{
	int64		id;
	char	   *name;
	Oid			owner;
	Oid			procedure;
	int64		ttl_usecs;
	int64		every_usecs;
	bool		enabled;
	/* checks */
	bool		role_exists;
	char	   *role_name;
	bool		can_login;
	bool		superuser;
	bool		can_connect;
	bool		proc_exists;
	char	   *proc_schema;
	char	   *proc_name;
	char	   *proc_text;		/* regprocedure output */
	char		prokind;
	int			nargs;
	Oid			arg0;
	bool		only_in_args;
	bool		can_execute;
} LeTask;

/*
 * Everything about a task and its owner and procedure, in one query.  The
 * privilege functions are only called for objects that exist.  Runs under
 * any role: pg_roles and pg_proc are public, and the tasks row is visible
 * to its owner (and to the launcher's superuser).
 */
static const char *le_task_query =
"SELECT t.id, t.name, t.owner, t.procedure::pg_catalog.oid,"
"  (pg_catalog.date_part('epoch', t.ttl) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8,"
"  (pg_catalog.date_part('epoch', t.run_every) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8,"
"  t.enabled,"
"  r.oid IS NOT NULL, r.rolname::pg_catalog.text, r.rolcanlogin, r.rolsuper,"
"  CASE WHEN r.oid IS NOT NULL THEN pg_catalog.has_database_privilege(t.owner,"
"       pg_catalog.current_database(), 'CONNECT') END,"
"  p.oid IS NOT NULL, n.nspname::pg_catalog.text, p.proname::pg_catalog.text,"
"  t.procedure::pg_catalog.text, p.prokind::pg_catalog.text, p.pronargs::pg_catalog.int4,"
"  CASE WHEN p.pronargs OPERATOR(pg_catalog.>) 0 THEN p.proargtypes[0] END,"
"  p.proallargtypes IS NULL,"
"  CASE WHEN r.oid IS NOT NULL AND p.oid IS NOT NULL THEN"
"       pg_catalog.has_schema_privilege(t.owner, p.pronamespace, 'USAGE') AND"
"       pg_catalog.has_function_privilege(t.owner, p.oid, 'EXECUTE') END"
" FROM leader_election.tasks AS t"
" LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) t.owner"
" LEFT JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) t.procedure::pg_catalog.oid"
" LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace";

static char *
le_spi_text(HeapTuple tup, TupleDesc desc, int col)
{
	char	   *s = SPI_getvalue(tup, desc, col);

	return s;					/* NULL for SQL NULL */
}

static bool
le_spi_bool(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

static int64
le_spi_int64(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

static Oid
le_spi_oid(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? InvalidOid : DatumGetObjectId(d);
}

/* Fill *t from a row of le_task_query; strings in the current context. */
static void
le_task_from_tuple(HeapTuple tup, TupleDesc desc, LeTask *t)
{
	char	   *kind;
	bool		isnull;

	memset(t, 0, sizeof(LeTask));
	t->id = le_spi_int64(tup, desc, 1);
	t->name = le_spi_text(tup, desc, 2);
	t->owner = le_spi_oid(tup, desc, 3);
	t->procedure = le_spi_oid(tup, desc, 4);
	t->ttl_usecs = le_spi_int64(tup, desc, 5);
	t->every_usecs = le_spi_int64(tup, desc, 6);
	t->enabled = le_spi_bool(tup, desc, 7);
	t->role_exists = le_spi_bool(tup, desc, 8);
	t->role_name = le_spi_text(tup, desc, 9);
	t->can_login = le_spi_bool(tup, desc, 10);
	t->superuser = le_spi_bool(tup, desc, 11);
	t->can_connect = le_spi_bool(tup, desc, 12);
	t->proc_exists = le_spi_bool(tup, desc, 13);
	t->proc_schema = le_spi_text(tup, desc, 14);
	t->proc_name = le_spi_text(tup, desc, 15);
	t->proc_text = le_spi_text(tup, desc, 16);
	kind = le_spi_text(tup, desc, 17);
	t->prokind = kind ? kind[0] : '\0';
	t->nargs = DatumGetInt32(SPI_getbinval(tup, desc, 18, &isnull));
	if (isnull)
		t->nargs = -1;
	t->arg0 = le_spi_oid(tup, desc, 19);
	t->only_in_args = le_spi_bool(tup, desc, 20);
	t->can_execute = le_spi_bool(tup, desc, 21);
}

/*
 * Why the task cannot run now, or NULL.  The same checks at registration,
 * before the launcher starts a worker, and before every run.
 */
static char *
le_task_problem(const LeTask *t)
{
	if (!t->role_exists)
		return psprintf("the owner role (OID %u) no longer exists", t->owner);
	if (!t->can_login)
		return psprintf("role \"%s\" cannot log in (task workers connect as the task's owner, which needs LOGIN)",
						t->role_name);
	if (t->superuser && !le_allow_superuser_tasks)
		return psprintf("role \"%s\" is a superuser and leader_election.allow_superuser_tasks is off",
						t->role_name);
	if (!t->can_connect)
		return psprintf("role \"%s\" lacks CONNECT on this database", t->role_name);
	if (!t->proc_exists)
		return psprintf("procedure %s no longer exists", t->proc_text);
	if (t->prokind != 'p')
		return psprintf("%s is not a procedure", t->proc_text);
	if (!t->only_in_args ||
		!(t->nargs == 0 || (t->nargs == 1 && t->arg0 == INT8OID)))
		return psprintf("procedure %s must take no arguments or a single bigint (the term)",
						t->proc_text);
	if (!t->can_execute)
		return psprintf("role \"%s\" lacks EXECUTE on procedure %s (or USAGE on its schema)",
						t->role_name, t->proc_text);
	return NULL;
}

/*
 * Load one task (by id) into *t (strings in into), in the caller's SPI
 * connection.  False if it is not there (or not visible to the current role).
 */
static bool
le_load_task(int64 task_id, LeTask *t, MemoryContext into)
{
	MemoryContext old;
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	char	   *sql = psprintf("%s WHERE t.id OPERATOR(pg_catalog.=) $1", le_task_query);
	int			rc;

	values[0] = Int64GetDatum(task_id);
	rc = SPI_execute_with_args(sql, 1, types, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading leader_election.tasks failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	old = MemoryContextSwitchTo(into);
	le_task_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, t);
	MemoryContextSwitchTo(old);
	return true;
}

/* Owner of leader_election.tasks: internal writes run as that role. */
static Oid
le_tasks_table_owner(void)
{
	int			rc;

	rc = SPI_execute("SELECT c.relowner FROM pg_catalog.pg_class AS c"
					 " WHERE c.oid OPERATOR(pg_catalog.=) 'leader_election.tasks'::pg_catalog.regclass",
					 true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "cannot find leader_election.tasks");
	return le_spi_oid(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/*
 * Run a statement with the task table owner's rights: ordinary roles have
 * no write access to the task tables (the pg_cron pattern).  Parameters
 * only, never concatenated values.
 */
static int
le_exec_as_owner(const char *sql, int nargs, Oid *types, Datum *values,
				 const char *nulls, bool read_only, long count)
{
	Oid			save_userid;
	int			save_sec;
	volatile int rc = 0;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(le_tasks_table_owner(),
						   save_sec | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, count);
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec);
	}
	PG_END_TRY();
	if (rc < 0)
		elog(ERROR, "task runner statement failed: %s", SPI_result_code_string(rc));
	return rc;
}

/*
 * Disable a task the runner cannot run: a 'skipped' run with the reason,
 * the task disabled with the same reason, and a log line.
 */
static void
le_disable_task_for(const LeTask *t, const char *reason)
{
	Oid			types[4] = {INT8OID, TEXTOID, OIDOID, TEXTOID};
	Datum		values[4];

	values[0] = Int64GetDatum(t->id);
	values[1] = CStringGetTextDatum(t->name);
	values[2] = ObjectIdGetDatum(t->owner);
	values[3] = CStringGetTextDatum(reason);
	le_exec_as_owner("INSERT INTO leader_election.task_runs"
					 " (task_id, task_name, owner, started_at, finished_at, status, error, pid)"
					 " VALUES ($1, $2, $3, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),"
					 " 'skipped', $4, pg_catalog.pg_backend_pid())",
					 4, types, values, NULL, false, 0);
	le_exec_as_owner("UPDATE leader_election.tasks SET enabled = false, disabled_reason = $4,"
					 " last_status = 'skipped'"
					 " WHERE id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2"
					 " AND owner OPERATOR(pg_catalog.=) $3",
					 4, types, values, NULL, false, 0);
	ereport(LOG,
			(errmsg("leader_election: task \"%s\" disabled: %s", t->name, reason),
			 errhint("Fix the cause, then call leader_election.enable_task('%s').", t->name)));
}

/* ---- the runner identity ---- */

static void
le_compute_identity(char *buf)
{
	if (le_task_holder_id != NULL && le_task_holder_id[0] != '\0')
		strlcpy(buf, le_task_holder_id, LE_MAX_HOLDER_BYTES + 1);
	else
		snprintf(buf, LE_MAX_HOLDER_BYTES + 1, "task-runner:" UINT64_FORMAT ":%u",
				 GetSystemIdentifier(), (unsigned) le_current_timeline());
}

/* ---- the task worker ---- */

static volatile sig_atomic_t le_worker_shutdown = false;
static volatile sig_atomic_t le_worker_in_run = false;

/* SIGTERM: stop after cancelling a run in progress. */
static void
le_worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	le_worker_shutdown = true;
	if (le_worker_in_run)
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* SIGINT from the launcher: cancel the run, if one is in progress. */
static void
le_worker_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (le_worker_in_run)
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * The worker's own watchdog during a run, in case the launcher cannot
 * renew or cancel (stopped, stuck): a periodic timeout that cancels the
 * run when the lease's last known expiry is within ttl/8.  The launcher's
 * margin (ttl/4) is wider, so normally the launcher acts first.  Runs in a
 * signal handler: it reads only an atomic and sets interrupt flags.
 */
static TimeoutId le_watchdog_timeout;
static LeTaskSlot *le_watchdog_slot = NULL;
static int64 le_watchdog_margin = 0;
static volatile sig_atomic_t le_watchdog_fired = false;

static void
le_watchdog_handler(void)
{
	TimestampTz expires;

	if (!le_worker_in_run || le_watchdog_slot == NULL)
		return;
	expires = (TimestampTz) pg_atomic_read_u64(&le_watchdog_slot->expires_atomic);
	if (GetCurrentTimestamp() >= expires - le_watchdog_margin)
	{
		le_watchdog_fired = true;
		QueryCancelPending = true;
		InterruptPending = true;
		SetLatch(MyLatch);
	}
}

static void
le_watchdog_start(LeTaskSlot *slot, int64 ttl_usecs)
{
	int			every_ms = (int) Max(ttl_usecs / 10000, 10);

	le_watchdog_slot = slot;
	le_watchdog_margin = ttl_usecs / 8;
	le_watchdog_fired = false;
	enable_timeout_every(le_watchdog_timeout,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), every_ms),
						 every_ms);
}

static LeTaskSlot *
le_my_slot(int slotno, int64 task_id)
{
	LeTaskSlot *slot;

	if (le_tasks == NULL || slotno < 0 || slotno >= le_tasks->nslots)
		elog(ERROR, "leader_election task worker started without a valid slot");
	slot = &le_tasks->slots[slotno];
	SpinLockAcquire(&slot->mutex);
	if (!slot->in_use || slot->task_id != task_id)
	{
		SpinLockRelease(&slot->mutex);
		proc_exit(0);			/* the launcher gave the slot away */
	}
	slot->pid = MyProcPid;
	slot->running = false;
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);
	return slot;
}

static void
le_wake_launcher(void)
{
	PGPROC	   *launcher;

	SpinLockAcquire(&le_tasks->mutex);
	launcher = le_tasks->launcher;
	SpinLockRelease(&le_tasks->mutex);
	if (launcher != NULL)
		SetLatch(&launcher->procLatch);
}

static void
le_set_local_lock_timeout(void)
{
	(void) set_config_option("lock_timeout", LE_LOCK_TIMEOUT, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/* Release the runner's lease on name, in a transaction of its own. */
static void
le_worker_release(const char *name, const char *identity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	le_set_local_lock_timeout();
	(void) DirectFunctionCall2(release_leader, CStringGetTextDatum(name),
							   CStringGetTextDatum(identity));
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/* Close the rows of runs a previous worker of this task left open. */
static void
le_close_orphan_runs(int64 task_id)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];

	values[0] = Int64GetDatum(task_id);
	le_exec_as_owner("UPDATE leader_election.task_runs SET status = 'failed',"
					 " finished_at = pg_catalog.clock_timestamp(),"
					 " error = 'the task worker exited during the run'"
					 " WHERE task_id OPERATOR(pg_catalog.=) $1"
					 " AND status OPERATOR(pg_catalog.=) 'running'",
					 1, types, values, NULL, false, 0);
}

/* Insert the 'running' row of a run; returns its id. */
static int64
le_record_start(const LeTask *t, int64 term, const char *identity)
{
	Oid			types[5] = {INT8OID, TEXTOID, OIDOID, INT8OID, TEXTOID};
	Datum		values[5];

	values[0] = Int64GetDatum(t->id);
	values[1] = CStringGetTextDatum(t->name);
	values[2] = ObjectIdGetDatum(t->owner);
	values[3] = Int64GetDatum(term);
	values[4] = CStringGetTextDatum(identity);
	le_exec_as_owner("UPDATE leader_election.tasks SET last_started_at = pg_catalog.clock_timestamp(),"
					 " last_status = 'running' WHERE id OPERATOR(pg_catalog.=) $1",
					 1, types, values, NULL, false, 0);
	le_exec_as_owner("INSERT INTO leader_election.task_runs"
					 " (task_id, task_name, owner, term, holder, pid, started_at, status)"
					 " VALUES ($1, $2, $3, $4, $5, pg_catalog.pg_backend_pid(),"
					 " pg_catalog.clock_timestamp(), 'running') RETURNING id",
					 5, types, values, NULL, false, 0);
	return le_spi_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* Record how a run ended and trim the task's history; own transaction. */
static void
le_record_end(int64 task_id, int64 run_id, const char *status, const char *error)
{
	Oid			types[5] = {INT8OID, INT8OID, TEXTOID, TEXTOID, INT4OID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	values[0] = Int64GetDatum(task_id);
	values[1] = Int64GetDatum(run_id);
	values[2] = CStringGetTextDatum(status);
	if (error != NULL)
		values[3] = CStringGetTextDatum(error);
	else
		nulls[3] = 'n';
	values[4] = Int32GetDatum(le_task_runs_max);
	le_exec_as_owner("UPDATE leader_election.task_runs SET status = $3, error = $4,"
					 " finished_at = pg_catalog.clock_timestamp()"
					 " WHERE id OPERATOR(pg_catalog.=) $2",
					 5, types, values, nulls, false, 0);
	le_exec_as_owner("UPDATE leader_election.tasks SET last_status = $3,"
					 " last_finished_at = pg_catalog.clock_timestamp()"
					 " WHERE id OPERATOR(pg_catalog.=) $1",
					 5, types, values, nulls, false, 0);
	/* Keep the newest task_runs_max rows of this task. */
	le_exec_as_owner("DELETE FROM leader_election.task_runs"
					 " WHERE task_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.<=)"
					 " (SELECT r.id FROM leader_election.task_runs AS r"
					 "   WHERE r.task_id OPERATOR(pg_catalog.=) $1"
					 "   ORDER BY r.id DESC OFFSET $5 LIMIT 1)",
					 5, types, values, nulls, false, 0);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
}

/*
 * CALL the procedure, non-atomically so that it may COMMIT.  Returns NULL
 * on success, else the error (copied into cxt).  The call text is built
 * from the catalog with quoted identifiers; the term is a literal number.
 *
 * A non-atomic CALL needs a portal to hang its memory and snapshot on, as
 * when a client sends CALL.  The worker makes one, outside any transaction
 * so that a COMMIT inside the procedure does not drop it, and keeps it for
 * its whole life; its memory is emptied after every run.
 */
static Portal le_run_portal = NULL;

static ErrorData *
le_call_procedure(const LeTask *t, int64 term, MemoryContext cxt)
{
	StringInfoData sql;
	Portal		portal;
	ErrorData  *edata = NULL;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CALL %s(",
					 quote_qualified_identifier(t->proc_schema, t->proc_name));
	if (t->nargs == 1)
		appendStringInfo(&sql, INT64_FORMAT "::pg_catalog.int8", term);
	appendStringInfoChar(&sql, ')');

	if (le_run_portal == NULL)
	{
		le_run_portal = CreateNewPortal();
		le_run_portal->visible = false;
	}
	portal = le_run_portal;
	ActivePortal = portal;
	PortalContext = portal->portalContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, sql.data);
	PG_TRY();
	{
		SPIExecuteOptions options;
		int			rc;

		SPI_connect_ext(SPI_OPT_NONATOMIC);
		EnsurePortalSnapshotExists();
		memset(&options, 0, sizeof(options));
		options.allow_nonatomic = true;
		rc = SPI_execute_extended(sql.data, &options);
		if (rc < 0)
			elog(ERROR, "CALL failed: %s", SPI_result_code_string(rc));
		SPI_finish();
		if (ActiveSnapshotSet())
			PopActiveSnapshot();
		portal->portalSnapshot = NULL;
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		portal->portalSnapshot = NULL;
	}
	PG_END_TRY();

	MemoryContextSwitchTo(cxt);
	MemoryContextReset(portal->portalContext);
	ActivePortal = NULL;
	PortalContext = NULL;
	pgstat_report_activity(STATE_IDLE, NULL);
	return edata;
}



void
le_task_worker_main(Datum main_arg)
{
	LeWorkerArgs args;
	LeTaskSlot *slot;
	char		identity[LE_MAX_HOLDER_BYTES + 1];
	MemoryContext worker_cxt;
	MemoryContext tick_cxt;
	TimestampTz next_due = 0;
	char	   *lease_name = NULL;
	LeIdentity	who;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, le_worker_sigterm);
	pqsignal(SIGINT, le_worker_sigint);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	slot = le_my_slot(DatumGetInt32(main_arg), args.task_id);
	BackgroundWorkerInitializeConnectionByOid(args.database, args.owner, 0);
	le_watchdog_timeout = RegisterTimeout(USER_TIMEOUT, le_watchdog_handler);

	SpinLockAcquire(&le_tasks->mutex);
	strlcpy(identity, le_tasks->identity, sizeof(identity));
	SpinLockRelease(&le_tasks->mutex);
	/* am_leader()/assert_leader() in the procedure default to the runner. */
	SetConfigOption("leader_election.holder_id", identity, PGC_USERSET, PGC_S_SESSION);
	who.holder = identity;
	who.session_bound = false;

	worker_cxt = AllocSetContextCreate(TopMemoryContext, "leader_election task worker",
									   ALLOCSET_DEFAULT_SIZES);
	tick_cxt = AllocSetContextCreate(worker_cxt, "leader_election task tick",
									 ALLOCSET_DEFAULT_SIZES);

	/* Close what a previous worker of this task left open. */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	le_close_orphan_runs(args.task_id);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();

	while (!le_worker_shutdown)
	{
		LeTask		task;
		LeTask	   *t = &task;
		bool		found;
		bool		leader = false;
		bool		run = false;
		char	   *problem = NULL;
		int64		term = 0;
		int64		run_id = 0;
		TimestampTz expires = 0;
		TimestampTz now;
		TimestampTz retry_at;
		long		sleep_ms;

		MemoryContextReset(tick_cxt);
		MemoryContextSwitchTo(tick_cxt);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* One short transaction: the task, the checks, the campaign. */
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		le_set_local_lock_timeout();
		found = le_load_task(args.task_id, t, tick_cxt);
		if (found && t->enabled)
		{
			if (lease_name == NULL)
			{
				lease_name = MemoryContextStrdup(worker_cxt, t->name);
				SetConfigOption("application_name",
								psprintf("leader_election task %s", t->name),
								PGC_USERSET, PGC_S_SESSION);
			}
			now = GetCurrentTimestamp();
			if (now >= next_due)
				problem = le_task_problem(t);
			if (problem != NULL)
				le_disable_task_for(t, problem);
			else
			{
				leader = le_try_acquire(t->name, t->ttl_usecs, &who, &retry_at);
				if (leader)
				{
					LeaseRow	row;

					CommandCounterIncrement();
					le_store_read(t->name, &row);
					term = row.term;
					expires = row.expires_at;
					run = GetCurrentTimestamp() >= next_due &&
						le_lease_valid(&row, GetCurrentTimestamp());
					if (run)
						run_id = le_record_start(t, term, identity);
				}
			}
		}
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();

		if (!found || !t->enabled || problem != NULL)
			break;				/* unregistered or disabled: stop */

		if (run)
		{
			ErrorData  *edata;
			TimestampTz started = GetCurrentTimestamp();
			bool		cancelled;
			char		reason[LE_REASON_LEN];

			/* Publish the run so that the launcher keeps the lease alive. */
			SpinLockAcquire(&slot->mutex);
			slot->running = true;
			slot->term = term;
			slot->ttl_usecs = t->ttl_usecs;
			slot->confirmed_expires = expires;
			pg_atomic_write_u64(&slot->expires_atomic, (uint64) expires);
			slot->cancel_requested = false;
			SpinLockRelease(&slot->mutex);
			le_wake_launcher();

			le_worker_in_run = true;
			if (le_worker_shutdown)
			{
				QueryCancelPending = true;
				InterruptPending = true;
			}
			le_watchdog_start(slot, t->ttl_usecs);
			edata = le_call_procedure(t, term, tick_cxt);
			le_worker_in_run = false;
			disable_timeout(le_watchdog_timeout, false);
			QueryCancelPending = false;

			SpinLockAcquire(&slot->mutex);
			slot->running = false;
			cancelled = slot->cancel_requested;
			strlcpy(reason, slot->cancel_reason, sizeof(reason));
			slot->cancel_requested = false;
			SpinLockRelease(&slot->mutex);

			if (edata == NULL)
				le_record_end(t->id, run_id, "succeeded", NULL);
			else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && cancelled)
				le_record_end(t->id, run_id, "cancelled", reason);
			else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && le_watchdog_fired)
				le_record_end(t->id, run_id, "cancelled",
							  "leadership lost: the lease was not renewed in time (noticed by the worker)");
			else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && le_worker_shutdown)
				le_record_end(t->id, run_id, "cancelled",
							  "the task worker was told to stop (server shutdown, or the task was stopped)");
			else
			{
				le_record_end(t->id, run_id, "failed", edata->message);
				ereport(LOG,
						(errmsg("leader_election: task \"%s\" failed in term " INT64_FORMAT ": %s",
								t->name, term, edata->message)));
			}
			/* Start to start; an overrun delays the next run, no overlap. */
			next_due = Max(started + t->every_usecs, GetCurrentTimestamp());
			continue;
		}

		/* Sleep until the next run, renewal or campaign. */
		now = GetCurrentTimestamp();
		if (leader)
			sleep_ms = Min((next_due - now) / 1000, t->ttl_usecs / 3000);
		else
			sleep_ms = Min(LE_CAMPAIGN_MS, t->ttl_usecs / 3000);
		sleep_ms = Max(sleep_ms, 10);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	MemoryContextSwitchTo(worker_cxt);
	if (lease_name != NULL)
		le_worker_release(lease_name, identity);
	proc_exit(0);
}

/* ---- the launcher ---- */

/* What the launcher remembers about a slot it handed out. */
typedef struct LeLauncherSlot
{
	BackgroundWorkerHandle *handle;
	char	   *name;			/* lease name of the task */
	TimestampTz last_renewal;	/* last renewal attempt during a run */
	bool		stopping;		/* asked to terminate */
} LeLauncherSlot;

static LeLauncherSlot *le_launcher_slots;

static void
le_free_slot(int i)
{
	LeTaskSlot *slot = &le_tasks->slots[i];

	SpinLockAcquire(&slot->mutex);
	slot->in_use = false;
	slot->task_id = 0;
	slot->pid = 0;
	slot->running = false;
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);
	if (le_launcher_slots[i].handle)
		pfree(le_launcher_slots[i].handle);
	if (le_launcher_slots[i].name)
		pfree(le_launcher_slots[i].name);
	memset(&le_launcher_slots[i], 0, sizeof(LeLauncherSlot));
}

static bool
le_start_worker(const LeTask *t, int i)
{
	BackgroundWorker worker;
	LeWorkerArgs args;
	LeTaskSlot *slot = &le_tasks->slots[i];
	BackgroundWorkerHandle *handle;
	MemoryContext old;
	bool		started;

	SpinLockAcquire(&slot->mutex);
	slot->in_use = true;
	slot->task_id = t->id;
	slot->pid = 0;
	slot->running = false;
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "leader_election");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "le_task_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "leader_election task %s", t->name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "leader_election task");
	worker.bgw_main_arg = Int32GetDatum(i);
	worker.bgw_notify_pid = MyProcPid;
	args.database = MyDatabaseId;
	args.owner = t->owner;
	args.task_id = t->id;
	memcpy(worker.bgw_extra, &args, sizeof(args));

	/* The handle outlives this scan's memory. */
	old = MemoryContextSwitchTo(TopMemoryContext);
	started = RegisterDynamicBackgroundWorker(&worker, &handle);
	MemoryContextSwitchTo(old);
	if (!started)
	{
		ereport(LOG,
				(errmsg("leader_election: could not start a worker for task \"%s\"", t->name),
				 errhint("Raise max_worker_processes.")));
		le_free_slot(i);
		return false;
	}
	le_launcher_slots[i].handle = handle;
	le_launcher_slots[i].name = MemoryContextStrdup(TopMemoryContext, t->name);
	le_launcher_slots[i].last_renewal = 0;
	le_launcher_slots[i].stopping = false;
	return true;
}

/*
 * Read the enabled tasks, disable those that cannot run, start and stop
 * workers to match.  Errors (say, the extension being dropped) are logged
 * and the launcher carries on.
 */
static void
le_launcher_scan(MemoryContext cxt)
{
	LeTask	   *tasks = NULL;
	LeTask	   *all;
	char	  **problems;
	int			ntasks = 0;
	bool	   *wanted;
	MemoryContext old = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		int			rc;

		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		rc = SPI_execute("SELECT 1 FROM pg_catalog.pg_extension"
						 " WHERE extname OPERATOR(pg_catalog.=) 'leader_election'",
						 true, 1);
		if (rc == SPI_OK_SELECT && SPI_processed == 1)
		{
			char	   *sql = psprintf("%s WHERE t.enabled ORDER BY t.id", le_task_query);
			uint64		n;

			rc = SPI_execute(sql, true, 0);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "reading leader_election.tasks failed");
			n = SPI_processed;
			tasks = MemoryContextAllocZero(cxt, sizeof(LeTask) * (n + 1));
			problems = MemoryContextAllocZero(cxt, sizeof(char *) * (n + 1));
			all = MemoryContextAllocZero(cxt, sizeof(LeTask) * (n + 1));
			MemoryContextSwitchTo(cxt);
			for (uint64 k = 0; k < n; k++)
			{
				le_task_from_tuple(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, &all[k]);
				problems[k] = le_task_problem(&all[k]);
				if (problems[k] == NULL)
					tasks[ntasks++] = all[k];
			}
			/* Disable the others (this runs more statements, so after the copy). */
			for (uint64 k = 0; k < n; k++)
				if (problems[k] != NULL)
					le_disable_task_for(&all[k], problems[k]);
		}
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		ntasks = 0;
		tasks = NULL;
		MemoryContextSwitchTo(old);
		return;					/* leave the workers alone this time */
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);

	/* Stop workers whose task is gone or disabled; forget dead workers. */
	wanted = palloc0(sizeof(bool) * Max(ntasks, 1));
	for (int i = 0; i < le_tasks->nslots; i++)
	{
		LeTaskSlot *slot = &le_tasks->slots[i];
		int64		task_id;
		bool		in_use;
		bool		keep = false;
		pid_t		pid;

		SpinLockAcquire(&slot->mutex);
		in_use = slot->in_use;
		task_id = slot->task_id;
		SpinLockRelease(&slot->mutex);
		if (!in_use)
			continue;
		if (GetBackgroundWorkerPid(le_launcher_slots[i].handle, &pid) == BGWH_STOPPED)
		{
			le_free_slot(i);
			continue;
		}
		for (int k = 0; k < ntasks; k++)
			if (tasks[k].id == task_id)
			{
				wanted[k] = true;
				keep = true;
			}
		if (!keep && !le_launcher_slots[i].stopping)
		{
			TerminateBackgroundWorker(le_launcher_slots[i].handle);
			le_launcher_slots[i].stopping = true;
		}
	}

	/* Start workers for enabled tasks that have none. */
	for (int k = 0; k < ntasks; k++)
	{
		if (wanted[k])
			continue;
		for (int i = 0; i < le_tasks->nslots; i++)
		{
			bool		in_use;

			SpinLockAcquire(&le_tasks->slots[i].mutex);
			in_use = le_tasks->slots[i].in_use;
			SpinLockRelease(&le_tasks->slots[i].mutex);
			if (!in_use)
			{
				(void) le_start_worker(&tasks[k], i);
				break;
			}
		}
	}
	MemoryContextSwitchTo(old);
}

/* Ask a worker to stop its run; repeated while the run lasts. */
static void
le_cancel_run(LeTaskSlot *slot, const char *reason)
{
	pid_t		pid;
	bool		first;

	SpinLockAcquire(&slot->mutex);
	first = !slot->cancel_requested;
	if (first)
	{
		slot->cancel_requested = true;
		strlcpy(slot->cancel_reason, reason, LE_REASON_LEN);
	}
	pid = slot->running ? slot->pid : 0;
	SpinLockRelease(&slot->mutex);
	if (pid != 0)
	{
		if (first)
			ereport(LOG,
					(errmsg("leader_election: cancelling a task run (worker %d): %s",
							(int) pid, reason)));
		kill(pid, SIGINT);
	}
}

/*
 * Renew the lease of slot i's run, under the runner identity, only if it
 * is still ours in the run's term.  Returns true if renewed (and the new
 * expiry is published), false if it could not be renewed this time;
 * *lost says the lease is definitely someone else's (or another term).
 */
static bool
le_renew_for_run(int i, const char *identity, int64 term, int64 ttl, bool *lost)
{
	const char *name = le_launcher_slots[i].name;
	LeTaskSlot *slot = &le_tasks->slots[i];
	MemoryContext old = CurrentMemoryContext;
	volatile bool renewed = false;
	volatile bool gone = false;
	volatile TimestampTz expires = 0;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		LeaseRow	row;
		LeIdentity	who;
		TimestampTz retry_at;

		PushActiveSnapshot(GetTransactionSnapshot());
		le_set_local_lock_timeout();
		who.holder = pstrdup(identity);
		who.session_bound = false;
		le_store_read(name, &row);
		if (!row.found || row.holder == NULL || strcmp(row.holder, identity) != 0 ||
			row.term != term)
			gone = true;
		else if (le_try_acquire(name, ttl, &who, &retry_at))
		{
			CommandCounterIncrement();
			le_store_read(name, &row);
			if (row.term == term)
			{
				renewed = true;
				expires = row.expires_at;
			}
			else
				gone = true;
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		renewed = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);

	*lost = gone;
	if (renewed)
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->running && slot->term == term && expires > slot->confirmed_expires)
		{
			slot->confirmed_expires = expires;
			pg_atomic_write_u64(&slot->expires_atomic, (uint64) expires);
		}
		SpinLockRelease(&slot->mutex);
	}
	return renewed;
}

/*
 * Keep the leases of running tasks alive; cancel runs whose lease is lost
 * or about to expire.  Returns how long the launcher may sleep (ms).
 */
static long
le_launcher_tend_runs(const char *identity)
{
	long		sleep_ms = LE_LAUNCHER_SCAN_MS;

	for (int i = 0; i < le_tasks->nslots; i++)
	{
		LeTaskSlot *slot = &le_tasks->slots[i];
		bool		running;
		int64		term;
		int64		ttl;
		TimestampTz confirmed;
		TimestampTz now;
		bool		lost = false;

		SpinLockAcquire(&slot->mutex);
		running = slot->in_use && slot->running;
		term = slot->term;
		ttl = slot->ttl_usecs;
		confirmed = slot->confirmed_expires;
		SpinLockRelease(&slot->mutex);
		if (!running || le_launcher_slots[i].name == NULL)
			continue;

		now = GetCurrentTimestamp();
		/* Renew every ttl/3 (counting from the worker's own renewal). */
		if (now >= confirmed - 2 * ttl / 3 &&
			now >= le_launcher_slots[i].last_renewal + ttl / 6)
		{
			le_launcher_slots[i].last_renewal = now;
			if (!le_renew_for_run(i, identity, term, ttl, &lost) && lost)
				le_cancel_run(slot, "leadership lost: the lease is held by another holder or in another term");
			SpinLockAcquire(&slot->mutex);
			confirmed = slot->confirmed_expires;
			SpinLockRelease(&slot->mutex);
		}
		/* Safety margin: stop before the lease can expire unrenewed. */
		now = GetCurrentTimestamp();
		if (!lost && now >= confirmed - ttl / 4)
			le_cancel_run(slot, "leadership lost: the lease could not be renewed in time");
		sleep_ms = Min(sleep_ms, ttl / 6000);
	}
	return Max(sleep_ms, 10);
}



void
le_launcher_main(Datum main_arg)
{
	MemoryContext scan_cxt;
	TimestampTz next_scan = 0;
	char		identity[LE_MAX_HOLDER_BYTES + 1];

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(le_task_database, NULL, 0);

	le_launcher_slots = MemoryContextAllocZero(TopMemoryContext,
											   sizeof(LeLauncherSlot) * le_tasks->nslots);
	scan_cxt = AllocSetContextCreate(TopMemoryContext, "leader_election launcher scan",
									 ALLOCSET_DEFAULT_SIZES);

	/* A previous launcher's workers are gone with it (see below). */
	for (int i = 0; i < le_tasks->nslots; i++)
	{
		SpinLockAcquire(&le_tasks->slots[i].mutex);
		le_tasks->slots[i].in_use = false;
		SpinLockRelease(&le_tasks->slots[i].mutex);
	}
	le_compute_identity(identity);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launcher = MyProc;
	strlcpy(le_tasks->identity, identity, sizeof(le_tasks->identity));
	SpinLockRelease(&le_tasks->mutex);
	ereport(LOG,
			(errmsg("leader_election launcher started in database \"%s\" as holder \"%s\"",
					le_task_database, identity)));

	while (!ShutdownRequestPending)
	{
		long		sleep_ms;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		sleep_ms = le_launcher_tend_runs(identity);
		if (GetCurrentTimestamp() >= next_scan && !RecoveryInProgress())
		{
			MemoryContextReset(scan_cxt);
			le_launcher_scan(scan_cxt);
			next_scan = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LE_LAUNCHER_SCAN_MS);
		}
		sleep_ms = Min(sleep_ms, LE_LAUNCHER_SCAN_MS);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * Stopping: stop our workers too (each releases its lease), so that a
	 * restarted launcher starts from a clean slate.
	 */
	for (int i = 0; i < le_tasks->nslots; i++)
		if (le_launcher_slots[i].handle != NULL)
			TerminateBackgroundWorker(le_launcher_slots[i].handle);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launcher = NULL;
	SpinLockRelease(&le_tasks->mutex);
	proc_exit(1);				/* 1: restart me unless the server is stopping */
}

/* ---- SQL-callable functions ---- */

static void
le_check_task_caller_owns(const char *name, Oid owner)
{
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for task \"%s\"", name),
				 errdetail("The task belongs to another role.")));
}

/* The task's id and owner by name, as the table owner sees it; false if none. */
static bool
le_find_task(const char *name, int64 *id, Oid *owner)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(name);
	le_exec_as_owner("SELECT id, owner FROM leader_election.tasks"
					 " WHERE name OPERATOR(pg_catalog.=) $1",
					 1, types, values, NULL, true, 1);
	if (SPI_processed == 0)
		return false;
	*id = le_spi_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	*owner = le_spi_oid(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	return true;
}

/*
 * leader_election.register_task(name text, procedure regprocedure,
 *								 run_every interval, ttl interval) returns bigint
 */
Datum
register_task(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	Oid			procedure;
	int64		every;
	int64		ttl;
	Oid			me = GetUserId();
	Oid			types[5] = {TEXTOID, OIDOID, OIDOID, INTERVALOID, INTERVALOID};
	Datum		values[5];
	LeTask		t;
	LeaseRow	row;
	char	   *problem;
	int64		id;
	Oid			other_owner;
	int			rc;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("procedure must not be null")));
	procedure = PG_GETARG_OID(1);
	every = le_checked_interval(fcinfo, 2, "run_every", LE_TASK_MIN_USECS,
								LE_TASK_MAX_EVERY_USECS, "1 second and 7 days");
	ttl = le_checked_interval(fcinfo, 3, "ttl", LE_TASK_MIN_USECS,
							  LE_TASK_MAX_TTL_USECS, "1 second and 1 day");
	(void) every;
	(void) ttl;
	PreventCommandDuringRecovery("register_task()");

	/* The lease name must not belong to another role (lease.c, I8). */
	le_store_read(name, &row);
	if (row.found && row.owner != me && !has_privs_of_role(me, row.owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for lease \"%s\"", name),
				 errdetail("The lease name belongs to another role.")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (le_find_task(name, &id, &other_owner))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("task \"%s\" already exists", name)));

	values[0] = CStringGetTextDatum(name);
	values[1] = ObjectIdGetDatum(me);
	values[2] = ObjectIdGetDatum(procedure);
	values[3] = PG_GETARG_DATUM(2);
	values[4] = PG_GETARG_DATUM(3);

	/* The same checks the runner makes, on the values about to be stored. */
	rc = SPI_execute_with_args(
							   "SELECT 0::pg_catalog.int8, $1::pg_catalog.text, $2::pg_catalog.oid,"
							   " $3::pg_catalog.oid, 0::pg_catalog.int8, 0::pg_catalog.int8, true,"
							   " r.oid IS NOT NULL, r.rolname::pg_catalog.text, r.rolcanlogin, r.rolsuper,"
							   " CASE WHEN r.oid IS NOT NULL THEN pg_catalog.has_database_privilege($2,"
							   "      pg_catalog.current_database(), 'CONNECT') END,"
							   " p.oid IS NOT NULL, n.nspname::pg_catalog.text, p.proname::pg_catalog.text,"
							   " $3::pg_catalog.regprocedure::pg_catalog.text, p.prokind::pg_catalog.text,"
							   " p.pronargs::pg_catalog.int4,"
							   " CASE WHEN p.pronargs OPERATOR(pg_catalog.>) 0 THEN p.proargtypes[0] END,"
							   " p.proallargtypes IS NULL,"
							   " CASE WHEN r.oid IS NOT NULL AND p.oid IS NOT NULL THEN"
							   "      pg_catalog.has_schema_privilege($2, p.pronamespace, 'USAGE') AND"
							   "      pg_catalog.has_function_privilege($2, p.oid, 'EXECUTE') END"
							   " FROM (SELECT) AS dummy"
							   " LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) $2"
							   " LEFT JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) $3"
							   " LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace",
							   3, types, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "checking the task failed");
	le_task_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &t);
	problem = le_task_problem(&t);
	if (problem != NULL)
	{
		int			code = ERRCODE_INVALID_PARAMETER_VALUE;

		if (!t.proc_exists || t.prokind != 'p')
			code = ERRCODE_WRONG_OBJECT_TYPE;
		else if (!t.can_login || t.superuser || !t.can_connect || !t.can_execute)
			code = ERRCODE_INSUFFICIENT_PRIVILEGE;
		else
			code = ERRCODE_INVALID_FUNCTION_DEFINITION;
		ereport(ERROR,
				(errcode(code),
				 errmsg("cannot register task \"%s\": %s", name, problem)));
	}

	le_exec_as_owner("INSERT INTO leader_election.tasks (name, owner, procedure, run_every, ttl)"
					 " VALUES ($1, $2, $3, $4, $5) RETURNING id",
					 5, types, values, NULL, false, 1);
	id = le_spi_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	SPI_finish();

	if (!le_task_runner_preloaded || le_max_task_workers == 0)
		ereport(NOTICE,
				(errmsg("task \"%s\" is registered but will not run until leader_election is in shared_preload_libraries",
						name),
				 errhint("Add leader_election to shared_preload_libraries and restart the server.")));
	else if (strcmp(get_database_name(MyDatabaseId), le_task_database) != 0)
		ereport(NOTICE,
				(errmsg("task \"%s\" is registered but will not run: the task runner works in another database",
						name),
				 errhint("The runner runs the tasks of the database named by leader_election.database.")));
	PG_RETURN_INT64(id);
}

/* leader_election.unregister_task(name text) returns boolean */
Datum
unregister_task(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	int64		id;
	Oid			owner;
	bool		found;

	PreventCommandDuringRecovery("unregister_task()");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	found = le_find_task(name, &id, &owner);
	if (found)
	{
		Oid			types[1] = {INT8OID};
		Datum		values[1];

		le_check_task_caller_owns(name, owner);
		values[0] = Int64GetDatum(id);
		le_exec_as_owner("DELETE FROM leader_election.tasks WHERE id OPERATOR(pg_catalog.=) $1",
						 1, types, values, NULL, false, 0);
	}
	SPI_finish();
	PG_RETURN_BOOL(found);
}

static Datum
le_set_enabled(FunctionCallInfo fcinfo, bool enabled)
{
	char	   *name = le_checked_name(fcinfo, 0);
	int64		id;
	Oid			owner;
	bool		found;

	PreventCommandDuringRecovery(enabled ? "enable_task()" : "disable_task()");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	found = le_find_task(name, &id, &owner);
	if (found)
	{
		Oid			types[2] = {INT8OID, BOOLOID};
		Datum		values[2];

		le_check_task_caller_owns(name, owner);
		values[0] = Int64GetDatum(id);
		values[1] = BoolGetDatum(enabled);
		le_exec_as_owner("UPDATE leader_election.tasks SET enabled = $2, disabled_reason = NULL"
						 " WHERE id OPERATOR(pg_catalog.=) $1",
						 2, types, values, NULL, false, 0);
	}
	SPI_finish();
	PG_RETURN_BOOL(found);
}

/* leader_election.enable_task(name text) returns boolean */
Datum
enable_task(PG_FUNCTION_ARGS)
{
	return le_set_enabled(fcinfo, true);
}

/* leader_election.disable_task(name text) returns boolean */
Datum
disable_task(PG_FUNCTION_ARGS)
{
	return le_set_enabled(fcinfo, false);
}
