/*-------------------------------------------------------------------------
 *
 * listeners.c
 *	  Whether anyone could hear a change of leader: a count of the sessions
 *	  that have run LISTEN leader_election, so that a change nobody can hear
 *	  queues no notification and wakes no notifier.
 *
 * Most installations have no listener.  Queueing a change's event and
 * waking a notifier that sends it to nobody cost a grant of a new name
 * about a tenth of its CPU (and, with notify_delivery = 'in_transaction',
 * the cluster-wide NOTIFY lock).  notify_queue.c asks here twice.
 *
 * THE RULE
 *
 * L1  A change sends nothing only if it was visible before every listening
 *     session began its LISTEN leader_election.  With PostgreSQL's own rule
 *     (a LISTEN takes effect when its transaction commits; changes that
 *     commit after that are heard), a session that commits its LISTEN and
 *     then reads the current state misses no change.
 *     A LISTEN of that channel counts its session before it runs (an
 *     atomic add: a full barrier), then makes sure a notifier runs if its
 *     database's queue holds events or room taken for some
 *     (le_notify_listener_ready; an ERROR if none can be started).  A
 *     changing transaction takes room for its events at PRE_COMMIT and
 *     only then looks at the count (notify_queue.c): if it sees nobody, a
 *     LISTEN that counts itself later sees the room taken, and the
 *     notifier it ensures will send whatever the COMMIT appends.  The
 *     transaction looks again at its COMMIT, after its commit became
 *     visible and behind a full barrier, and sends nothing only if the
 *     count is still zero.  Then the LISTEN's add came after that look,
 *     hence after the commit was visible.
 *
 * The count only grows with LISTEN: UNLISTEN and DISCARD leave a session
 * counted, which makes changes send events no one hears, never the
 * opposite.  A session leaves the count when it exits.  LISTEN is seen
 * wherever it runs as a statement (top level, PL/pgSQL, DO); a C module
 * calling PostgreSQL's Async_Listen() directly would not be seen.  Nothing
 * here waits.  A transaction that finds no room (the queue full, or no
 * queue free for its database) sends its events itself, as notify_queue.c
 * N2 says, whether or not anyone listens.
 *
 * Without shared_preload_libraries there is no count: le_listeners_any()
 * is always true and every change sends its event, as in 1.0.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/parsenodes.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"

#include "leader_election.h"

typedef struct LeListenersShared
{
	pg_atomic_uint32 listeners; /* live sessions that have run our LISTEN */
} LeListenersShared;

static LeListenersShared *le_listeners_shared = NULL;

static bool le_counted = false; /* this session is in the count */

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
		pg_atomic_init_u32(&le_listeners_shared->listeners, 0);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Could any session hear a notification (L1)?  A full barrier first, so
 * that what this backend did before (its commit) is seen by any session
 * whose count comes after this look.
 */
bool
le_listeners_any(void)
{
	if (le_listeners_shared == NULL)
		return true;
	pg_memory_barrier();
	return pg_atomic_read_u32(&le_listeners_shared->listeners) > 0;
}

static void
le_listeners_exit(int code, Datum arg)
{
	pg_atomic_fetch_sub_u32(&le_listeners_shared->listeners, 1);
}

/* LISTEN leader_election: count this session (once) before it runs. */
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
			before_shmem_exit(le_listeners_exit, (Datum) 0);
			pg_atomic_fetch_add_u32(&le_listeners_shared->listeners, 1);
			le_counted = true;
		}
		le_notify_listener_ready();
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
