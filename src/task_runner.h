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
 * 'leader_election' the postmaster starts one launcher per database listed
 * in leader_election.database once recovery has finished (so a hot standby
 * runs nothing and a promoted standby starts by itself).  Each launcher
 * connects to its database as the bootstrap superuser and, about once a
 * second:
 *	  - reads the enabled tasks and checks each one's owner and procedure
 *		(le_task_problem: LOGIN, VALID UNTIL, no superuser power even by
 *		membership, CONNECT, EXECUTE, the procedure owner's privileges, the
 *		lease name still the owner's); a task that fails a check is
 *		disabled with a 'skipped' row in task_runs and a log line;
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
 * instant before.  It then CALLs the procedure, by the OID registered, not
 * by name, non-atomically (it may COMMIT) and records the outcome.  Runs are start-to-start run_every
 * apart; an overrun delays the next run and never overlaps it.
 *
 * One run per name.  The launcher hands out slots by lease name, not by
 * task id: a task gets a worker only while no slot holds a worker for the
 * same name, whatever was unregistered, re-registered or altered
 * (alter_task changes a task in place; the worker reads the task every
 * tick).  A worker claims its slot only if no other slot has a live worker
 * of that name.  Its first campaign ends a lease a previous worker of the
 * name left behind in an older term, so every worker runs in terms of its
 * own and assert_leader(name, term) tells runs apart.  A worker releases
 * only the term it holds (le_release_term), never a later one.
 *
 * Long runs.  While the worker is inside CALL it cannot renew, so the
 * launcher renews for it, under the same runner identity, every ttl/3.
 * The worker publishes (run, term, confirmed expiry) in its shared-memory
 * slot.  If a renewal finds the lease held by someone else or in another
 * term, or no renewal has succeeded and the lease is within ttl/4 of
 * expiring, the launcher cancels the run (SIGINT).  Afterwards the worker
 * campaigns again.
 *
 * Deadlines.  A run starts only if, after the commit that took the lease
 * and recorded the run, at least LE_TASK_START_MARGIN (ttl/2) of the lease
 * is left; otherwise it is recorded 'skipped' and the worker campaigns
 * again.  During a run the worker's watchdog -- a POSIX timer at the exact
 * deadline, armed before that check and re-armed from the latest confirmed
 * expiry each time it fires -- cancels the run ttl/8 before the lease
 * expires and ends the process (FATAL, which no procedure can catch)
 * ttl/16 before it, whether or not the launcher is alive.
 *
 * Stopping.  Every request to stop a run -- the launcher's cancel,
 * SIGTERM (pg_terminate_backend, shutdown, DROP DATABASE ... FORCE, the
 * launcher stopping a disabled or unregistered task's worker), the
 * watchdog's cancel -- cancels the run and gives it LE_TASK_STOP_GRACE_MS
 * to end; then the worker ends itself.  The launcher stops renewing a
 * slot the moment it tells its worker to stop.  However a worker exits
 * (except a crash), its exit callback closes its open run record and
 * releases its own term.  The launcher closes 'running' records whose
 * worker is gone on every scan.  However the launcher exits, it first
 * tells its workers to stop; a new launcher leaves the slots of those
 * still exiting alone (their names stay taken) until they are gone.
 *
 * Schedule.  Runs are run_every apart, start to start, counted from the
 * last recorded start in task_runs, so restarts of the worker, the
 * launcher or the server do not reset it.  An overrun delays the next run
 * and never overlaps it.
 *
 * Session state.  Every transaction the runner runs for itself starts with
 * the runner's settings (le_task_xact_begin: read-write, read committed,
 * no statement timeout, a short lock timeout, row security on), whatever
 * the role's or the procedure's settings; after every run the worker's
 * session is reset as DISCARD ALL would (settings, role, prepared
 * statements, LISTEN, advisory locks, temporary tables), so each run
 * starts clean.
 *
 * Worker deaths.  A worker that exits on an error (not because it was
 * told to stop) records its last error in its slot; the launcher restarts
 * the task after 1, 2, 4 ... 60 s and disables it, with the error as the
 * reason, after LE_TASK_MAX_DEATHS deaths in a row that blame the task.
 * A death inside the task's run (its procedure) always does: the procedure
 * chooses its own SQLSTATEs.  Outside the run it does not when it came from
 * outside the task: before the worker was connected to its database (one
 * not accepting connections), or on an error of a shortage (class 53:
 * another role can fill the lock table), an operator's action (57), the
 * connection (08) or the system (58), or LE001 (the runner's own commit
 * came after its lease expired: it waited, say for an administrator's
 * lock).  Those are retried with the same backoff, never disabled.
 *
 * Locks.  The runner never waits behind another session's locks for long:
 * its writes to task rows skip rows locked by others (SKIP LOCKED), the
 * launcher's renewals never wait for a name's writer lock (one taken means
 * an open transaction of the task's own role or an administrator: tried
 * again ttl/6 later), and its lease writes have a lock timeout, so one
 * role's open transactions can stall neither the launcher's scan nor the
 * renewals of other roles' tasks.
 *
 * Slots.  A task that cannot get a worker (no free slot, its role's
 * quota leader_election.max_task_workers_per_role used up, or no
 * background worker) shows why in tasks.runner_state, and the log says so
 * once.  Free slots go to the tasks whose roles have the fewest workers
 * first (ties by task id), so while slots are short every role gets its
 * turn; the quota keeps one role's idle workers from holding every slot.
 * A worker keeps its slot while its task is enabled: neither rule stops a
 * worker that has one.
 *
 * Databases.  leader_election.database lists the databases whose tasks
 * run, one launcher each (at most LE_TASK_MAX_DATABASES).  The launchers
 * share the max_task_workers slots: a slot belongs to the launcher that
 * claimed it (slot->launcher, slot->database) until that launcher, or a
 * later launcher of the same database, frees it, and a launcher looks only
 * at its own slots, so the launchers of two databases never stop, renew or
 * free each other's workers.  A database's launcher is started again and
 * again even when it cannot connect (the database dropped WITH (FORCE),
 * say); before each attempt, and every second while it waits, it frees
 * its predecessors' slots whose worker is gone, so no slot stays taken by
 * a database whose tasks cannot run (le_free_predecessor_slots).  Free slots go
 * to whichever launcher claims them first.  One run per name holds within a
 * database (names of two databases are different leases).  A launcher that
 * cannot connect to its database (missing, dropped, not accepting
 * connections) retries after 1, 2, 4 ... 60 s and logs the reason once; a
 * database without the extension is logged once and skipped until it has
 * it.  Neither affects the other databases' launchers.
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
#define LE_TASK_ERROR_LEN		256 /* a dead worker's last error */
#define LE_TASK_LOCK_TIMEOUT	"200ms" /* the runner's own lease writes */
#define LE_TASK_STOP_GRACE_MS	1000	/* a stopped run's time to end */
#define LE_TASK_MAX_DEATHS		5	/* worker deaths in a row: disable */
#define LE_TASK_BACKOFF_MAX_MS	60000	/* longest wait before a restart */

/* Deadlines of a run, from its lease's expiry (README, "Background tasks"). */
#define LE_TASK_START_MARGIN(ttl)	((ttl) / 2) /* lease left to start */
#define LE_TASK_CANCEL_MARGIN(ttl)	((ttl) / 8) /* watchdog cancels */
#define LE_TASK_DIE_MARGIN(ttl)		((ttl) / 16)	/* watchdog ends it */

/*
 * One task worker's slot in shared memory.
 *
 * LOCKING.  Every field but confirmed_expires is read and written under
 * mutex.  The launcher owns in_use, task_id and name (it hands the slot
 * out and takes it back), owner, stopping and cancel_requested/cancel_reason; the
 * worker owns pid (set when it claims the slot, cleared when it exits),
 * the run fields running, run_id, term and ttl_usecs, and how it exited
 * (exit_expected, last_error), which the launcher reads once pid is 0.  confirmed_expires is written under
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
	int			launcher;		/* launcher: index of the launcher that owns it */
	Oid			database;		/* launcher: that launcher's database */
	int64		task_id;
	Oid			owner;			/* launcher: the task's owner */
	char		name[LE_MAX_NAME_BYTES + 1];	/* launcher: the task's lease name */
	bool		stopping;		/* launcher: told the worker to stop */
	pid_t		pid;			/* worker: its pid while it lives, else 0 */
	bool		running;		/* worker: inside CALL */
	int64		run_id;			/* task_runs.id of that run */
	int64		term;			/* term of that run */
	int64		ttl_usecs;
	pg_atomic_uint64 confirmed_expires; /* last expiry known to be ours */
	bool		cancel_requested;	/* launcher: run run_id must stop */
	char		cancel_reason[LE_TASK_REASON_LEN];
	bool		exit_expected;	/* worker: exited as told, or on its own
								 * watchdog, not on an error */
	char		last_error[LE_TASK_ERROR_LEN];	/* worker: its last error */
	bool		error_blames_task;	/* worker: that error may be the task's
									 * doing (not a shortage, an operator's
									 * action or the database refusing it) */
} LeTaskSlot;

#define LE_TASK_MAX_DATABASES	32	/* entries of leader_election.database */

/* One database's launcher, in shared memory. */
typedef struct LeTaskLauncherState
{
	PGPROC	   *proc;			/* to wake it when a run starts */
	int			connect_failures;	/* launcher starts that did not connect */
	bool		connect_failure_said;	/* logged since the last success */
} LeTaskLauncherState;

typedef struct LeTaskShared
{
	slock_t		mutex;			/* protects launchers[] and identity */
	char		identity[LE_MAX_HOLDER_BYTES + 1];	/* the runner identity */
	LeTaskLauncherState launchers[LE_TASK_MAX_DATABASES];
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
	bool		expired;		/* VALID UNTIL has passed */
	char	   *valid_until;
	bool		superuser;		/* a superuser, or a member of one */
	char	   *super_role;		/* that superuser role (maybe the owner) */
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
	bool		has_proc_owner_privs;	/* owner has the proc owner's rights */
	char	   *proc_owner_name;
	bool		name_foreign;	/* lease name owned by an outside role */
} LeTask;

/* task_launcher.c: settings, shared memory, the launcher */
extern char *le_task_database;
extern int	le_max_task_workers;
extern int	le_max_task_workers_per_role;
extern char *le_task_holder_id;
extern bool le_allow_superuser_tasks;
extern int	le_task_runs_max;
extern bool le_task_runner_preloaded;
extern LeTaskShared *le_tasks;
extern void le_task_define_settings(void);
extern List *le_task_database_list(void);
extern bool le_task_database_listed(const char *dbname);
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
extern int	le_task_problem_code(const LeTask *t);
extern bool le_task_disable(const LeTask *t, const char *reason);
extern void le_task_runs_trim(int64 task_id);
extern bool le_task_set_state(int64 task_id, const char *state);
extern int64 le_task_last_start(int64 task_id, TimestampTz *started_at);
extern int	le_exec_as_task_tables_owner(const char *sql, int nargs, Oid *types,
										 Datum *values, const char *nulls,
										 bool read_only, long count);
extern int64 le_spi_int64(HeapTuple tup, TupleDesc desc, int col);

/*
 * The runner's own settings, whatever the role's or a procedure's.  Those
 * of the transaction itself must be set before its first snapshot; the
 * others after anything that resets the session (task_worker.c).  All are
 * local to the transaction.
 */
static inline void
le_task_set(const char *name, const char *value)
{
	(void) set_config_option(name, value, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

static inline void
le_task_settings_before_snapshot(void)
{
	le_task_set("transaction_read_only", "off");
	le_task_set("transaction_isolation", "read committed");
	le_task_set("transaction_deferrable", "off");
}

static inline void
le_task_settings(void)
{
	le_task_set("statement_timeout", "0");
	le_task_set("idle_in_transaction_session_timeout", "0");
	le_task_set("lock_timeout", LE_TASK_LOCK_TIMEOUT);
	le_task_set("row_security", "on");
	le_task_set("exit_on_error", "off");
	le_task_set("synchronous_commit", "on");
}

/*
 * The runner's transactions: short, one at a time, each with SPI, a
 * snapshot and the runner's settings, as in worker_spi.
 */
static inline void
le_task_xact_begin(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	le_task_settings_before_snapshot();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	le_task_settings();
}

static inline void
le_task_xact_commit(void)
{
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
}

#endif							/* LE_TASK_RUNNER_H */
