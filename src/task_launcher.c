/*-------------------------------------------------------------------------
 *
 * task_launcher.c
 *	  The task runner's launchers: their settings and shared memory, their
 *	  registration as static background workers (one per database listed in
 *	  leader_election.database), and the launcher's loop, which
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
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/array.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/varlena.h"

#include "compat.h"
#include "task_runner.h"

#define LE_LAUNCHER_SCAN_MS		1000	/* how often tasks are re-read */

/* ---- settings ---- */

char	   *le_task_database = NULL;
int			le_max_task_workers = 4;
int			le_max_task_workers_per_role = 0;
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

/*
 * Split a value of leader_election.database into database names: a comma-
 * separated list; a name with a comma, a space or a double quote is written
 * in double quotes; names are not folded to lower case.  NIL, with *problem
 * set, if the value is no such list.
 */
static List *
le_split_database_list(const char *value, const char **problem)
{
	char	   *raw = pstrdup(value);
	List	   *names = NIL;
	ListCell   *lc;

	*problem = NULL;
	if (!SplitGUCList(raw, ',', &names))
		*problem = "is not a list of database names (quote names with a comma, a space or a double quote)";
	else if (names == NIL)
		*problem = "must name at least one database";
	else if (list_length(names) > LE_TASK_MAX_DATABASES)
		*problem = psprintf("may name at most %d databases", LE_TASK_MAX_DATABASES);
	else
		foreach(lc, names)
		{
			const char *name = lfirst(lc);

			if (name[0] == '\0')
				*problem = "contains an empty database name";
			else if (strlen(name) >= NAMEDATALEN)
				*problem = psprintf("names a database longer than %d bytes", NAMEDATALEN - 1);
			for (ListCell *other = list_head(names); *problem == NULL && other != lc;
				 other = lnext(names, other))
				if (strcmp(lfirst(other), name) == 0)
					*problem = psprintf("names database \"%s\" twice", name);
			if (*problem != NULL)
				break;
		}
	return *problem == NULL ? names : NIL;
}

static bool
le_check_task_database(char **newval, void **extra, GucSource source)
{
	const char *problem;

	if (*newval != NULL)
	{
		(void) le_split_database_list(*newval, &problem);
		if (problem != NULL)
		{
			GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
			GUC_check_errmsg("leader_election.database %s", problem);
			return false;
		}
	}
	return true;
}

/* The databases whose tasks run, in the order of the setting. */
List *
le_task_database_list(void)
{
	const char *problem;
	List	   *names = le_split_database_list(le_task_database, &problem);

	if (names == NIL)
		elog(ERROR, "leader_election.database %s", problem);
	return names;
}

/* Is dbname one of the databases whose tasks run? */
bool
le_task_database_listed(const char *dbname)
{
	ListCell   *lc;

	foreach(lc, le_task_database_list())
		if (strcmp(lfirst(lc), dbname) == 0)
			return true;
	return false;
}

void
le_task_define_settings(void)
{
	DefineCustomStringVariable("leader_election.database",
							   "Databases whose leader_election.tasks the task runner runs.",
							   "A comma-separated list; one launcher per database.",
							   &le_task_database,
							   "postgres",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY | GUC_LIST_INPUT,
							   le_check_task_database, NULL, NULL);

	DefineCustomIntVariable("leader_election.max_task_workers",
							"Most tasks the task runner runs at once.",
							"Each running task uses one background worker process.",
							&le_max_task_workers,
							4, 0, 64,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("leader_election.max_task_workers_per_role",
							"Most task workers the tasks of one role may have at once.",
							"0 means no limit beyond leader_election.max_task_workers.",
							&le_max_task_workers_per_role,
							0, 0, 64,
							PGC_SIGHUP,
							GUC_SUPERUSER_ONLY,
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

/*
 * Called from _PG_init while shared_preload_libraries is processed: one
 * launcher per listed database; its argument is the database's position in
 * the list.
 */
void
le_task_runner_register(void)
{
	BackgroundWorker worker;
	ListCell   *lc;

	le_task_runner_preloaded = true;
	if (le_max_task_workers == 0)
		return;

	foreach(lc, le_task_database_list())
	{
		le_init_bgworker(&worker, "le_launcher_main", "leader_election launcher");
		worker.bgw_restart_time = 1;
		worker.bgw_main_arg = Int32GetDatum(foreach_current_index(lc));
		snprintf(worker.bgw_name, BGW_MAXLEN, "leader_election launcher %s",
				 (char *) lfirst(lc));
		RegisterBackgroundWorker(&worker);
	}
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

/* This launcher: its position in leader_election.database, and the name. */
static int	le_me = -1;
static char *le_my_database = NULL;

/* Is the slot (read under its mutex) one of this launcher's? */
#define LE_SLOT_MINE(slot)	((slot)->in_use && (slot)->launcher == le_me)

/*
 * What the launcher remembers about a slot it handed out.  A slot in use
 * without a handle belongs to a worker of a previous launcher that is still
 * exiting (see le_launcher_main).
 */
typedef struct LeLauncherSlot
{
	BackgroundWorkerHandle *handle;
	char	   *name;			/* lease name of the task */
	TimestampTz started;		/* when the worker was started */
	TimestampTz last_renewal;	/* last renewal attempt during a run */
} LeLauncherSlot;

static LeLauncherSlot *le_launcher_slots;

/*
 * What the launcher remembers about a task across scans: its worker's
 * deaths in a row (task_runner.h, "Worker deaths") and the state it shows
 * in tasks.runner_state.  Forgotten once the task is no longer enabled.
 */
typedef struct LeTaskInfo
{
	int64		id;				/* hash key */
	char		name[LE_MAX_NAME_BYTES + 1];
	int			deaths;			/* in a row: the backoff */
	int			blamed;			/* of those, deaths that blame the task */
	TimestampTz retry_at;		/* no worker before this */
	char		last_error[LE_TASK_ERROR_LEN];
	char		state[128];		/* what the task should show */
	bool		state_written;	/* tasks.runner_state says state */
	bool		seen;			/* enabled in this scan */
} LeTaskInfo;

static HTAB *le_task_info = NULL;

/* The last scan found the extension missing, and said so in the log. */
static bool le_said_not_installed = false;

static LeTaskInfo *
le_info(int64 id, const char *name)
{
	bool		found;
	LeTaskInfo *info = hash_search(le_task_info, &id, HASH_ENTER, &found);

	if (!found)
	{
		memset(((char *) info) + sizeof(int64), 0, sizeof(LeTaskInfo) - sizeof(int64));
		strlcpy(info->name, name, sizeof(info->name));
	}
	return info;
}

/*
 * Set the state a task shows; a waiting state is logged once, when the
 * task enters it.
 */
static void
le_info_state(LeTaskInfo *info, const char *state, const char *detail)
{
	if (strcmp(info->state, state) == 0)
		return;
	strlcpy(info->state, state, sizeof(info->state));
	info->state_written = false;
	if (strncmp(state, "waiting", 7) == 0)
		ereport(LOG,
				(errmsg("leader_election: task \"%s\" waits%s", info->name, state + strlen("waiting")),
				 detail ? errdetail_internal("%s", detail) : 0));
}

/* Make slot free; the caller holds its mutex and knows its worker is gone. */
static void
le_clear_slot(LeTaskSlot *slot)
{
	slot->in_use = false;
	slot->task_id = 0;
	slot->owner = InvalidOid;
	slot->database = InvalidOid;
	slot->name[0] = '\0';
	slot->stopping = false;
	slot->pid = 0;
	slot->running = false;
	slot->cancel_requested = false;
}

static void
le_free_slot(int i)
{
	LeTaskSlot *slot = &le_tasks->slots[i];

	SpinLockAcquire(&slot->mutex);
	le_clear_slot(slot);
	SpinLockRelease(&slot->mutex);
	if (le_launcher_slots[i].handle)
		pfree(le_launcher_slots[i].handle);
	if (le_launcher_slots[i].name)
		pfree(le_launcher_slots[i].name);
	memset(&le_launcher_slots[i], 0, sizeof(LeLauncherSlot));
}

/*
 * The slots of this launcher's predecessors (the launchers of the same
 * position in leader_election.database, which all exited before this one
 * started): those whose worker is gone are free; those whose worker is
 * still exiting are marked stopping, keep their name taken and are freed
 * by a later call or by le_launcher_scan once the worker is gone.  A slot
 * whose worker lives (pid set) is never freed here.
 *
 * Only a launcher of the same position frees these slots, and the
 * postmaster starts one again and again even while it cannot connect, so
 * this runs before connecting and every second while waiting to connect:
 * the slots of a database that was dropped (DROP DATABASE ... WITH
 * (FORCE) ends the launcher and the workers connected to it), or that
 * no longer accepts connections, come back as soon as their workers are
 * gone, for the other databases' tasks and the role quotas.
 */
static void
le_free_predecessor_slots(void)
{
	for (int i = 0; i < le_tasks->nslots; i++)
	{
		LeTaskSlot *slot = &le_tasks->slots[i];

		SpinLockAcquire(&slot->mutex);
		if (slot->in_use && slot->launcher == le_me)
		{
			if (slot->pid == 0)
				le_clear_slot(slot);
			else
				slot->stopping = true;
		}
		SpinLockRelease(&slot->mutex);
	}
}

/* Tell slot i's worker to stop; from now on its lease is not renewed. */
static void
le_stop_slot(int i)
{
	LeTaskSlot *slot = &le_tasks->slots[i];
	bool		first;

	SpinLockAcquire(&slot->mutex);
	first = !slot->stopping;
	slot->stopping = true;
	SpinLockRelease(&slot->mutex);
	if (first && le_launcher_slots[i].handle != NULL)
		TerminateBackgroundWorker(le_launcher_slots[i].handle);
}

/* Outcome of le_start_worker(). */
typedef enum LeStart
{
	LE_START_OK,
	LE_START_SLOT_TAKEN,		/* another database's launcher claimed it */
	LE_START_NO_BGWORKER		/* no background worker was free */
} LeStart;

/* Start a worker for t in slot i. */
static LeStart
le_start_worker(const LeTask *t, int i)
{
	BackgroundWorker worker;
	LeWorkerArgs args;
	LeTaskSlot *slot = &le_tasks->slots[i];
	BackgroundWorkerHandle *handle;
	MemoryContext old;
	bool		started;

	/* Another database's launcher may have claimed the slot meanwhile. */
	SpinLockAcquire(&slot->mutex);
	if (slot->in_use)
	{
		SpinLockRelease(&slot->mutex);
		return LE_START_SLOT_TAKEN;
	}
	slot->in_use = true;
	slot->launcher = le_me;
	slot->database = MyDatabaseId;
	slot->task_id = t->id;
	slot->owner = t->owner;
	strlcpy(slot->name, t->name, sizeof(slot->name));
	slot->stopping = false;
	slot->pid = 0;
	slot->running = false;
	slot->cancel_requested = false;
	slot->exit_expected = false;
	slot->last_error[0] = '\0';
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
		le_free_slot(i);
		return LE_START_NO_BGWORKER;
	}
	le_launcher_slots[i].handle = handle;
	le_launcher_slots[i].name = MemoryContextStrdup(TopMemoryContext, t->name);
	le_launcher_slots[i].started = GetCurrentTimestamp();
	le_launcher_slots[i].last_renewal = 0;
	return LE_START_OK;
}

/*
 * Slot i's worker is gone: count it against its task if it died on an
 * error rather than because it was told to stop (task_runner.h, "Worker
 * deaths").
 */
static void
le_worker_gone(int i)
{
	LeTaskSlot *slot = &le_tasks->slots[i];
	LeLauncherSlot *mine = &le_launcher_slots[i];
	bool		expected;
	bool		stopping;
	bool		blames;
	int64		task_id;
	char		error[LE_TASK_ERROR_LEN];
	LeTaskInfo *info;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&slot->mutex);
	expected = slot->exit_expected;
	stopping = slot->stopping;
	task_id = slot->task_id;
	strlcpy(error, slot->last_error, sizeof(error));
	blames = slot->error_blames_task;
	SpinLockRelease(&slot->mutex);

	if (mine->handle == NULL || mine->name == NULL)
		return;					/* a previous launcher's worker */
	info = le_info(task_id, mine->name);
	if (expected || stopping)
	{
		info->deaths = 0;
		info->blamed = 0;
		info->retry_at = 0;
		return;
	}
	/* A worker that lived a while before dying starts a new count. */
	if (now - mine->started >= LE_TASK_BACKOFF_MAX_MS * (int64) 1000)
	{
		info->deaths = 0;
		info->blamed = 0;
	}
	info->deaths++;
	if (blames)
		info->blamed++;
	strlcpy(info->last_error, error[0] ? error : "(no message)", sizeof(info->last_error));
	info->retry_at = TimestampTzPlusMilliseconds(now,
												 Min(1000L << Min(info->deaths - 1, 16),
													 LE_TASK_BACKOFF_MAX_MS));
	ereport(LOG,
			(errmsg("leader_election: the worker of task \"%s\" exited on an error (%d in a row): %s",
					mine->name, info->deaths, info->last_error)));
}

/* How many slots the tasks of role hold (workers alive or exiting). */
static int
le_role_workers(Oid role)
{
	int			n = 0;

	for (int i = 0; i < le_tasks->nslots; i++)
	{
		LeTaskSlot *slot = &le_tasks->slots[i];

		SpinLockAcquire(&slot->mutex);
		if (slot->in_use && slot->owner == role)
			n++;
		SpinLockRelease(&slot->mutex);
	}
	return n;
}

/*
 * The next task to hand a slot to: of those not handled yet, one whose
 * role holds the fewest slots (workers[k] for tasks[k]), the lowest id
 * among them (tasks are in id order).
 */
static int
le_next_fair_task(int ntasks, const bool *handled, const int *workers)
{
	int			best = -1;

	for (int k = 0; k < ntasks; k++)
		if (!handled[k] && (best < 0 || workers[k] < workers[best]))
			best = k;
	return best;
}

/*
 * Close the 'running' records of runs whose worker is gone (crash,
 * watchdog, a task disabled or unregistered meanwhile).  Rows being closed
 * by their exiting worker right now are locked and skipped.
 */
static void
le_close_dead_runs(void)
{
	Datum	   *pids = palloc(sizeof(Datum) * (le_tasks->nslots + 1));
	int			n = 0;
	Oid			types[1] = {INT4ARRAYOID};
	Datum		values[1];

	pids[n++] = Int32GetDatum(0);
	for (int i = 0; i < le_tasks->nslots; i++)
	{
		pid_t		pid;

		SpinLockAcquire(&le_tasks->slots[i].mutex);
		pid = le_tasks->slots[i].pid;
		SpinLockRelease(&le_tasks->slots[i].mutex);
		if (pid != 0)
			pids[n++] = Int32GetDatum((int32) pid);
	}
	values[0] = PointerGetDatum(construct_array(pids, n, INT4OID, sizeof(int32), true,
												TYPALIGN_INT));
	le_exec_as_task_tables_owner("UPDATE leader_election.task_runs SET status = 'failed',"
								 " finished_at = pg_catalog.clock_timestamp(),"
								 " error = 'the task worker exited during the run'"
								 " WHERE id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT r.id"
								 "   FROM leader_election.task_runs AS r"
								 "   WHERE r.status OPERATOR(pg_catalog.=) 'running'"
								 "   AND NOT (r.pid OPERATOR(pg_catalog.=) ANY ($1))"
								 "   FOR UPDATE SKIP LOCKED))",
								 1, types, values, NULL, false, 0);
}

/*
 * Read the enabled tasks, disable those that cannot run, start and stop
 * workers to match, one worker per lease name; close the records of dead
 * runs; show each task's state.  Errors (say, the extension being dropped)
 * are logged and the launcher carries on.  Nothing here waits for another
 * session's row locks (task_runner.h, "Locks").
 */
static void
le_launcher_scan(MemoryContext cxt)
{
	MemoryContext old = CurrentMemoryContext;

	PG_TRY();
	{
		LeTask	   *tasks = NULL;
		int			ntasks = 0;
		bool		bgworkers_full = false;
		bool		installed;
		HASH_SEQ_STATUS seq;
		LeTaskInfo *info;
		TimestampTz now;
		bool	   *handled;
		bool		slots_may_be_free;
		int		   *workers;

		le_task_xact_begin();
		installed = le_extension_installed();
		if (!installed && !le_said_not_installed)
			ereport(LOG,
					(errmsg("leader_election: database \"%s\" has no leader_election extension; its tasks are skipped",
							le_my_database),
					 errdetail("The launcher looks again every second and says nothing more until the extension is there.")));
		le_said_not_installed = !installed;
		if (installed)
		{
			LeTask	   *enabled;
			int			nenabled;

			enabled = le_task_load_enabled(cxt, &nenabled);
			tasks = MemoryContextAlloc(cxt, sizeof(LeTask) * Max(nenabled, 1));
			for (int k = 0; k < nenabled; k++)
			{
				char	   *problem = le_task_problem(&enabled[k]);

				if (problem != NULL)
					(void) le_task_disable(&enabled[k], problem);
				else
					tasks[ntasks++] = enabled[k];
			}
		}
		MemoryContextSwitchTo(cxt);

		hash_seq_init(&seq, le_task_info);
		while ((info = hash_seq_search(&seq)) != NULL)
			info->seen = false;

		/* Forget dead workers; stop those whose task is gone or disabled. */
		for (int i = 0; i < le_tasks->nslots; i++)
		{
			LeTaskSlot *slot = &le_tasks->slots[i];
			LeLauncherSlot *mine = &le_launcher_slots[i];
			int64		task_id;
			bool		in_use;
			bool		gone;
			bool		keep = false;
			pid_t		pid;
			pid_t		worker_pid;

			SpinLockAcquire(&slot->mutex);
			in_use = LE_SLOT_MINE(slot);
			task_id = slot->task_id;
			pid = slot->pid;
			SpinLockRelease(&slot->mutex);
			if (!in_use)
				continue;		/* free, or another database's */
			if (mine->handle == NULL)
				gone = (pid == 0);	/* a previous launcher's worker */
			else if (GetBackgroundWorkerPid(mine->handle, &worker_pid) != BGWH_STOPPED)
				gone = false;
			else if (pid == 0)
				gone = true;
			else
			{
				/*
				 * Our worker is gone without having the slot (its exit
				 * would have cleared pid), yet the slot has a live worker:
				 * one a previous launcher registered that started late.  A
				 * slot is never freed while its worker lives: treat it as a
				 * previous launcher's worker and tell it to stop.
				 */
				pfree(mine->handle);
				mine->handle = NULL;
				le_stop_slot(i);
				kill(pid, SIGTERM);
				continue;
			}
			if (gone)
			{
				le_worker_gone(i);
				le_free_slot(i);
				continue;
			}
			for (int k = 0; k < ntasks; k++)
				if (tasks[k].id == task_id)
					keep = true;
			if (!keep)
				le_stop_slot(i);
		}

		/*
		 * Start workers for enabled tasks that have none, one per lease name:
		 * a worker still exiting keeps its name taken till it is gone.  The
		 * tasks of the roles with the fewest workers go first, and no role
		 * gets more than its quota (task_runner.h, "Slots").
		 */
		now = GetCurrentTimestamp();
		slots_may_be_free = true;
		handled = MemoryContextAllocZero(cxt, sizeof(bool) * Max(ntasks, 1));
		workers = MemoryContextAlloc(cxt, sizeof(int) * Max(ntasks, 1));
		for (int k = 0; k < ntasks; k++)
			workers[k] = le_role_workers(tasks[k].owner);
		for (int round = 0, in_order = 0; round < ntasks; round++)
		{
			LeTask	   *t;
			int			k;

			int			free_slot = -1;
			bool		has_worker = false;
			bool		name_taken = false;
			int			role_workers;

			/*
			 * While a slot may be free, the fair order decides who gets it;
			 * once none is, the rest only have their states shown, in id
			 * order (the fair pick is linear: over every task it would make
			 * the scan quadratic in the number of tasks).
			 */
			if (slots_may_be_free)
				k = le_next_fair_task(ntasks, handled, workers);
			else
			{
				while (handled[in_order])
					in_order++;
				k = in_order;
			}

			role_workers = workers[k];
			handled[k] = true;
			t = &tasks[k];

			info = le_info(t->id, t->name);
			info->seen = true;
			for (int i = 0; i < le_tasks->nslots; i++)
			{
				LeTaskSlot *slot = &le_tasks->slots[i];

				SpinLockAcquire(&slot->mutex);
				if (!slot->in_use)
				{
					if (free_slot < 0)
						free_slot = i;
				}
				else if (slot->database == MyDatabaseId &&
						 strcmp(slot->name, t->name) == 0)
				{
					if (slot->task_id == t->id && !slot->stopping)
						has_worker = true;
					else
						name_taken = true;
				}
				SpinLockRelease(&slot->mutex);
			}
			if (free_slot < 0)
				slots_may_be_free = false;

			if (has_worker)
				le_info_state(info, "worker started", NULL);
			else if (name_taken)
				le_info_state(info, "waiting for the previous worker of its name to exit", NULL);
			else if (info->blamed >= LE_TASK_MAX_DEATHS)
			{
				char	   *reason = psprintf("the task's worker exited on an error %d times in a row; last error: %s",
											  info->deaths, info->last_error);

				if (le_task_disable(t, reason))
				{
					info->deaths = 0;
					info->blamed = 0;
					info->retry_at = 0;
				}
			}
			else if (now < info->retry_at)
				le_info_state(info, psprintf("waiting to restart after %d worker failures in a row",
											 info->deaths), NULL);
			else if (le_max_task_workers_per_role > 0 &&
					 role_workers >= le_max_task_workers_per_role)
				le_info_state(info, psprintf("waiting for a task worker slot (its role has leader_election.max_task_workers_per_role = %d workers)",
											 le_max_task_workers_per_role),
							  psprintf("Role \"%s\" already has as many task workers as leader_election.max_task_workers_per_role allows.",
									   t->role_name));
			else if (free_slot < 0)
				le_info_state(info, psprintf("waiting for a task worker slot (leader_election.max_task_workers = %d)",
											 le_max_task_workers),
							  "Every task worker slot is in use; raise leader_election.max_task_workers.");
			else
			{
				LeStart		started = bgworkers_full ? LE_START_NO_BGWORKER :
					le_start_worker(t, free_slot);

				if (started == LE_START_OK)
				{
					le_info_state(info, "worker started", NULL);
					for (int j = 0; j < ntasks; j++)
						if (tasks[j].owner == t->owner)
							workers[j]++;
				}
				else if (started == LE_START_NO_BGWORKER)
				{
					bgworkers_full = true;
					le_info_state(info, "waiting for a background worker (max_worker_processes)",
								  psprintf("Every one of the max_worker_processes (%d) background workers is in use; raise it.",
										   max_worker_processes));
				}
				/* LE_START_SLOT_TAKEN: look again at the next scan */
			}
		}

		/* Show the states; forget tasks that are no longer enabled. */
		hash_seq_init(&seq, le_task_info);
		while ((info = hash_seq_search(&seq)) != NULL)
		{
			if (!info->seen)
				(void) hash_search(le_task_info, &info->id, HASH_REMOVE, NULL);
			else if (!info->state_written && info->state[0] != '\0')
				info->state_written = le_task_set_state(info->id, info->state);
		}

		if (installed)
			le_close_dead_runs();
		le_task_xact_commit();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
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

	PG_TRY();
	{
		LeaseRow	row;
		LeIdentity	who;

		le_task_xact_begin();
		who.holder = pstrdup(identity);
		who.session_bound = false;
		le_store_read(name, &row);
		if (!row.found || row.holder == NULL || strcmp(row.holder, identity) != 0 ||
			row.term != term)
			gone = true;
		else if (le_renew_without_waiting(name, ttl, &who))
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
		le_task_xact_commit();
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
		if (slot->running && slot->term == term && !slot->stopping &&
			expires > (TimestampTz) pg_atomic_read_u64(&slot->confirmed_expires))
			pg_atomic_write_u64(&slot->confirmed_expires, (uint64) expires);
		SpinLockRelease(&slot->mutex);
	}
	return renewed;
}

/*
 * Keep the leases of running tasks alive; cancel runs whose lease is lost
 * or about to expire.  A slot told to stop is never renewed.  Returns how
 * long the launcher may sleep (ms).
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
		running = LE_SLOT_MINE(slot) && slot->running && !slot->stopping;
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
			le_stop_slot(i);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launchers[le_me].proc = NULL;
	SpinLockRelease(&le_tasks->mutex);
}

/*
 * Before connecting: if the previous launchers of this database could not
 * connect (it is missing, or not accepting connections), wait 1, 2, 4 ...
 * 60 s, and say once what is wrong.  The count, kept per listed database,
 * is reset once a launcher has connected.
 */
static void
le_launcher_connect_backoff(void)
{
	int			failures;
	bool		said;
	TimestampTz until;

	SpinLockAcquire(&le_tasks->mutex);
	failures = le_tasks->launchers[le_me].connect_failures++;
	said = le_tasks->launchers[le_me].connect_failure_said;
	le_tasks->launchers[le_me].connect_failure_said = said || failures > 0;
	SpinLockRelease(&le_tasks->mutex);
	if (failures == 0)
		return;
	if (!said)
		ereport(LOG,
				(errmsg("leader_election: the task runner cannot connect to database \"%s\"",
						le_my_database),
				 errdetail("The launcher could not connect to this database, listed in leader_election.database; it tries again after 1, 2, 4 ... 60 seconds, without saying this again.  The tasks of the other listed databases run."),
				 errhint("Create the database and the extension in it, or change leader_election.database and restart the server.")));
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										Min(1000L << Min(failures - 1, 16), LE_TASK_BACKOFF_MAX_MS));
	while (!ShutdownRequestPending)
	{
		long		ms = (until - GetCurrentTimestamp()) / 1000;

		if (ms <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms, LE_LAUNCHER_SCAN_MS), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		le_free_predecessor_slots();
	}
	if (ShutdownRequestPending)
		proc_exit(1);
}

void
le_launcher_main(Datum main_arg)
{
	MemoryContext scan_cxt;
	TimestampTz next_scan = 0;
	char		identity[LE_MAX_HOLDER_BYTES + 1];
	HASHCTL		ctl;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	le_me = DatumGetInt32(main_arg);
	le_my_database = MemoryContextStrdup(TopMemoryContext,
										 list_nth(le_task_database_list(), le_me));
	le_free_predecessor_slots();
	le_launcher_connect_backoff();
	BackgroundWorkerInitializeConnection(le_my_database, NULL, 0);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launchers[le_me].connect_failures = 0;
	le_tasks->launchers[le_me].connect_failure_said = false;
	SpinLockRelease(&le_tasks->mutex);

	le_launcher_slots = MemoryContextAllocZero(TopMemoryContext,
											   sizeof(LeLauncherSlot) * le_tasks->nslots);
	scan_cxt = AllocSetContextCreate(TopMemoryContext, "leader_election launcher scan",
									 ALLOCSET_DEFAULT_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(LeTaskInfo);
	le_task_info = hash_create("leader_election tasks", 64, &ctl, HASH_ELEM | HASH_BLOBS);

	/*
	 * A previous launcher of this database told its workers to stop when it
	 * exited (le_launcher_exit).  Its slots whose worker is gone are free
	 * (the other databases' slots are not ours to touch); a worker
	 * still exiting keeps its slot, and its name, until it is gone
	 * (le_launcher_scan), and is not renewed.
	 */
	le_free_predecessor_slots();
	le_compute_identity(identity);
	SpinLockAcquire(&le_tasks->mutex);
	le_tasks->launchers[le_me].proc = MyProc;
	strlcpy(le_tasks->identity, identity, sizeof(le_tasks->identity));
	SpinLockRelease(&le_tasks->mutex);
	before_shmem_exit(le_launcher_exit, (Datum) 0);
	ereport(LOG,
			(errmsg("leader_election launcher started in database \"%s\" as holder \"%s\"",
					le_my_database, identity)));

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
