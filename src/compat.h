/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every PostgreSQL version difference leader_election cares about.
 *
 * The extension is built and tested, warnings as errors, on PostgreSQL
 * 15, 17 and 18 (test/all.sh); these shims also keep 13, 14 and 16 within
 * reach.  No other file may test PG_VERSION_NUM: when a new difference
 * appears, add a shim here and call it by its le_ name everywhere else.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LE_COMPAT_H
#define LE_COMPAT_H

#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/xlog.h"
#if PG_VERSION_NUM >= 150000
#include "access/xlogrecovery.h"
#endif
#include "datatype/timestamp.h"
#include "storage/lock.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 130000
#error "leader_election needs PostgreSQL 13 or later"
#endif

/*
 * The timeline new WAL is written on.  Terms are qualified by it so that a
 * promoted standby never reissues a term the old primary handed out.
 */
static inline TimeLineID
le_current_timeline(void)
{
#if PG_VERSION_NUM >= 150000
	return GetWALInsertionTimeLine();
#else
	return ThisTimeLineID;
#endif
}

/*
 * The timeline this server is on: the one it writes WAL on, or, on a
 * standby, the one it replays.
 */
static inline TimeLineID
le_server_timeline(void)
{
	TimeLineID	tli;

	if (!RecoveryInProgress())
		return le_current_timeline();
	(void) GetXLogReplayRecPtr(&tli);
	return tli;
}

/* Does this backend hold the lock in exactly this mode? */
static inline bool
le_lock_held_by_me(const LOCKTAG *tag, LOCKMODE mode)
{
#if PG_VERSION_NUM >= 170000
	return LockHeldByMe(tag, mode, false);
#else
	return LockHeldByMe(tag, mode);
#endif
}

/*
 * heap_update() of a tuple whose indexed columns do not change, waiting for
 * conflicting lockers; the caller adds index entries unless the new tuple
 * is heap-only.
 */
static inline TM_Result
le_heap_update(Relation rel, ItemPointer otid, HeapTuple newtup,
			   CommandId cid, TM_FailureData *tmfd, LockTupleMode *lockmode)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	return heap_update(rel, otid, newtup, cid, InvalidSnapshot, true, tmfd,
					   lockmode, &update_indexes);
#else
	return heap_update(rel, otid, newtup, cid, InvalidSnapshot, true, tmfd,
					   lockmode);
#endif
}

/* index_beginscan(); PostgreSQL 18 added the instrumentation argument. */
static inline IndexScanDesc
le_index_beginscan(Relation heap, Relation index, Snapshot snapshot,
				   int nkeys, int norderbys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys);
#else
	return index_beginscan(heap, index, snapshot, nkeys, norderbys);
#endif
}

/* Keep other modules from defining settings under our prefix. */
static inline void
le_reserve_guc_prefix(const char *prefix)
{
#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved(prefix);
#else
	EmitWarningsOnPlaceholders(prefix);
#endif
}

/*
 * The wait event a session shows in pg_stat_activity while it sleeps in
 * wait_for_leadership().  PostgreSQL 17 lets an extension name its own
 * (wait_event_type "Extension", wait_event "LeaderElectionWaitForLeadership");
 * older servers show the generic "Extension".  The id is registered once
 * per backend, with or without shared_preload_libraries.
 */
static inline uint32
le_wait_event_for_leadership(void)
{
#if PG_VERSION_NUM >= 170000
	static uint32 wait_event = 0;

	if (wait_event == 0)
		wait_event = WaitEventExtensionNew("LeaderElectionWaitForLeadership");
	return wait_event;
#else
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * PostgreSQL 15 moved shared memory requests into shmem_request_hook; older
 * servers take them directly in _PG_init.  LE_HAVE_SHMEM_REQUEST_HOOK tells
 * leader_election.c which of the two to use.
 */
#if PG_VERSION_NUM >= 150000
#define LE_HAVE_SHMEM_REQUEST_HOOK 1
#endif

/*
 * Whether an interval is 'infinity' or '-infinity' (PostgreSQL 17 and later
 * have them, stored with the month field at its extremes).
 */
static inline bool
le_interval_is_infinite(const Interval *iv)
{
#if PG_VERSION_NUM >= 170000
	return INTERVAL_NOT_FINITE(iv);
#else
	return false;
#endif
}

#endif							/* LE_COMPAT_H */
