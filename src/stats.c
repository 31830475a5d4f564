/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Counters of what leader election did, per database, since the last
 *	  reset: the view leader_election.stats and stats_reset().
 *
 * WHAT IS COUNTED, AND WHEN (the README repeats this)
 *
 *	  Outcomes -- grants, renewals, releases, takeovers_expired,
 *	  takeovers_session_ended, moves -- change a lease, and a rollback voids
 *	  the change (lease.c, I4).  They are counted at the commit of the
 *	  transaction that made them, and not at all if it (or the savepoint
 *	  they were made under) rolls back.  A grant is every new term given to
 *	  a holder: a first acquisition, or a takeover of a released, expired or
 *	  session-ended lease; the two takeovers_ counters are the grants that
 *	  ended a term the previous holder did not release.
 *
 *	  Events -- losing_tries, fence_rejections, waits, wakeups -- are things
 *	  that happened whatever the transaction does next (a fence rejection
 *	  always aborts it).  They are counted when they happen, so a wait in
 *	  progress already shows.  losing_tries counts every attempt that
 *	  answered false (try_acquire_leader, each attempt of
 *	  wait_for_leadership, the task runner's campaigns); waits counts
 *	  wait_for_leadership calls that had to sleep; wakeups counts their
 *	  sleeps ended by a broadcast (a release, a writer or fence ending, a
 *	  holder's session exiting).
 *
 *	  Only the C functions count: the name administrators' assign_name and
 *	  release_name (SQL) do not.  move_leader counts a move by calling
 *	  le_stats_count(LE_STAT_MOVES) where it writes one.
 *
 * COST.  An outcome adds to a backend-local array; at the commit of a
 * transaction that counted any, the totals are added with one atomic add
 * per non-zero counter to the database's slot in shared memory.  An event
 * is one atomic add at once (a losing try is normally a transaction of its
 * own, so batching it would save nothing).  No lock is taken on the lease
 * paths (a spinlock only the first time a backend counts, to find its
 * database's slot).
 *
 * SHARED MEMORY.  LE_STATS_DATABASES slots, one per existing database
 * that counted something since the server started; a database beyond that
 * many is not counted (the view shows no row for it).  A database's slot is
 * freed when its DROP DATABASE commits (catalog_watch.c tells
 * le_stats_forget_database, in the dropping backend; a DROP that fails
 * keeps it), so a dropped database leaves the view and one created again,
 * even with the same OID, starts from zero.  Should a slot still be held
 * by a database that no longer exists, a database that finds no free slot
 * takes it over (one catalog look-up per such slot, only then).  A claimed
 * slot starts zeroed.  Counters do not survive a restart.  Without
 * shared_preload_libraries there is no shared memory: nothing is counted,
 * the view is empty and stats_reset() does nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "leader_election.h"

#define LE_STATS_DATABASES	256

PG_FUNCTION_INFO_V1(le_stats_read);
PG_FUNCTION_INFO_V1(le_stats_reset);

typedef struct LeStatsDb
{
	Oid			dbid;			/* InvalidOid: free; set once under mutex */
	pg_atomic_uint64 reset_at;	/* TimestampTz of the last reset */
	pg_atomic_uint64 counters[LE_STAT_COUNT];
} LeStatsDb;

typedef struct LeStatsShared
{
	slock_t		mutex;			/* protects claiming a slot (dbid) */
	LeStatsDb	dbs[LE_STATS_DATABASES];
} LeStatsShared;

static LeStatsShared *le_stats = NULL;

/* This backend's database's slot; NULL until first needed or if full. */
static LeStatsDb *le_stats_mine = NULL;
static bool le_stats_no_slot = false;

/* The database this backend's transaction drops, if any; freed at commit. */
static Oid	le_stats_dropping = InvalidOid;

/*
 * Outcomes counted in this transaction and not rolled back, one frame per
 * subtransaction level that counted something, innermost first; kept in
 * TopTransactionContext.
 */
typedef struct LeStatsFrame
{
	int			level;
	uint64		counts[LE_STAT_COUNT];
} LeStatsFrame;

static List *le_stats_frames = NIL;

static bool
le_stat_is_outcome(LeStat kind)
{
	return kind <= LE_STAT_MOVES;
}

Size
le_stats_shmem_size(void)
{
	return sizeof(LeStatsShared);
}

void
le_stats_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_stats = ShmemInitStruct("leader_election stats", sizeof(LeStatsShared), &found);
	if (!found)
	{
		SpinLockInit(&le_stats->mutex);
		for (int d = 0; d < LE_STATS_DATABASES; d++)
		{
			le_stats->dbs[d].dbid = InvalidOid;
			pg_atomic_init_u64(&le_stats->dbs[d].reset_at, 0);
			for (int c = 0; c < LE_STAT_COUNT; c++)
				pg_atomic_init_u64(&le_stats->dbs[d].counters[c], 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Give slot to dbid, zeroed; the caller holds le_stats->mutex. */
static void
le_stats_claim(LeStatsDb *slot, Oid dbid)
{
	for (int c = 0; c < LE_STAT_COUNT; c++)
		pg_atomic_write_u64(&slot->counters[c], 0);
	pg_atomic_write_u64(&slot->reset_at, (uint64) GetCurrentTimestamp());
	slot->dbid = dbid;
}

/*
 * The slot of this backend's database, claimed on first use; or NULL.
 * Only if every slot is taken, and only inside a transaction, does it look
 * in the catalog for a slot whose database no longer exists.
 */
static LeStatsDb *
le_stats_slot(void)
{
	if (le_stats_mine != NULL || le_stats_no_slot || le_stats == NULL ||
		!OidIsValid(MyDatabaseId))
		return le_stats_mine;
	SpinLockAcquire(&le_stats->mutex);
	for (int d = 0; d < LE_STATS_DATABASES && le_stats_mine == NULL; d++)
		if (le_stats->dbs[d].dbid == MyDatabaseId)
			le_stats_mine = &le_stats->dbs[d];
	for (int d = 0; d < LE_STATS_DATABASES && le_stats_mine == NULL; d++)
		if (le_stats->dbs[d].dbid == InvalidOid)
		{
			le_stats_mine = &le_stats->dbs[d];
			le_stats_claim(le_stats_mine, MyDatabaseId);
		}
	SpinLockRelease(&le_stats->mutex);
	if (le_stats_mine != NULL || !IsTransactionState() || CritSectionCount > 0)
		return le_stats_mine;	/* full, and no catalog access: try later */

	for (int d = 0; d < LE_STATS_DATABASES && le_stats_mine == NULL; d++)
	{
		LeStatsDb  *slot = &le_stats->dbs[d];
		Oid			dbid;

		SpinLockAcquire(&le_stats->mutex);
		dbid = slot->dbid;
		SpinLockRelease(&le_stats->mutex);
		if (!OidIsValid(dbid) ||
			SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dbid)))
			continue;
		SpinLockAcquire(&le_stats->mutex);
		if (slot->dbid == dbid || slot->dbid == InvalidOid)
		{
			le_stats_mine = slot;
			le_stats_claim(slot, MyDatabaseId);
		}
		SpinLockRelease(&le_stats->mutex);
	}
	le_stats_no_slot = (le_stats_mine == NULL);
	return le_stats_mine;
}

/*
 * catalog_watch.c: this transaction drops database dbid.  Its slot is
 * freed if, and when, the transaction commits.
 */
void
le_stats_forget_database(Oid dbid)
{
	le_stats_dropping = dbid;
}

/* The dropped database's slot, if it has one, is free again. */
static void
le_stats_free_dropped(void)
{
	Oid			dbid = le_stats_dropping;

	le_stats_dropping = InvalidOid;
	if (le_stats == NULL || !OidIsValid(dbid))
		return;
	SpinLockAcquire(&le_stats->mutex);
	for (int d = 0; d < LE_STATS_DATABASES; d++)
		if (le_stats->dbs[d].dbid == dbid)
			le_stats->dbs[d].dbid = InvalidOid;
	SpinLockRelease(&le_stats->mutex);
}

/* Count one of kind in the current transaction (see the top of the file). */
void
le_stats_count(LeStat kind)
{
	int			level;
	LeStatsFrame *top;

	if (le_stats == NULL)
		return;
	if (!le_stat_is_outcome(kind))
	{
		LeStatsDb  *slot = le_stats_slot();

		if (slot != NULL)
			pg_atomic_fetch_add_u64(&slot->counters[kind], 1);
		return;
	}
	(void) le_stats_slot();		/* found now, inside the transaction */
	level = GetCurrentTransactionNestLevel();
	top = le_stats_frames != NIL ? linitial(le_stats_frames) : NULL;
	if (top == NULL || top->level != level)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		top = palloc0(sizeof(LeStatsFrame));
		top->level = level;
		le_stats_frames = lcons(top, le_stats_frames);
		MemoryContextSwitchTo(old);
	}
	top->counts[kind]++;
}

static void
le_stats_add(const uint64 *counts)
{
	LeStatsDb  *slot = le_stats_slot();

	if (slot == NULL)
		return;
	for (int c = 0; c < LE_STAT_COUNT; c++)
		if (counts[c] != 0)
			pg_atomic_fetch_add_u64(&slot->counters[c], counts[c]);
}

static void
le_stats_xact_end(bool committed)
{
	ListCell   *lc;

	if (committed)
		foreach(lc, le_stats_frames)
			le_stats_add(((LeStatsFrame *) lfirst(lc))->counts);
	le_stats_frames = NIL;		/* freed with TopTransactionContext */
}

static void
le_stats_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			le_stats_xact_end(true);
			le_stats_free_dropped();
			break;
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			le_stats_xact_end(true);
			le_stats_dropping = InvalidOid;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			le_stats_xact_end(false);
			le_stats_dropping = InvalidOid;
			break;
		default:
			break;
	}
}

/*
 * A subtransaction's outcomes go to its parent when it commits and are
 * dropped when it rolls back.
 */
static void
le_stats_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	LeStatsFrame *top;
	int			level;

	if (le_stats_frames == NIL)
		return;
	top = linitial(le_stats_frames);
	level = GetCurrentTransactionNestLevel();
	if (top->level != level)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		le_stats_frames = list_delete_first(le_stats_frames);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		LeStatsFrame *parent = list_length(le_stats_frames) > 1 ?
			lsecond(le_stats_frames) : NULL;

		if (parent != NULL && parent->level == level - 1)
		{
			for (int c = 0; c < LE_STAT_COUNT; c++)
				parent->counts[c] += top->counts[c];
			le_stats_frames = list_delete_first(le_stats_frames);
		}
		else
			top->level = level - 1;
	}
}

void
le_stats_register_callbacks(void)
{
	RegisterXactCallback(le_stats_xact_callback, NULL);
	RegisterSubXactCallback(le_stats_subxact_callback, NULL);
}

/*
 * leader_election.stats_read() returns setof (datid oid, grants bigint,
 * ..., wakeups bigint, stats_reset timestamptz): one row per database with
 * a slot.  The view leader_election.stats joins it to pg_database.
 */
Datum
le_stats_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (le_stats == NULL)
		return (Datum) 0;
	for (int d = 0; d < LE_STATS_DATABASES; d++)
	{
		LeStatsDb  *slot = &le_stats->dbs[d];
		Datum		values[LE_STAT_COUNT + 2];
		bool		nulls[LE_STAT_COUNT + 2] = {0};
		Oid			dbid;

		SpinLockAcquire(&le_stats->mutex);
		dbid = slot->dbid;
		SpinLockRelease(&le_stats->mutex);
		if (!OidIsValid(dbid))
			continue;
		values[0] = ObjectIdGetDatum(dbid);
		for (int c = 0; c < LE_STAT_COUNT; c++)
			values[c + 1] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->counters[c]));
		values[LE_STAT_COUNT + 1] =
			TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&slot->reset_at));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * leader_election.stats_reset() returns void: zero the current database's
 * counters.  A count being added at that instant may land on either side.
 */
Datum
le_stats_reset(PG_FUNCTION_ARGS)
{
	LeStatsDb  *slot = le_stats_slot();

	if (slot == NULL)
		PG_RETURN_VOID();
	for (int c = 0; c < LE_STAT_COUNT; c++)
		pg_atomic_write_u64(&slot->counters[c], 0);
	pg_atomic_write_u64(&slot->reset_at, (uint64) GetCurrentTimestamp());
	PG_RETURN_VOID();
}
