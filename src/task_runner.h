/*-------------------------------------------------------------------------
 *
 * task_runner.h
 *	  Declarations shared by the task runner's files, and its design.
 *
 * Who owns what:
 *	  task_registry.c  what a task is: the SQL functions that register it,
 *					   the checks it must pass to run, reading it, and every
 *					   write to leader_election.tasks made for the runner
 *	  task_launcher.c  the launcher: settings, shared memory, starting and
 *					   stopping task workers, renewing leases during runs
 *	  task_worker.c    one task's worker: campaign, run, record the run
 *
 * THE DESIGN
 *
 * Registration (task_registry.c) only writes a row of leader_election.tasks;
 * it works with or without preloading.  With shared_preload_libraries =
 * 'leader_election' the postmaster starts the launcher once recovery has
 * finished (so a hot standby runs nothing and a promoted standby starts by
 * itself).  The launcher connects to the database named by
 * leader_election.database as the bootstrap superuser and, about once a
 * second:
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
 * The worker publishes (run, term, confirmed expiry) in its shared-memory
 * slot.  If a renewal finds the lease held by someone else or in another
 * term, or no renewal has succeeded and the lease is within ttl/4 of
 * expiring, the launcher cancels the run (SIGINT: a query cancel) and the
 * worker records it 'cancelled' with the reason.  The worker's own
 * watchdog cancels at ttl/8 before expiry in case the launcher cannot.
 * Afterwards the worker campaigns again.
 *
 * Shutdown.  SIGTERM (server shutdown, pg_terminate_backend, the launcher
 * stopping a task) cancels a run in progress, records it, releases the
 * lease and exits; the launcher starts a new worker if the task is still
 * enabled.  A worker that dies otherwise leaves a 'running' row, which the
 * next worker of the task closes as 'failed'.  However the launcher exits,
 * it first tells its workers to stop; a new launcher leaves the slots of
 * those still exiting alone, so a task never has two workers (which,
 * sharing the runner identity, would both believe they hold the lease).
 *
 * The runner identity is leader_election.task_holder_id, or by default
 * 'task-runner:<system identifier>:<timeline>'.  The timeline makes a
 * promoted standby a different holder from its old primary: it waits out
 * the old primary's leases instead of silently continuing their terms.
 *
 * None of these files writes lease rows itself: they call le_try_acquire(),
 * le_store_read() and release_leader() like any other caller.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LE_TASK_RUNNER_H
#define LE_TASK_RUNNER_H

#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "port/atomics.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "leader_election.h"

#define LE_TASK_REASON_LEN		160 /* why a run was cancelled */
#define LE_TASK_LOCK_TIMEOUT	"500ms" /* the runner's own lease writes */

/*
 * One task worker's slot in shared memory.
 *
 * LOCKING.  Every field but confirmed_expires is read and written under
 * mutex.  The launcher owns in_use and task_id (it hands the slot out and
 * takes it back) and cancel_requested/cancel_reason; the worker owns pid
 * (set when it claims the slot, cleared when it exits) and the run fields
 * running, run_id, term and ttl_usecs.  confirmed_expires is written under
 * mutex by both -- by the worker when a run starts, by the launcher after a
 * renewal, and then only for the same term and only forwards -- and is an
 * atomic so that the worker's watchdog, a signal handler that must not
 * take the spinlock, can read it.
 *
 * A slot holds at most one worker: a worker claims it only while pid is 0,
 * and the launcher hands a slot out again only once its worker is gone.
 */
typedef struct LeTaskSlot
{
	slock_t		mutex;
	bool		in_use;			/* launcher: slot assigned to task_id */
	int64		task_id;
	pid_t		pid;			/* worker: its pid while it lives, else 0 */
	bool		running;		/* worker: inside CALL */
	int64		run_id;			/* task_runs.id of that run */
	int64		term;			/* term of that run */
	int64		ttl_usecs;
	pg_atomic_uint64 confirmed_expires; /* last expiry known to be ours */
	bool		cancel_requested;	/* launcher: run run_id must stop */
	char		cancel_reason[LE_TASK_REASON_LEN];
} LeTaskSlot;

typedef struct LeTaskShared
{
	slock_t		mutex;			/* protects launcher and identity */
	PGPROC	   *launcher;		/* to wake it when a run starts */
	char		identity[LE_MAX_HOLDER_BYTES + 1];	/* the runner identity */
	int			nslots;
	LeTaskSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} LeTaskShared;

/* What the launcher tells a worker it starts (bgw_extra). */
typedef struct LeWorkerArgs
{
	Oid			database;
	Oid			owner;
	int64		task_id;
} LeWorkerArgs;

/* One task as read from the table, with what its checks need. */
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
	int			nargs;			/* -1 if the procedure is gone */
	Oid			arg0;
	bool		only_in_args;
	bool		can_execute;
} LeTask;

/* task_launcher.c: settings, shared memory, the launcher */
extern char *le_task_database;
extern int	le_max_task_workers;
extern char *le_task_holder_id;
extern bool le_allow_superuser_tasks;
extern int	le_task_runs_max;
extern bool le_task_runner_preloaded;
extern LeTaskShared *le_tasks;
extern void le_task_define_settings(void);
extern void le_task_runner_register(void);
extern Size le_task_shmem_size(void);
extern void le_task_shmem_init(void);
extern PGDLLEXPORT void le_launcher_main(Datum main_arg);

/* task_worker.c */
extern PGDLLEXPORT void le_task_worker_main(Datum main_arg);

/* task_registry.c: tasks and their checks, for the launcher and workers */
extern bool le_task_load(int64 task_id, LeTask *t, MemoryContext into);
extern LeTask *le_task_load_enabled(MemoryContext into, int *ntasks);
extern char *le_task_problem(const LeTask *t);
extern void le_task_disable(const LeTask *t, const char *reason);
extern int	le_exec_as_task_tables_owner(const char *sql, int nargs, Oid *types,
										 Datum *values, const char *nulls,
										 bool read_only, long count);
extern int64 le_spi_int64(HeapTuple tup, TupleDesc desc, int col);

/*
 * The runner's transactions: short, one at a time, each with SPI and a
 * snapshot, as in worker_spi.
 */
static inline void
le_task_xact_begin(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
}

static inline void
le_task_xact_commit(void)
{
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
}

/*
 * The runner's own lease writes never wait long behind another session:
 * a blocked campaign or renewal fails and is retried, a blocked release is
 * left to expire.
 */
static inline void
le_task_set_lock_timeout(void)
{
	(void) set_config_option("lock_timeout", LE_TASK_LOCK_TIMEOUT, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

#endif							/* LE_TASK_RUNNER_H */
