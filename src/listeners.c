/*-------------------------------------------------------------------------
 *
 * listeners.c
 *	  Whether anyone could hear a change of leader: a count of the sessions
 *	  that have run LISTEN leader_election, so that a change nobody can hear
 *	  sends no notification at all.
 *
 * Most installations have no listener.  Queueing a change's event and
 * waking a notifier that sends it to nobody cost a grant of a new name
 * about a tenth of its CPU (and, with notify_delivery = 'in_transaction',
 * the cluster-wide NOTIFY lock); notify_queue.c asks here first.
 *
 * THE RULE
 *
 * L1  A session that has run LISTEN leader_election (and then reads the
 *     current state, if it wants it) hears every change that commits after
 *     its LISTEN statement ended.  A changing transaction sends nothing only
 *     if, at its PRE_COMMIT, no session of the cluster has run that LISTEN
 *     (le_listeners_none_at_commit); a LISTEN of that channel waits, before
 *     it runs, until every transaction that decided so has finished
 *     committing (le_listen_hook).  Each side first announces itself with an
 *     atomic add (a full barrier), then reads the other side's count, so at
 *     least one of them sees the other: either the change sends its event
 *     as usual, or it is visible before the LISTEN runs, hence before any
 *     state the listener reads next.
 *
 * The count only grows with LISTEN: UNLISTEN and DISCARD leave a session
 * counted, which makes changes send events no one hears, never the
 * opposite.  A session leaves the count when it exits.  LISTEN is seen
 * wherever it runs as a statement (top level, PL/pgSQL, DO); a C module
 * calling PostgreSQL's Async_Listen() directly would not be seen.  The
 * wait of a LISTEN is as long as a commit (longer only if commits wait,
 * e.g. for a synchronous standby), and can be cancelled.
 *
 * Without shared_preload_libraries there is no count and every change
 * sends its event, as in 1.0.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "tcop/utility.h"

#include "leader_election.h"

typedef struct LeListenersShared
{
	pg_atomic_uint32 listeners;	/* sessions that have run our LISTEN */
	pg_atomic_uint32 unheard;	/* transactions committing without sending */
} LeListenersShared;

static LeListenersShared *le_listeners_shared = NULL;

static bool le_counted = false;		/* this session is in listeners */
static bool le_waited = false;		/* ... and its LISTEN has waited (L1) */
static bool le_unheard = false;		/* this transaction is in unheard */
static bool le_exit_hook_set = false;

static ProcessUtility_hook_type prev_process_utility = NULL;

Size
le_listeners_shmem_size(void)
{
	return sizeof(LeListenersShared);
}

void
le_listeners_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_listeners_shared = ShmemInitStruct("leader_election listeners",
										  sizeof(LeListenersShared), &found);
	if (!found)
	{
		pg_atomic_init_u32(&le_listeners_shared->listeners, 0);
		pg_atomic_init_u32(&le_listeners_shared->unheard, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* A session that exits leaves both counts it is in. */
static void
le_listeners_exit(int code, Datum arg)
{
	le_listeners_commit_ended();
	if (le_counted)
	{
		pg_atomic_fetch_sub_u32(&le_listeners_shared->listeners, 1);
		le_counted = false;
	}
}

static void
le_listeners_set_exit_hook(void)
{
	if (!le_exit_hook_set)
	{
		before_shmem_exit(le_listeners_exit, (Datum) 0);
		le_exit_hook_set = true;
	}
}

/*
 * At PRE_COMMIT of a transaction with events: true if nobody can hear them
 * (L1).  The transaction then counts in "unheard" until
 * le_listeners_commit_ended, which its COMMIT or ABORT must call.  Always
 * false without shared memory.
 */
bool
le_listeners_none_at_commit(void)
{
	if (le_listeners_shared == NULL || le_unheard)
		return false;
	le_listeners_set_exit_hook();
	pg_atomic_fetch_add_u32(&le_listeners_shared->unheard, 1);
	if (pg_atomic_read_u32(&le_listeners_shared->listeners) == 0)
	{
		le_unheard = true;
		return true;
	}
	pg_atomic_fetch_sub_u32(&le_listeners_shared->unheard, 1);
	return false;
}

/* This transaction's commit (or abort) is over: a LISTEN need not wait for it. */
void
le_listeners_commit_ended(void)
{
	if (le_unheard)
	{
		pg_atomic_fetch_sub_u32(&le_listeners_shared->unheard, 1);
		le_unheard = false;
	}
}

/* LISTEN leader_election: count this session, then wait out L1's others. */
static void
le_listen_hook(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			   ProcessUtilityContext context, ParamListInfo params,
			   QueryEnvironment *queryEnv, DestReceiver *dest,
			   QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (IsA(stmt, ListenStmt) &&
		strcmp(((ListenStmt *) stmt)->conditionname, LE_NOTIFY_CHANNEL) == 0)
	{
		if (!le_counted)
		{
			le_listeners_set_exit_hook();
			pg_atomic_fetch_add_u32(&le_listeners_shared->listeners, 1);
			le_counted = true;
		}
		/* Once counted, no transaction decides on "unheard" any more. */
		while (!le_waited &&
			   pg_atomic_read_u32(&le_listeners_shared->unheard) > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1L, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		le_waited = true;
	}
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/* While preloading only: without shared memory there is nothing to count. */
void
le_listeners_install(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = le_listen_hook;
}
