/*-------------------------------------------------------------------------
 *
 * task_launcher.c
 *	  The task runner's launcher: its settings and shared memory, its
 *	  registration as a static background worker, and its loop, which
 *	  starts and stops one dynamic worker per enabled task and renews the
 *	  leases of tasks that are in the middle of a run.
 *
 * The launcher is the only process that hands out or takes back a task
 * slot (in_use, task_id) and the only one that asks a run to stop
 * (cancel_requested); the locking rules of the slots are in task_runner.h,
 * next to the struct, and the design of the runner above them.
 *
 * The launcher must never run a task's procedure or act as a task's owner:
 * it connects as the bootstrap superuser, and user code only ever runs in
 * a task worker connected as the task's owner (task_worker.c).  It renews
 * a lease only for a run in progress, and only in that run's term.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/memutils.h"

#include "compat.h"
#include "task_runner.h"

#define LE_LAUNCHER_SCAN_MS		1000	/* how often tasks are re-read */

/* ---- settings ---- */

char	   *le_task_database = NULL;
int			le_max_task_workers = 4;
char	   *le_task_holder_id = NULL;
bool		le_allow_superuser_tasks = false;
int			le_task_runs_max = 1000;

/* Set in the postmaster when loaded from shared_preload_libraries. */
bool		le_task_runner_preloaded = false;

static bool
le_check_task_holder_id(char **newval, void **extra, GucSource source)
{
	return le_check_holder_setting(*newval, "leader_election.task_holder_id");
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

/* ---- shared memory ---- */

LeTaskShared *le_tasks = NULL;

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
			pg_atomic_init_u64(&le_tasks->slots[i].confirmed_expires, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ---- background worker registration ---- */

/* The fields the launcher and the task workers have in common. */
static void
le_init_bgworker(BackgroundWorker *worker, const char *function, const char *type)
{
	memset(worker, 0, sizeof(BackgroundWorker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "leader_election");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_type, BGW_MAXLEN, "%s", type);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
le_task_runner_register(void)
{
	BackgroundWorker worker;

	le_task_runner_preloaded = true;
	if (le_max_task_workers == 0)
		return;

	le_init_bgworker(&worker, "le_launcher_main", "leader_election launcher");
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_name, BGW_MAXLEN, "leader_election launcher");
	RegisterBackgroundWorker(&worker);
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

/* ---- the launcher's slots ---- */

/*
 * What the launcher remembers about a slot it handed out.  A slot in use
 * without a handle belongs to a worker of a previous launcher that is still
 * exiting (see le_launcher_main).
 */
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

	le_init_bgworker(&worker, "le_task_worker_main", "leader_election task");
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_name, BGW_MAXLEN, "leader_election task %s", t->name);
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

/* Is the extension installed in this database (it may be dropped)? */
static bool
le_extension_installed(void)
{
	int			rc;

	rc = SPI_execute("SELECT 1 FROM pg_catalog.pg_extension"
					 " WHERE extname OPERATOR(pg_catalog.=) 'leader_election'",
					 true, 1);
	return rc == SPI_OK_SELECT && SPI_processed == 1;
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
	int			ntasks = 0;
	bool	   *wanted;
	MemoryContext old = CurrentMemoryContext;

	PG_TRY();
	{
		le_task_xact_begin();
		if (le_extension_installed())
		{
			LeTask	   *enabled;
			int			nenabled;

			enabled = le_task_load_enabled(cxt, &nenabled);
			tasks = MemoryContextAlloc(cxt, sizeof(LeTask) * Max(nenabled, 1));
			for (int k = 0; k < nenabled; k++)
			{
				char	   *problem = le_task_problem(&enabled[k]);

				if (problem != NULL)
					le_task_disable(&enabled[k], problem);
				else
					tasks[ntasks++] = enabled[k];
			}
		}
		le_task_xact_commit();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
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
		LeLauncherSlot *mine = &le_launcher_slots[i];
		int64		task_id;
		bool		in_use;
		bool		gone;
		bool		keep = false;
		pid_t		pid;

		SpinLockAcquire(&slot->mutex);
		in_use = slot->in_use;
		task_id = slot->task_id;
		pid = slot->pid;
		SpinLockRelease(&slot->mutex);
		if (!in_use)
			continue;
		if (mine->handle == NULL)
			gone = (pid == 0);	/* a previous launcher's worker */
		else
			gone = (GetBackgroundWorkerPid(mine->handle, &pid) == BGWH_STOPPED);
		if (gone)
		{
			le_free_slot(i);
			continue;
		}
		/* A worker still exiting counts as the task's worker till it is gone. */
		for (int k = 0; k < ntasks; k++)
			if (tasks[k].id == task_id)
			{
				wanted[k] = true;
				keep = true;
			}
		if (!keep && mine->handle != NULL && !mine->stopping)
		{
			TerminateBackgroundWorker(mine->handle);
			mine->stopping = true;
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

/* ---- runs in progress ---- */

/*
 * Ask the worker of slot to stop run run_id; repeated while the run lasts.
 * Does nothing if that run has already ended, so a request can never hit
 * the worker's next run.
 */
static void
le_cancel_run(LeTaskSlot *slot, int64 run_id, const char *reason)
{
	pid_t		pid = 0;
	bool		first = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->running && slot->run_id == run_id)
	{
		first = !slot->cancel_requested;
		if (first)
		{
			slot->cancel_requested = true;
			strlcpy(slot->cancel_reason, reason, LE_TASK_REASON_LEN);
		}
		pid = slot->pid;
	}
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
		le_task_set_lock_timeout();
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
		if (slot->running && slot->term == term &&
			expires > (TimestampTz) pg_atomic_read_u64(&slot->confirmed_expires))
			pg_atomic_write_u64(&slot->confirmed_expires, (uint64) expires);
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
		int64		run_id;
		int64		term;
		int64		ttl;
		TimestampTz confirmed;
		TimestampTz now;
		bool		lost = false;

		SpinLockAcquire(&slot->mutex);
		running = slot->in_use && slot->running;
		run_id = slot->run_id;
		term = slot->term;
		ttl = slot->ttl_usecs;
		SpinLockRelease(&slot->mutex);
		if (!running || le_launcher_slots[i].name == NULL)
			continue;

		now = GetCurrentTimestamp();
		confirmed = (TimestampTz) pg_atomic_read_u64(&slot->confirmed_expires);
		/* Renew every ttl/3 (counting from the worker's own renewal). */
		if (now >= confirmed - 2 * ttl / 3 &&
			now >= le_launcher_slots[i].last_renewal + ttl / 6)
		{
			le_launcher_slots[i].last_renewal = now;
			if (!le_renew_for_run(i, identity, term, ttl, &lost) && lost)
				le_cancel_run(slot, run_id,
							  "leadership lost: the lease is held by another holder or in another term");
			confirmed = (TimestampTz) pg_atomic_read_u64(&slot->confirmed_expires);
		}
		/* Safety margin: stop before the lease can expire unrenewed. */
		now = GetCurrentTimestamp();
		if (!lost && now >= confirmed - ttl / 4)
			le_cancel_run(slot, run_id,
						  "leadership lost: the lease could not be renewed in time");
		sleep_ms = Min(sleep_ms, ttl / 6000);
	}
	return Max(sleep_ms, 10);
}

/* ---- the launcher ---- */

/*
 * However the launcher exits -- shutdown, or an error, after which the
 * postmaster restarts it -- its workers stop too (each releases its lease),
 * so that the next launcher never runs a task beside a worker it does not
 * know about.
 */
static void
le_launcher_exit(int code, Datum arg)
{
	for (int i = 0; i < le_tasks->nslots; i++)
		if (le_launcher_slots[i].handle != NULL)
			TerminateBackgroundWorker(le_launcher_slots[i].handle);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launcher = NULL;
	SpinLockRelease(&le_tasks->mutex);
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

	/*
	 * A previous launcher told its workers to stop when it exited
	 * (le_launcher_exit).  Slots whose worker is gone are free; a worker
	 * still exiting keeps its slot, and its task gets no second worker,
	 * until it is gone (le_launcher_scan).
	 */
	for (int i = 0; i < le_tasks->nslots; i++)
	{
		LeTaskSlot *slot = &le_tasks->slots[i];

		SpinLockAcquire(&slot->mutex);
		slot->in_use = (slot->pid != 0);
		SpinLockRelease(&slot->mutex);
	}
	le_compute_identity(identity);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launcher = MyProc;
	strlcpy(le_tasks->identity, identity, sizeof(le_tasks->identity));
	SpinLockRelease(&le_tasks->mutex);
	before_shmem_exit(le_launcher_exit, (Datum) 0);
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
		if (GetCurrentTimestamp() >= next_scan)
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

	proc_exit(1);				/* 1: restart me unless the server is stopping */
}
