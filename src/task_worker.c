/*-------------------------------------------------------------------------
 *
 * task_worker.c
 *	  One task's background worker: connected as the task's owner, it
 *	  campaigns for the task's lease, CALLs the task's procedure while it
 *	  holds it, records every run in leader_election.task_runs, and
 *	  releases the lease when it stops.
 *
 * A run starts only in the transaction that has just acquired or renewed
 * the lease, and is published in the worker's shared-memory slot so that
 * the launcher renews the lease during the run and cancels the run if the
 * lease is lost (task_runner.h explains the design and the slot's locking).
 * The worker's own watchdog cancels a run that outlives its last known
 * expiry, should the launcher be unable to.
 *
 * This file must never run the procedure without a 'running' row recorded
 * in a transaction that held the lease, never switch to another role (it
 * is connected as the owner and stays the owner), and never write a lease
 * row itself: it calls le_try_acquire() and release_leader().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/pquery.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/portal.h"
#include "utils/timeout.h"

#include "task_runner.h"

/* lease.c's SQL function; called directly to release on shutdown. */
extern Datum release_leader(PG_FUNCTION_ARGS);

#define LE_CAMPAIGN_MS			250 /* how often a non-leader retries */

/* ---- signals ---- */

static volatile sig_atomic_t le_worker_shutdown = false;
static volatile sig_atomic_t le_worker_in_run = false;

/* Turn a signal into a query cancel of the run, if one is in progress. */
static void
le_cancel_run_in_progress(void)
{
	if (le_worker_in_run)
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
}

/* SIGTERM: stop after cancelling a run in progress. */
static void
le_worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	le_worker_shutdown = true;
	le_cancel_run_in_progress();
	errno = save_errno;
}

/* SIGINT from the launcher: cancel the run, if one is in progress. */
static void
le_worker_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	le_cancel_run_in_progress();
	errno = save_errno;
}

/*
 * The worker's own watchdog during a run, in case the launcher cannot
 * renew or cancel (stopped, stuck): a periodic timeout that cancels the
 * run when the lease's last known expiry is within ttl/8, and ends the
 * process if the run is still going when that expiry arrives.  The launcher's
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
	TimestampTz now;

	if (!le_worker_in_run || le_watchdog_slot == NULL)
		return;
	expires = (TimestampTz) pg_atomic_read_u64(&le_watchdog_slot->confirmed_expires);
	now = GetCurrentTimestamp();
	if (now >= expires)
	{
		/*
		 * The lease may belong to someone else by now and the run ignored
		 * its cancel (a procedure can catch query_canceled): end the process.
		 * A FATAL cannot be caught, and what the run has not committed is
		 * rolled back.
		 */
		le_watchdog_fired = true;
		ProcDiePending = true;
		InterruptPending = true;
		SetLatch(MyLatch);
	}
	else if (now >= expires - le_watchdog_margin)
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

/* ---- the slot ---- */

/* On exit, however it happens: the slot no longer has a live worker. */
static void
le_leave_slot(int code, Datum arg)
{
	LeTaskSlot *slot = (LeTaskSlot *) DatumGetPointer(arg);

	SpinLockAcquire(&slot->mutex);
	if (slot->pid == MyProcPid)
	{
		slot->pid = 0;
		slot->running = false;
	}
	SpinLockRelease(&slot->mutex);
}

/*
 * Claim the slot the launcher assigned to this task.  Exits quietly if the
 * launcher gave it away meanwhile, or if another worker has it.
 */
static LeTaskSlot *
le_claim_slot(int slotno, int64 task_id)
{
	LeTaskSlot *slot;

	if (le_tasks == NULL || slotno < 0 || slotno >= le_tasks->nslots)
		elog(ERROR, "leader_election task worker started without a valid slot");
	slot = &le_tasks->slots[slotno];
	SpinLockAcquire(&slot->mutex);
	if (!slot->in_use || slot->task_id != task_id || slot->pid != 0)
	{
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	slot->running = false;
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);
	on_shmem_exit(le_leave_slot, PointerGetDatum(slot));
	return slot;
}

/* Publish a run so that the launcher keeps its lease alive. */
static void
le_publish_run(LeTaskSlot *slot, int64 run_id, int64 term, int64 ttl_usecs,
			   TimestampTz expires)
{
	PGPROC	   *launcher;

	SpinLockAcquire(&slot->mutex);
	slot->running = true;
	slot->run_id = run_id;
	slot->term = term;
	slot->ttl_usecs = ttl_usecs;
	pg_atomic_write_u64(&slot->confirmed_expires, (uint64) expires);
	slot->cancel_requested = false;
	SpinLockRelease(&slot->mutex);

	/* Wake the launcher: its next renewal may be due sooner than it thinks. */
	SpinLockAcquire(&le_tasks->mutex);
	launcher = le_tasks->launcher;
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

/* ---- the lease and the run records ---- */

/* Release the runner's lease on name, in a transaction of its own. */
static void
le_worker_release(const char *name, const char *identity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	le_task_set_lock_timeout();
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
	le_exec_as_task_tables_owner("UPDATE leader_election.task_runs SET status = 'failed',"
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
	le_exec_as_task_tables_owner("UPDATE leader_election.tasks SET last_started_at = pg_catalog.clock_timestamp(),"
								 " last_status = 'running' WHERE id OPERATOR(pg_catalog.=) $1",
								 1, types, values, NULL, false, 0);
	le_exec_as_task_tables_owner("INSERT INTO leader_election.task_runs"
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

	le_task_xact_begin();
	values[0] = Int64GetDatum(task_id);
	values[1] = Int64GetDatum(run_id);
	values[2] = CStringGetTextDatum(status);
	if (error != NULL)
		values[3] = CStringGetTextDatum(error);
	else
		nulls[3] = 'n';
	values[4] = Int32GetDatum(le_task_runs_max);
	le_exec_as_task_tables_owner("UPDATE leader_election.task_runs SET status = $3, error = $4,"
								 " finished_at = pg_catalog.clock_timestamp()"
								 " WHERE id OPERATOR(pg_catalog.=) $2",
								 5, types, values, nulls, false, 0);
	le_exec_as_task_tables_owner("UPDATE leader_election.tasks SET last_status = $3,"
								 " last_finished_at = pg_catalog.clock_timestamp()"
								 " WHERE id OPERATOR(pg_catalog.=) $1",
								 5, types, values, nulls, false, 0);
	/* Keep the newest task_runs_max rows of this task. */
	le_exec_as_task_tables_owner("DELETE FROM leader_election.task_runs"
								 " WHERE task_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.<=)"
								 " (SELECT r.id FROM leader_election.task_runs AS r"
								 "   WHERE r.task_id OPERATOR(pg_catalog.=) $1"
								 "   ORDER BY r.id DESC OFFSET $5 LIMIT 1)",
								 5, types, values, nulls, false, 0);
	le_task_xact_commit();
}

/* ---- the run ---- */

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

/*
 * Run the task once, in term, as the 'running' row run_id that the caller
 * has committed, and record how it ended.
 */
static void
le_run_task(LeTaskSlot *slot, const LeTask *t, int64 term, int64 run_id,
			TimestampTz expires, MemoryContext cxt)
{
	ErrorData  *edata;
	char		reason[LE_TASK_REASON_LEN];
	bool		cancelled;

	le_publish_run(slot, run_id, term, t->ttl_usecs, expires);

	le_worker_in_run = true;
	if (le_worker_shutdown)
	{
		/* SIGTERM came before the run was published: cancel it at once. */
		QueryCancelPending = true;
		InterruptPending = true;
	}
	le_watchdog_start(slot, t->ttl_usecs);
	edata = le_call_procedure(t, term, cxt);
	le_worker_in_run = false;
	disable_timeout(le_watchdog_timeout, false);
	QueryCancelPending = false; /* a cancel that came too late to matter */

	cancelled = le_unpublish_run(slot, reason);

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
}

/* ---- the worker ---- */

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

	slot = le_claim_slot(DatumGetInt32(main_arg), args.task_id);
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
	le_task_xact_begin();
	le_close_orphan_runs(args.task_id);
	le_task_xact_commit();

	while (!le_worker_shutdown)
	{
		LeTask		t;
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
		le_task_xact_begin();
		le_task_set_lock_timeout();
		found = le_task_load(args.task_id, &t, tick_cxt);
		if (found && t.enabled)
		{
			if (lease_name == NULL)
			{
				lease_name = MemoryContextStrdup(worker_cxt, t.name);
				SetConfigOption("application_name",
								psprintf("leader_election task %s", t.name),
								PGC_USERSET, PGC_S_SESSION);
			}
			now = GetCurrentTimestamp();
			if (now >= next_due)
				problem = le_task_problem(&t);
			if (problem != NULL)
				le_task_disable(&t, problem);
			else
			{
				leader = le_try_acquire(t.name, t.ttl_usecs, &who, &retry_at);
				if (leader)
				{
					LeaseRow	row;

					CommandCounterIncrement();
					le_store_read(t.name, &row);
					term = row.term;
					expires = row.expires_at;
					now = GetCurrentTimestamp();
					run = now >= next_due && le_lease_valid(&row, now);
					if (run)
						run_id = le_record_start(&t, term, identity);
				}
			}
		}
		le_task_xact_commit();

		if (!found || !t.enabled || problem != NULL)
			break;				/* unregistered or disabled: stop */

		if (run)
		{
			TimestampTz started = GetCurrentTimestamp();

			le_run_task(slot, &t, term, run_id, expires, tick_cxt);
			/* Start to start; an overrun delays the next run, no overlap. */
			next_due = Max(started + t.every_usecs, GetCurrentTimestamp());
			continue;
		}

		/* Sleep until the next run, renewal or campaign. */
		now = GetCurrentTimestamp();
		if (leader)
			sleep_ms = Min((next_due - now) / 1000, t.ttl_usecs / 3000);
		else
			sleep_ms = Min(LE_CAMPAIGN_MS, t.ttl_usecs / 3000);
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
