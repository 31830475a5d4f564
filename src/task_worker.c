/*-------------------------------------------------------------------------
 *
 * task_worker.c
 *	  One task's background worker: connected as the task's owner, it
 *	  campaigns for the task's lease, CALLs the task's procedure while it
 *	  holds it, records every run in leader_election.task_runs, and
 *	  releases its own term of the lease when it stops.
 *
 * A run starts only in the transaction that has just acquired or renewed
 * the lease, and only if enough of the lease is left after that commit.
 * It is published in the worker's shared-memory slot so that the launcher
 * renews the lease during the run and cancels the run if the lease is
 * lost.  The worker's own watchdog -- a POSIX timer at the run's exact
 * deadlines, independent of the launcher -- cancels a run before its lease
 * can expire and ends the process before it does; any request to stop a
 * run gives it LE_TASK_STOP_GRACE_MS and then ends the process too
 * (task_runner.h explains the design and the slot's locking).
 *
 * This file must never run the procedure without a 'running' row recorded
 * in a transaction that held the lease, never switch to another role (it
 * is connected as the owner and stays the owner), never let the
 * procedure's settings reach the runner's own statements, and never write
 * a lease row itself: it calls le_try_acquire() and le_release_term().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <time.h>

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/defrem.h"
#include "commands/prepare.h"
#include "commands/sequence.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/pmsignal.h"
#include "tcop/dest.h"
#include "tcop/pquery.h"
#include "utils/builtins.h"
#include "utils/elog.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/portal.h"

#include "task_runner.h"

#define LE_CAMPAIGN_MS			250 /* how often a non-leader retries */

/* ---- signals and the watchdog ---- */

/*
 * Written by the signal handlers (SIGTERM, SIGINT, and SIGUSR2 from the
 * watchdog timer), which block each other, and by the main code only while
 * no run is in progress or with those signals blocked.
 */
static volatile sig_atomic_t le_worker_shutdown = false;	/* SIGTERM came */
static volatile sig_atomic_t le_worker_in_run = false;
static volatile sig_atomic_t le_watchdog_cancelled = false; /* near expiry */
static volatile sig_atomic_t le_watchdog_killed = false;	/* ended the run */
static volatile TimestampTz le_stop_deadline = 0;	/* stop asked: end by then */
static int64 le_run_ttl = 0;
static LeTaskSlot *le_slot = NULL;
static timer_t le_timer;
static sigset_t le_our_signals;

/* Arm the watchdog timer for at (server clock), or disarm it (0). */
static void
le_timer_arm(TimestampTz at)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	if (at != 0)
	{
		int64		unix_us = at + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;

		if (unix_us <= 0)
			unix_us = 1;
		its.it_value.tv_sec = unix_us / USECS_PER_SEC;
		its.it_value.tv_nsec = (unix_us % USECS_PER_SEC) * 1000;
	}
	(void) timer_settime(le_timer, TIMER_ABSTIME, &its, NULL);
}

/* Interrupt the run: a query cancel now, the end of the process later. */
static void
le_request_stop(TimestampTz now)
{
	QueryCancelPending = true;
	InterruptPending = true;
	if (le_stop_deadline == 0)
		le_stop_deadline = now + LE_TASK_STOP_GRACE_MS * (int64) 1000;
}

/*
 * The watchdog: from the latest confirmed expiry of the run's lease, cancel
 * the run LE_TASK_CANCEL_MARGIN before it and end the process
 * LE_TASK_DIE_MARGIN before it, or LE_TASK_STOP_GRACE_MS after a stop was
 * asked, whichever comes first; then re-arm the timer for the next
 * deadline.  Signal-handler safe: reads an atomic, sets flags, arms a
 * timer.  A FATAL cannot be caught by the procedure, and what the run has
 * not committed is rolled back.
 */
static void
le_watchdog_check(void)
{
	TimestampTz expires;
	TimestampTz now;
	TimestampTz cancel_at;
	TimestampTz die_at;

	if (!le_worker_in_run || le_slot == NULL)
		return;
	expires = (TimestampTz) pg_atomic_read_u64(&le_slot->confirmed_expires);
	now = GetCurrentTimestamp();
	cancel_at = expires - LE_TASK_CANCEL_MARGIN(le_run_ttl);
	die_at = expires - LE_TASK_DIE_MARGIN(le_run_ttl);
	if (le_stop_deadline != 0 && le_stop_deadline < die_at)
		die_at = le_stop_deadline;

	if (now >= die_at)
	{
		le_watchdog_killed = true;
		ProcDiePending = true;
		InterruptPending = true;
		SetLatch(MyLatch);
		return;
	}
	if (now >= cancel_at && !le_watchdog_cancelled)
	{
		le_watchdog_cancelled = true;
		le_request_stop(now);
		if (le_stop_deadline < die_at)
			die_at = le_stop_deadline;
		SetLatch(MyLatch);
	}
	le_timer_arm(le_watchdog_cancelled || le_stop_deadline != 0 ? die_at : Min(cancel_at, die_at));
}

static void
le_worker_sigusr2(SIGNAL_ARGS)
{
	int			save_errno = errno;

	le_watchdog_check();
	errno = save_errno;
}

/* SIGTERM: stop; a run in progress is cancelled and ended after the grace. */
static void
le_worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	le_worker_shutdown = true;
	if (le_worker_in_run)
	{
		le_request_stop(GetCurrentTimestamp());
		le_watchdog_check();
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* SIGINT (the launcher, or pg_cancel_backend): stop the run in progress. */
static void
le_worker_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (le_worker_in_run)
	{
		le_request_stop(GetCurrentTimestamp());
		le_watchdog_check();
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* Install handler for signo with all three of our signals blocked in it. */
static void
le_worker_signal(int signo, void (*handler) (SIGNAL_ARGS))
{
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	act.sa_mask = le_our_signals;
	act.sa_flags = SA_RESTART;
	if (sigaction(signo, &act, NULL) != 0)
		elog(FATAL, "could not set a signal handler: %m");
}

static void
le_block_our_signals(bool block)
{
	sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &le_our_signals, NULL);
}

/* ---- how the worker exits ---- */

/* The worker's last error, for the launcher (emit_log_hook). */
static emit_log_hook_type le_prev_emit_log_hook = NULL;
static char le_last_error[LE_TASK_ERROR_LEN];
static bool le_last_error_blames_task = false;
static bool le_worker_connected = false;

/*
 * task_runner.h, "Worker deaths": may this error be the task's doing?
 * Inside the run always (the procedure chooses its SQLSTATEs); outside it,
 * unless it is a shortage, an operator's action, the connection or the
 * system, a lease that expired before the runner's own commit (it waited,
 * say for an administrator's lock), or came before the worker was
 * connected.
 */
static bool
le_error_blames_task(const ErrorData *edata)
{
	int			class = ERRCODE_TO_CATEGORY(edata->sqlerrcode);

	if (le_worker_in_run)
		return true;
	return le_worker_connected &&
		edata->sqlerrcode != ERRCODE_LE_NOT_LEADER &&	/* a lease that ran out
														 * while the runner's
														 * own commit waited */
		class != ERRCODE_INSUFFICIENT_RESOURCES &&
		class != ERRCODE_OPERATOR_INTERVENTION &&
		class != ERRCODE_CONNECTION_EXCEPTION &&
		class != ERRCODE_SYSTEM_ERROR;
}

static void
le_note_error(ErrorData *edata)
{
	if (edata->elevel >= ERROR && edata->message != NULL)
	{
		strlcpy(le_last_error, edata->message, sizeof(le_last_error));
		le_last_error_blames_task = le_error_blames_task(edata);
	}
	if (le_prev_emit_log_hook)
		le_prev_emit_log_hook(edata);
}

/*
 * On exit, however it happens: the slot no longer has a live worker; say
 * whether the exit was the runner's own decision and what the last error
 * was (task_runner.h, "Worker deaths").
 */
static void
le_leave_slot(int code, Datum arg)
{
	LeTaskSlot *slot = (LeTaskSlot *) DatumGetPointer(arg);

	SpinLockAcquire(&slot->mutex);
	if (slot->pid == MyProcPid)
	{
		slot->exit_expected = (code == 0 || le_worker_shutdown || le_watchdog_killed);
		strlcpy(slot->last_error, le_last_error, sizeof(slot->last_error));
		slot->error_blames_task = le_last_error[0] == '\0' ? le_worker_connected :
			le_last_error_blames_task;
		slot->pid = 0;
		slot->running = false;
	}
	SpinLockRelease(&slot->mutex);
}

/*
 * Claim the slot the launcher assigned to this task (of this database:
 * task ids of two databases may be equal).  Exits quietly if the
 * launcher gave it away meanwhile, if another worker has it, or if a live
 * worker of another slot has the same name (one run per name).
 */
static LeTaskSlot *
le_claim_slot(int slotno, Oid database, int64 task_id)
{
	LeTaskSlot *slot;
	char		name[LE_MAX_NAME_BYTES + 1];

	if (le_tasks == NULL || slotno < 0 || slotno >= le_tasks->nslots)
		elog(ERROR, "leader_election task worker started without a valid slot");
	slot = &le_tasks->slots[slotno];
	SpinLockAcquire(&slot->mutex);
	if (!slot->in_use || slot->database != database || slot->task_id != task_id ||
		slot->pid != 0)
	{
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	slot->running = false;
	slot->cancel_requested = false;
	slot->exit_expected = false;
	slot->last_error[0] = '\0';
	slot->error_blames_task = false;
	strlcpy(name, slot->name, sizeof(name));
	SpinLockRelease(&slot->mutex);
	on_shmem_exit(le_leave_slot, PointerGetDatum(slot));

	for (int i = 0; i < le_tasks->nslots; i++)
	{
		LeTaskSlot *other = &le_tasks->slots[i];
		bool		busy;

		if (other == slot)
			continue;
		SpinLockAcquire(&other->mutex);
		busy = other->in_use && other->pid != 0 &&
			other->database == slot->database && strcmp(other->name, name) == 0;
		SpinLockRelease(&other->mutex);
		if (busy)
			proc_exit(0);
	}
	return slot;
}

/* Publish a run so that the launcher keeps its lease alive. */
static void
le_publish_run(LeTaskSlot *slot, int64 run_id, int64 term, int64 ttl_usecs,
			   TimestampTz expires)
{
	PGPROC	   *launcher;
	int			launcher_no;

	SpinLockAcquire(&slot->mutex);
	launcher_no = slot->launcher;
	slot->running = true;
	slot->run_id = run_id;
	slot->term = term;
	slot->ttl_usecs = ttl_usecs;
	pg_atomic_write_u64(&slot->confirmed_expires, (uint64) expires);
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);

	/* Wake the launcher: its next renewal may be due sooner than it thinks. */
	SpinLockAcquire(&le_tasks->mutex);
	launcher = le_tasks->launchers[launcher_no].proc;
	SpinLockRelease(&le_tasks->mutex);
	if (launcher != NULL)
		SetLatch(&launcher->procLatch);
}

/* The run is over; returns whether the launcher asked to cancel it, and why. */
static bool
le_unpublish_run(LeTaskSlot *slot, char *reason)
{
	bool		cancelled;

	SpinLockAcquire(&slot->mutex);
	slot->running = false;
	cancelled = slot->cancel_requested;
	strlcpy(reason, slot->cancel_reason, LE_TASK_REASON_LEN);
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);
	return cancelled;
}

/* ---- the session ---- */

static char le_identity[LE_MAX_HOLDER_BYTES + 1];
static char *le_lease_name = NULL;	/* in TopMemoryContext once known */

/* What the worker sets in its own session. */
static void
le_worker_session_settings(void)
{
	/*
	 * The worker acts as the task's owner itself: a role setting the owner
	 * gave itself (ALTER ROLE ... SET role) would make it another role, which
	 * may not even see the task.  The procedure may still SET ROLE.
	 */
	SetConfigOption("role", "none", PGC_USERSET, PGC_S_SESSION);
	/* am_leader()/assert_leader() in the procedure default to the runner. */
	SetConfigOption("leader_election.holder_id", le_identity, PGC_USERSET, PGC_S_SESSION);
	if (le_lease_name != NULL)
	{
		char		appname[NAMEDATALEN];

		snprintf(appname, sizeof(appname), "leader_election task %s", le_lease_name);
		SetConfigOption("application_name", appname, PGC_USERSET, PGC_S_SESSION);
	}
}

/*
 * Reset what a run may have changed in the session, as DISCARD ALL does
 * (which cannot be run from here: it refuses to run in a transaction), but
 * keeping the portal the worker runs its CALLs in.  In a transaction,
 * before the runner's own settings.
 */
static void
le_reset_session(void)
{
	SetPGVariable("session_authorization", NIL, false);
	SetPGVariable("role", NIL, false);
	ResetAllOptions();
	DropAllPreparedStatements();
	Async_UnlistenAll();
	LockReleaseAll(USER_LOCKMETHOD, true);
	ResetPlanCache();
	ResetTempTableNamespace();
	ResetSequenceCaches();
	le_worker_session_settings();
}

/*
 * A transaction of the runner's own, like le_task_xact_begin(), after
 * resetting the session if a run may have changed it.
 */
static void
le_worker_xact_begin(bool reset_session)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	le_task_settings_before_snapshot();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	if (reset_session)
		le_reset_session();
	le_task_settings();
}

/* ---- the lease and the run records ---- */

/* Close the rows of runs a previous worker of this task left open. */
static void
le_close_orphan_runs(int64 task_id)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];

	values[0] = Int64GetDatum(task_id);
	le_exec_as_task_tables_owner("UPDATE leader_election.task_runs SET status = 'failed',"
								 " finished_at = pg_catalog.clock_timestamp(),"
								 " error = 'the task worker exited during the run'"
								 " WHERE task_id OPERATOR(pg_catalog.=) $1"
								 " AND status OPERATOR(pg_catalog.=) 'running'",
								 1, types, values, NULL, false, 0);
}

/*
 * Insert the 'running' row of a run; returns its id and, in *started, the
 * start it records.
 */
static int64
le_record_start(const LeTask *t, int64 term, TimestampTz *started)
{
	Oid			types[5] = {INT8OID, TEXTOID, OIDOID, INT8OID, TEXTOID};
	Datum		values[5];
	bool		isnull;

	values[0] = Int64GetDatum(t->id);
	values[1] = CStringGetTextDatum(t->name);
	values[2] = ObjectIdGetDatum(t->owner);
	values[3] = Int64GetDatum(term);
	values[4] = CStringGetTextDatum(le_identity);
	/* Monitoring only: never wait for a row another session has locked. */
	le_exec_as_task_tables_owner("UPDATE leader_election.tasks SET last_started_at = pg_catalog.clock_timestamp(),"
								 " last_status = 'running' WHERE id OPERATOR(pg_catalog.=)"
								 " (SELECT l.id FROM leader_election.tasks AS l WHERE l.id OPERATOR(pg_catalog.=) $1"
								 "  FOR NO KEY UPDATE SKIP LOCKED)",
								 1, types, values, NULL, false, 0);
	le_exec_as_task_tables_owner("INSERT INTO leader_election.task_runs"
								 " (task_id, task_name, owner, term, holder, pid, started_at, status)"
								 " VALUES ($1, $2, $3, $4, $5, pg_catalog.pg_backend_pid(),"
								 " pg_catalog.clock_timestamp(), 'running') RETURNING id, started_at",
								 5, types, values, NULL, false, 0);
	*started = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 2, &isnull));
	return le_spi_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* Record how a run ended and trim the task's history (in a transaction). */
static void
le_record_end(int64 task_id, int64 run_id, const char *status, const char *error)
{
	Oid			types[4] = {INT8OID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	values[0] = Int64GetDatum(task_id);
	values[1] = Int64GetDatum(run_id);
	values[2] = CStringGetTextDatum(status);
	if (error != NULL)
		values[3] = CStringGetTextDatum(error);
	else
		nulls[3] = 'n';
	le_exec_as_task_tables_owner("UPDATE leader_election.task_runs SET status = $3, error = $4,"
								 " finished_at = pg_catalog.clock_timestamp()"
								 " WHERE id OPERATOR(pg_catalog.=) $2"
								 " AND status OPERATOR(pg_catalog.=) 'running'",
								 4, types, values, nulls, false, 0);
	le_exec_as_task_tables_owner("UPDATE leader_election.tasks SET last_status = $3,"
								 " last_finished_at = pg_catalog.clock_timestamp()"
								 " WHERE id OPERATOR(pg_catalog.=) (SELECT l.id FROM leader_election.tasks AS l"
								 "  WHERE l.id OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE SKIP LOCKED)",
								 4, types, values, nulls, false, 0);
	le_task_runs_trim(task_id);
}

/* ---- the exit ---- */

static int64 le_task_id = 0;
static int64 le_held_term = 0;	/* the term this worker last took or renewed */
static int64 le_open_run = 0;	/* a 'running' row of this worker, or 0 */

/*
 * However the worker exits (but a crash), close its open run record and
 * release the term it holds, in a transaction of its own -- as PostgreSQL
 * removes a session's temporary tables on exit.  Registered after the
 * connection, so it runs before the session's transaction state is torn
 * down; an error here ends the process, and the lease then expires.
 */
static void
le_worker_exit(int code, Datum arg)
{
	const char *why;

	le_block_our_signals(true);
	le_worker_in_run = false;
	le_timer_arm(0);
	if ((le_open_run == 0 && le_held_term == 0) || !PostmasterIsAlive())
		return;

	if (le_watchdog_killed && le_stop_deadline != 0 && !le_watchdog_cancelled)
		why = le_worker_shutdown ?
			"the task worker was told to stop (server shutdown, or the task was stopped) and did not end within the stop grace" :
			"cancelled, and did not end within the stop grace";
	else if (le_watchdog_killed)
		why = "leadership lost: the lease was not renewed in time (noticed by the worker), and the run did not end";
	else if (le_worker_shutdown)
		why = "the task worker was told to stop (server shutdown, or the task was stopped)";
	else
		why = NULL;

	AbortOutOfAnyTransaction();
	QueryCancelPending = false;
	le_worker_xact_begin(true);
	if (le_open_run != 0)
	{
		char	   *error = why ? (char *) why :
		psprintf("the task worker exited during the run: %s", le_last_error);

		le_record_end(le_task_id, le_open_run, why ? "cancelled" : "failed", error);
	}
	if (le_held_term != 0 && le_lease_name != NULL)
	{
		LeIdentity	who;

		who.holder = le_identity;
		who.session_bound = false;
		(void) le_release_term(le_lease_name, &who, le_held_term);
	}
	le_task_xact_commit();
	le_open_run = 0;
	le_held_term = 0;
}

/* ---- the run ---- */

/*
 * CALL the procedure the task registered, by its OID, non-atomically so
 * that it may COMMIT.  Returns NULL on success, else the error (copied
 * into cxt).
 *
 * The call is built as the parser would build CALL for that procedure --
 * a FuncExpr naming the OID, its argument the term as a bigint constant --
 * and run by ExecuteCallStmt, as a client's CALL is: no name is looked up,
 * so an overload added later (say, with defaults) cannot make the call
 * ambiguous or reach another procedure, and nothing on the search_path
 * matters.  ExecuteCallStmt checks EXECUTE again, and makes the call
 * atomic, as for any CALL, if the procedure has SET clauses or is
 * SECURITY DEFINER.
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
	Portal		portal;
	ErrorData  *edata = NULL;
	char	   *activity;

	MemoryContextSwitchTo(cxt);
	activity = psprintf("CALL %s -- task %s", t->proc_text, t->name);

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
	pgstat_report_activity(STATE_RUNNING, activity);
	PG_TRY();
	{
		CallStmt   *stmt;
		FuncExpr   *call;
		List	   *args = NIL;

		/* In the portal's memory, which lives across the run's COMMITs. */
		MemoryContextSwitchTo(portal->portalContext);
		if (t->nargs == 1)
			args = list_make1(makeConst(INT8OID, -1, InvalidOid, sizeof(int64),
										Int64GetDatum(term), false, FLOAT8PASSBYVAL));
		call = makeFuncExpr(t->procedure, VOIDOID, args, InvalidOid, InvalidOid,
							COERCE_EXPLICIT_CALL);
		stmt = makeNode(CallStmt);
		stmt->funcexpr = call;

		EnsurePortalSnapshotExists();
		ExecuteCallStmt(stmt, NULL, false, None_Receiver);
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

/*
 * Run the task once, in term, as the 'running' row run_id that the caller
 * has committed with a lease valid until expires, and record how it ended.
 */
static void
le_run_task(LeTaskSlot *slot, const LeTask *t, int64 term, int64 run_id,
			TimestampTz expires, MemoryContext cxt)
{
	ErrorData  *edata = NULL;
	char		reason[LE_TASK_REASON_LEN];
	bool		cancelled;
	bool		started = false;
	TimestampTz now;

	le_publish_run(slot, run_id, term, t->ttl_usecs, expires);

	/*
	 * No CALL without enough lease left, measured after the commit; checked
	 * again once the watchdog is armed, which covers any delay after that.
	 */
	now = GetCurrentTimestamp();
	if (!le_worker_shutdown && expires - now >= LE_TASK_START_MARGIN(t->ttl_usecs))
	{
		le_block_our_signals(true);
		le_run_ttl = t->ttl_usecs;
		le_stop_deadline = 0;
		le_watchdog_cancelled = false;
		le_watchdog_killed = false;
		le_worker_in_run = true;
		le_watchdog_check();
		le_block_our_signals(false);

		now = GetCurrentTimestamp();
		if (!le_worker_shutdown && !QueryCancelPending &&
			expires - now >= LE_TASK_START_MARGIN(t->ttl_usecs))
		{
			started = true;
			edata = le_call_procedure(t, term, cxt);
		}
	}

	le_block_our_signals(true);
	le_worker_in_run = false;
	le_timer_arm(0);
	le_block_our_signals(false);
	QueryCancelPending = false; /* a cancel that came too late to matter */
	cancelled = le_unpublish_run(slot, reason);

	le_worker_xact_begin(true);
	if (!started)
		le_record_end(t->id, run_id, "skipped", le_worker_shutdown ?
					  "the task worker was told to stop before the run started" :
					  "not started: less than half the ttl was left on the lease after the run was recorded (the worker was delayed)");
	else if (edata == NULL)
		le_record_end(t->id, run_id, "succeeded", NULL);
	else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && cancelled)
		le_record_end(t->id, run_id, "cancelled", reason);
	else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && le_watchdog_cancelled)
		le_record_end(t->id, run_id, "cancelled",
					  "leadership lost: the lease was not renewed in time (noticed by the worker)");
	else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && le_worker_shutdown)
		le_record_end(t->id, run_id, "cancelled",
					  "the task worker was told to stop (server shutdown, or the task was stopped)");
	else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && le_stop_deadline != 0)
		le_record_end(t->id, run_id, "cancelled", "cancelled (pg_cancel_backend)");
	else
	{
		le_record_end(t->id, run_id, "failed", edata->message);
		ereport(LOG,
				(errmsg("leader_election: task \"%s\" failed in term " INT64_FORMAT ": %s",
						t->name, term, edata->message)));
	}
	le_task_xact_commit();
	le_open_run = 0;
}

/* ---- the worker ---- */

void
le_task_worker_main(Datum main_arg)
{
	LeWorkerArgs args;
	LeTaskSlot *slot;
	MemoryContext worker_cxt;
	MemoryContext tick_cxt;
	TimestampTz last_start = 0;
	LeIdentity	who;
	struct sigevent sev;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	le_task_id = args.task_id;
	sigemptyset(&le_our_signals);
	sigaddset(&le_our_signals, SIGTERM);
	sigaddset(&le_our_signals, SIGINT);
	sigaddset(&le_our_signals, SIGUSR2);
	le_worker_signal(SIGTERM, le_worker_sigterm);
	le_worker_signal(SIGINT, le_worker_sigint);
	le_worker_signal(SIGUSR2, le_worker_sigusr2);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGUSR2;
	if (timer_create(CLOCK_REALTIME, &sev, &le_timer) != 0)
		elog(FATAL, "could not create the task watchdog timer: %m");
	le_prev_emit_log_hook = emit_log_hook;
	emit_log_hook = le_note_error;
	BackgroundWorkerUnblockSignals();

	slot = le_claim_slot(DatumGetInt32(main_arg), args.database, args.task_id);
	le_slot = slot;
	BackgroundWorkerInitializeConnectionByOid(args.database, args.owner, 0);
	le_worker_connected = true;

	SpinLockAcquire(&le_tasks->mutex);
	strlcpy(le_identity, le_tasks->identity, sizeof(le_identity));
	SpinLockRelease(&le_tasks->mutex);
	le_worker_session_settings();
	who.holder = le_identity;
	who.session_bound = false;
	before_shmem_exit(le_worker_exit, (Datum) 0);

	worker_cxt = AllocSetContextCreate(TopMemoryContext, "leader_election task worker",
									   ALLOCSET_DEFAULT_SIZES);
	tick_cxt = AllocSetContextCreate(worker_cxt, "leader_election task tick",
									 ALLOCSET_DEFAULT_SIZES);

	/*
	 * Close what a previous worker of this task left open, and take up the
	 * schedule where it left off.
	 */
	le_worker_xact_begin(false);
	le_close_orphan_runs(args.task_id);
	(void) le_task_last_start(args.task_id, &last_start);
	le_task_xact_commit();

	while (!le_worker_shutdown)
	{
		LeTask		t;
		bool		found;
		bool		leader = false;
		bool		run = false;
		bool		due_now = false;
		char	   *problem = NULL;
		int64		term = 0;
		int64		run_id = 0;
		TimestampTz expires = 0;
		TimestampTz now;
		TimestampTz retry_at;
		TimestampTz due;
		TimestampTz started;
		long		sleep_ms;

		MemoryContextReset(tick_cxt);
		MemoryContextSwitchTo(tick_cxt);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* One short transaction: the task, the checks, the campaign. */
		le_worker_xact_begin(false);
		found = le_task_load(args.task_id, &t, tick_cxt);
		due = last_start == 0 ? 0 : last_start + (found ? t.every_usecs : 0);
		if (found && t.enabled)
		{
			LeaseRow	row;

			if (le_lease_name == NULL)
			{
				le_lease_name = MemoryContextStrdup(TopMemoryContext, t.name);
				le_worker_session_settings();

				/*
				 * A lease of this name that the runner holds now was taken by
				 * an earlier worker of the name, which is gone (one worker per
				 * name): end that term, so that this worker's runs have terms
				 * of their own.
				 */
				le_store_read(t.name, &row);
				if (row.found && row.holder != NULL && strcmp(row.holder, le_identity) == 0)
				{
					(void) le_release_term(t.name, &who, row.term);
					CommandCounterIncrement();
				}
			}
			/*
			 * Every check before a run; the name's owner before every
			 * campaign too, which would fail on a name that is no longer
			 * the task owner's.
			 */
			now = GetCurrentTimestamp();
			due_now = now >= due;
			if (due_now || t.name_foreign)
				problem = le_task_problem(&t);
			if (problem != NULL)
				(void) le_task_disable(&t, problem);
			else
			{
				leader = le_try_acquire(t.name, t.ttl_usecs, &who, &retry_at);
				if (leader)
				{
					CommandCounterIncrement();
					le_store_read(t.name, &row);
					term = row.term;
					expires = row.expires_at;
					le_held_term = term;
					now = GetCurrentTimestamp();
					/*
					 * Only a run that was due when the checks ran: one that
					 * fell due while the campaign waited starts at the next
					 * turn, after the checks (review of issue 12).
					 */
					run = due_now && le_lease_valid(&row, now);
					if (run)
						run_id = le_record_start(&t, term, &started);
				}
			}
		}
		le_task_xact_commit();
		if (run)
			le_open_run = run_id;

		if (!found || !t.enabled || problem != NULL)
			break;				/* unregistered or disabled: stop */

		if (run)
		{
			le_run_task(slot, &t, term, run_id, expires, tick_cxt);
			/* Start to start, from the recorded start; skipped runs do not count. */
			le_worker_xact_begin(false);
			(void) le_task_last_start(args.task_id, &last_start);
			le_task_xact_commit();
			continue;
		}

		/* Sleep until the next run, renewal or campaign. */
		now = GetCurrentTimestamp();
		if (leader)
			sleep_ms = Min((due - now) / 1000, t.ttl_usecs / 3000);
		else
			sleep_ms = Min(LE_CAMPAIGN_MS, t.ttl_usecs / 3000);
		sleep_ms = Max(sleep_ms, 10);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	proc_exit(0);				/* le_worker_exit releases the lease */
}
