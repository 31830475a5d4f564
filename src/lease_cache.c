/*-------------------------------------------------------------------------
 *
 * lease_cache.c
 *	  The lease cache: the latest committed state of recently used lease
 *	  names, in shared memory, so that an answer that writes nothing
 *	  (am_leader, leader_term, a losing try_acquire_leader) touches no
 *	  relation, takes no lock and reads no buffer.
 *
 * Only with the library in shared_preload_libraries; without it every answer
 * reads the table (lease_store.c).
 *
 * WHAT A SLOT HOLDS
 *
 * LE_CACHE_SLOTS slots; a name maps to one slot by hash and a slot holds one
 * name at a time (the last one written or read there).  A slot records, for
 * its (database, leases table, name), the decision fields of the row: found,
 * owner, holder, term, expires_at, session_pid, session_start.  Names or
 * holders longer than LE_CACHE_LABEL_BYTES are never cached.
 *
 * THE INVARIANT (C1)
 *
 *	  Whenever a reader accepts a slot's entry, the entry is the name's latest
 *	  committed row, or (while a change commits) a row whose every answer
 *	  equals the answer the committing row would give.
 *
 * It holds because of how the two kinds of change reach the slot:
 *
 *	  Writes by this extension (lease_store.c calls le_cache_note_write with
 *	  the row it wrote).  At PRE_COMMIT, before the commit can become
 *	  visible, the writer marks the slot "pending" and leaves the new row in
 *	  it beside the old one; at COMMIT, after the commit is visible, it makes
 *	  the new row current and clears the mark; at ABORT it only clears it.
 *	  While a slot is pending, readers accept the current row only if the
 *	  pending one is a renewal of it (same holder, term, owner, session, and
 *	  an expiry no earlier): then every answer is the same in both, except
 *	  that an answer near the old expiry may say "expired" a moment early,
 *	  never "valid" late.  Otherwise they read the table.  Rows written in a
 *	  rolled-back subtransaction are not known at commit: the slot is then
 *	  emptied instead.
 *
 *	  Any other change of the table (a superuser's UPDATE, DELETE, TRUNCATE,
 *	  COPY, logical replication) fires a trigger running
 *	  leases_cache_invalidate() (one per row, one for TRUNCATE), which marks
 *	  the transaction: at PRE_COMMIT it raises a global "pending" count that
 *	  makes every reader read the table, and at COMMIT or ABORT it advances
 *	  the global epoch, which empties every slot at once, before lowering the
 *	  count.  Such a transaction cannot be prepared.  A backend that finds
 *	  the triggers missing, not ENABLE ALWAYS or not calling this library
 *	  does not use the cache; nor while history, leader_info or handovers
 *	  has a trigger or rule, which would run inside the extension's own
 *	  statements, where a write of the table counts as the extension's
 *	  (lease_store.c, le_store_rel_runs_no_user_code).  DDL that could let a change bypass the
 *	  triggers (disabling them, replacing their function, altering the
 *	  table) counts as a foreign change itself (catalog_watch.c), so the
 *	  cache is emptied when it commits and no later backend, whenever it
 *	  connects, finds an entry from before it.  So do CREATE and DROP
 *	  DATABASE, at once: a re-created database can reuse the OIDs the
 *	  entries are keyed by.
 *
 *	  A published row carries the epoch of its writer's PRE_COMMIT: a
 *	  foreign change that replaced it after it became visible (it no longer
 *	  waits for the writer's row lock) but before it was published has
 *	  advanced the epoch, so the entry is born void.
 *
 *	  A reader that misses fills the slot from a fresh snapshot of the table,
 *	  taken after it noted the slot's version; the fill is dropped if the slot
 *	  or the epoch changed, or a change was pending, in between.
 *
 * Readers take no lock: every change of a slot happens under its spinlock
 * and advances its version twice (odd while changing), and a reader accepts
 * what it copied only if the version was even and unchanged around the copy.
 *
 * A backend that exits by any route aborts its transaction first (so its
 * pending marks go); a crash reinitialises shared memory.  A hot standby
 * never uses the cache: its changes arrive by WAL replay, which runs none of
 * this.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"

#include "leader_election.h"

#define LE_CACHE_SLOTS			4096
#define LE_CACHE_LABEL_BYTES	64	/* name and holder, with the NUL */
#define LE_CACHE_READ_TRIES		3

/* The decision fields of one lease row. */
typedef struct LeCachedRow
{
	bool		found;
	bool		has_holder;
	Oid			owner;
	int64		term;
	TimestampTz expires_at;
	int32		session_pid;
	TimestampTz session_start;
	char		holder[LE_CACHE_LABEL_BYTES];
} LeCachedRow;

typedef struct LeCacheSlot
{
	slock_t		mutex;			/* every change is made holding it */
	pg_atomic_uint64 version;	/* odd while a change is being made */
	uint64		epoch;			/* the global epoch the entry belongs to */
	bool		valid;			/* does the slot hold an entry? */
	Oid			dbid;
	Oid			relid;			/* leader_election.leases of that database */
	char		name[LE_CACHE_LABEL_BYTES];
	LeCachedRow cur;
	/* Writers between their PRE_COMMIT and COMMIT or ABORT. */
	int			pending;
	/* With pending == 1: the row that writer commits, if next_known. */
	bool		next_known;
	Oid			next_dbid;
	char		next_name[LE_CACHE_LABEL_BYTES];
	LeCachedRow next;
} LeCacheSlot;

typedef struct LeCacheShared
{
	pg_atomic_uint64 epoch;		/* advanced by every foreign change */
	pg_atomic_uint32 foreign_pending;	/* foreign changes committing now */
	LeCacheSlot slots[LE_CACHE_SLOTS];
} LeCacheShared;

static LeCacheShared *le_cache_shared = NULL;

/* A row this transaction wrote, to be published at commit. */
typedef struct LePendingWrite
{
	int			slot;
	int			nest_level;		/* (sub)transaction that wrote it */
	bool		known;			/* false: written in a rolled-back subxact */
	bool		marked;			/* counted in the slot's pending */
	uint64		epoch;			/* the global epoch when it was marked */
	Oid			relid;
	char		name[LE_CACHE_LABEL_BYTES];
	LeCachedRow row;
} LePendingWrite;

/* This transaction's writes, in TopTransactionContext. */
static List *le_pending_writes = NIL;

/* Did this transaction change the table other than through lease_store.c? */
static bool le_foreign_change = false;
static bool le_foreign_marked = false;

/* Has this transaction passed PRE_COMMIT (its writes are marked)? */
static bool le_writes_marked = false;

/* lease_store.c writes through SPI with this set: not a foreign change. */
static bool le_own_write_in_progress = false;

static int
le_cache_slot_of(const char *name, size_t len)
{
	uint32		h = hash_bytes((const unsigned char *) name, len);

	return (int) ((h ^ MyDatabaseId) % LE_CACHE_SLOTS);
}

Size
le_cache_shmem_size(void)
{
	return sizeof(LeCacheShared);
}

void
le_cache_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_cache_shared = ShmemInitStruct("leader_election lease cache",
									  sizeof(LeCacheShared), &found);
	if (!found)
	{
		memset(le_cache_shared, 0, sizeof(LeCacheShared));
		pg_atomic_init_u64(&le_cache_shared->epoch, 1);
		pg_atomic_init_u32(&le_cache_shared->foreign_pending, 0);
		for (int i = 0; i < LE_CACHE_SLOTS; i++)
		{
			SpinLockInit(&le_cache_shared->slots[i].mutex);
			pg_atomic_init_u64(&le_cache_shared->slots[i].version, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * May this transaction use the cache now?  Not on a standby, and not after
 * changing the table other than through lease_store.c: its own uncommitted
 * change is not in the cache.  (lease_store.c also bypasses the cache once
 * this transaction has written a lease.)
 */
bool
le_cache_available(void)
{
	return le_cache_shared != NULL && !le_foreign_change &&
		!RecoveryInProgress();
}

/* ---- converting rows ---- */

static bool
le_cached_from_row(const LeaseRow *row, LeCachedRow *c)
{
	memset(c, 0, sizeof(LeCachedRow));
	c->found = row->found;
	if (!row->found)
		return true;
	c->owner = row->owner;
	c->term = row->term;
	c->expires_at = row->expires_at;
	c->session_pid = row->session_pid;
	c->session_start = row->session_start;
	if (row->holder != NULL)
	{
		if (strlen(row->holder) >= LE_CACHE_LABEL_BYTES)
			return false;
		c->has_holder = true;
		strcpy(c->holder, row->holder);
	}
	return true;
}

static void
le_row_from_cached(const LeCachedRow *c, LeaseRow *row)
{
	memset(row, 0, sizeof(LeaseRow));
	row->found = c->found;
	if (!c->found)
		return;
	row->owner = c->owner;
	row->holder = c->has_holder ? pstrdup(c->holder) : NULL;
	row->term = c->term;
	row->expires_at = c->expires_at;
	row->session_pid = c->session_pid;
	row->session_start = c->session_start;
}

/* Is `next` a renewal of `cur`: the same answers, expiring no earlier? */
static bool
le_cached_is_renewal(const LeCachedRow *cur, const LeCachedRow *next)
{
	return cur->found && next->found && cur->has_holder && next->has_holder &&
		cur->owner == next->owner && cur->term == next->term &&
		cur->session_pid == next->session_pid &&
		cur->session_start == next->session_start &&
		next->expires_at >= cur->expires_at &&
		strncmp(cur->holder, next->holder, LE_CACHE_LABEL_BYTES) == 0;
}

/* ---- reading ---- */

/*
 * A reader's view of the slot before it reads the table, so that a fill can
 * tell whether anything changed meanwhile.
 */
typedef struct LeFillTicket
{
	bool		may_fill;
	uint64		version;
	uint64		epoch;
} LeFillTicket;

static LeFillTicket le_last_ticket;

/*
 * The name's row from the cache, with only the decision fields filled in.
 * False if the cache cannot answer; the caller then reads the table with a
 * fresh snapshot and passes the result to le_cache_fill().
 */
bool
le_cache_lookup(Oid relid, const char *name, LeaseRow *row)
{
	size_t		len = strlen(name);
	LeCacheSlot *slot;
	LeCachedRow copy;

	le_last_ticket.may_fill = false;
	if (len >= LE_CACHE_LABEL_BYTES)
		return false;
	slot = &le_cache_shared->slots[le_cache_slot_of(name, len)];

	for (int tries = 0; tries < LE_CACHE_READ_TRIES; tries++)
	{
		uint64		epoch = pg_atomic_read_u64(&le_cache_shared->epoch);
		uint64		v1;
		bool		same_name;
		bool		usable;

		pg_memory_barrier();
		if (pg_atomic_read_u32(&le_cache_shared->foreign_pending) != 0)
			return false;
		v1 = pg_atomic_read_u64(&slot->version);
		if (v1 & 1)
			continue;			/* a change is being made right now */
		pg_read_barrier();

		/* Torn reads are possible here; the version check below drops them. */
		same_name = slot->valid && slot->epoch == epoch &&
			slot->dbid == MyDatabaseId && slot->relid == relid &&
			strncmp(slot->name, name, LE_CACHE_LABEL_BYTES) == 0;
		usable = same_name;
		if (usable && slot->pending > 0)
		{
			/* A change of another name in this slot does not concern us. */
			bool		next_is_ours = !slot->next_known ||
				(slot->next_dbid == MyDatabaseId &&
				 strncmp(slot->next_name, name, LE_CACHE_LABEL_BYTES) == 0);

			usable = !next_is_ours ||
				(slot->next_known && slot->pending == 1 &&
				 le_cached_is_renewal(&slot->cur, &slot->next));
		}
		if (usable)
			copy = slot->cur;

		pg_read_barrier();
		if (pg_atomic_read_u64(&slot->version) != v1 ||
			pg_atomic_read_u64(&le_cache_shared->epoch) != epoch ||
			pg_atomic_read_u32(&le_cache_shared->foreign_pending) != 0)
			continue;			/* changed under us: look again */

		if (usable)
		{
			le_row_from_cached(&copy, row);
			return true;
		}
		/*
		 * Worth filling, unless a change is committing.  (pending is read
		 * after the check; le_cache_fill checks again under the lock.)
		 */
		le_last_ticket.may_fill = (slot->pending == 0);
		le_last_ticket.version = v1;
		le_last_ticket.epoch = epoch;
		return false;
	}
	return false;
}

/*
 * After a miss in le_cache_lookup(): row is the name's row read with a
 * snapshot taken after that lookup.  Store it unless something changed.
 */
void
le_cache_fill(Oid relid, const char *name, const LeaseRow *row)
{
	size_t		len = strlen(name);
	LeCacheSlot *slot;
	LeCachedRow c;

	if (!le_last_ticket.may_fill || len >= LE_CACHE_LABEL_BYTES ||
		!le_cached_from_row(row, &c))
		return;
	le_last_ticket.may_fill = false;
	slot = &le_cache_shared->slots[le_cache_slot_of(name, len)];

	SpinLockAcquire(&slot->mutex);
	if (pg_atomic_read_u64(&slot->version) == le_last_ticket.version &&
		slot->pending == 0 &&
		pg_atomic_read_u64(&le_cache_shared->epoch) == le_last_ticket.epoch &&
		pg_atomic_read_u32(&le_cache_shared->foreign_pending) == 0)
	{
		pg_atomic_fetch_add_u64(&slot->version, 1);
		slot->valid = true;
		slot->epoch = le_last_ticket.epoch;
		slot->dbid = MyDatabaseId;
		slot->relid = relid;
		strcpy(slot->name, name);
		slot->cur = c;
		pg_write_barrier();
		pg_atomic_fetch_add_u64(&slot->version, 1);
	}
	SpinLockRelease(&slot->mutex);
}

/* ---- writing ---- */

/*
 * This transaction wrote `row` as the name's new row (lease_store.c, under
 * the name's writer lock).  It reaches the cache when the transaction
 * commits.
 */
void
le_cache_note_write(Oid relid, const char *name, const LeaseRow *row)
{
	size_t		len = strlen(name);
	LePendingWrite *w = NULL;
	ListCell   *lc;
	MemoryContext old;
	LeCachedRow c;
	bool		known;

	if (le_cache_shared == NULL)
		return;
	if (le_writes_marked)
		elog(ERROR, "lease \"%s\" written after its transaction began to commit",
			 name);
	known = len < LE_CACHE_LABEL_BYTES && le_cached_from_row(row, &c);

	foreach(lc, le_pending_writes)
	{
		LePendingWrite *p = lfirst(lc);

		if (len < LE_CACHE_LABEL_BYTES && strcmp(p->name, name) == 0)
			w = p;
	}
	if (w == NULL || len >= LE_CACHE_LABEL_BYTES)
	{
		old = MemoryContextSwitchTo(TopTransactionContext);
		w = palloc0(sizeof(LePendingWrite));
		le_pending_writes = lappend(le_pending_writes, w);
		MemoryContextSwitchTo(old);
		w->slot = le_cache_slot_of(name, len);
		if (len < LE_CACHE_LABEL_BYTES)
			strcpy(w->name, name);
	}
	w->relid = relid;
	w->nest_level = GetCurrentTransactionNestLevel();
	w->known = known;
	if (known)
		w->row = c;
}

/* Called with the slot's mutex held, around a change of the slot. */
static void
le_slot_change_begin(LeCacheSlot *slot)
{
	pg_atomic_fetch_add_u64(&slot->version, 1);
}

static void
le_slot_change_end(LeCacheSlot *slot)
{
	pg_write_barrier();
	pg_atomic_fetch_add_u64(&slot->version, 1);
}

/* PRE_COMMIT: from here until COMMIT or ABORT, readers must be careful. */
static void
le_cache_mark_pending(void)
{
	ListCell   *lc;

	foreach(lc, le_pending_writes)
	{
		LePendingWrite *w = lfirst(lc);
		LeCacheSlot *slot = &le_cache_shared->slots[w->slot];

		SpinLockAcquire(&slot->mutex);
		le_slot_change_begin(slot);
		slot->pending++;
		w->epoch = pg_atomic_read_u64(&le_cache_shared->epoch);
		slot->next_known = (slot->pending == 1 && w->known);
		if (slot->next_known)
		{
			slot->next_dbid = MyDatabaseId;
			strcpy(slot->next_name, w->name);
			slot->next = w->row;
		}
		w->marked = true;
		le_slot_change_end(slot);
		SpinLockRelease(&slot->mutex);
	}
	le_writes_marked = true;
	if (le_foreign_change)
	{
		pg_atomic_fetch_add_u32(&le_cache_shared->foreign_pending, 1);
		le_foreign_marked = true;
	}
}

/* COMMIT (the commit is visible) or ABORT: publish or forget. */
static void
le_cache_end_pending(bool committed)
{
	ListCell   *lc;

	foreach(lc, le_pending_writes)
	{
		LePendingWrite *w = lfirst(lc);
		LeCacheSlot *slot = &le_cache_shared->slots[w->slot];

		if (!w->marked)
			continue;
		SpinLockAcquire(&slot->mutex);
		le_slot_change_begin(slot);
		if (committed && w->known)
		{
			/*
			 * Stamped with the epoch of PRE_COMMIT, not of now: a foreign
			 * change may have replaced this row between our commit becoming
			 * visible and this moment (it need not wait for our row lock any
			 * more), and its end advanced the epoch; then this entry is
			 * already void.
			 */
			slot->valid = true;
			slot->epoch = w->epoch;
			slot->dbid = MyDatabaseId;
			slot->relid = w->relid;
			strcpy(slot->name, w->name);
			slot->cur = w->row;
		}
		else if (committed)
			slot->valid = false;	/* the committed row is not known here */
		slot->pending--;
		if (slot->pending == 0)
			slot->next_known = false;
		le_slot_change_end(slot);
		SpinLockRelease(&slot->mutex);
	}
	if (le_foreign_marked)
	{
		/* Empties every slot; only then may readers trust slots again. */
		pg_atomic_fetch_add_u64(&le_cache_shared->epoch, 1);
		pg_atomic_fetch_sub_u32(&le_cache_shared->foreign_pending, 1);
	}
}

/*
 * This transaction changed the table, or what keeps the cache told of
 * changes, by another route (catalog_watch.c): empty the cache when it ends,
 * and do not use it meanwhile.
 */
void
le_cache_note_foreign_change(void)
{
	if (le_cache_shared != NULL)
		le_foreign_change = true;
}

/*
 * Empty every slot now (lease_store.c, when the table's definition changes).
 * A fill that began before is dropped too: it checks the epoch.
 */
void
le_cache_forget_all(void)
{
	if (le_cache_shared != NULL)
		pg_atomic_fetch_add_u64(&le_cache_shared->epoch, 1);
}

static void
le_cache_forget_xact(void)
{
	le_pending_writes = NIL;	/* freed with TopTransactionContext */
	le_foreign_change = false;
	le_foreign_marked = false;
	le_writes_marked = false;
	le_own_write_in_progress = false;
}

static void
le_cache_xact_callback(XactEvent event, void *arg)
{
	/*
	 * Refused with or without the cache: a change prepared while the
	 * library was not preloaded could be committed after it is, behind the
	 * cache's back.
	 */
	if (event == XACT_EVENT_PRE_PREPARE && le_foreign_change)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that modified leader_election.leases")));
	if (le_cache_shared == NULL)
	{
		if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
			event == XACT_EVENT_PREPARE)
			le_cache_forget_xact();
		return;
	}
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			le_cache_mark_pending();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
			le_cache_end_pending(event == XACT_EVENT_COMMIT);
			le_cache_forget_xact();
			break;
		case XACT_EVENT_PREPARE:
			/* PRE_PREPARE let it through: nothing of ours is in it. */
			le_cache_forget_xact();
			break;
		default:
			break;
	}
}

/* Rows written in a subtransaction that rolls back are not what commits. */
static void
le_cache_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (event == SUBXACT_EVENT_ABORT_SUB)
		le_own_write_in_progress = false;
	foreach(lc, le_pending_writes)
	{
		LePendingWrite *w = lfirst(lc);

		if (w->nest_level < level)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			w->known = false;
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			w->nest_level = level - 1;
	}
}

void
le_cache_register_callbacks(void)
{
	RegisterXactCallback(le_cache_xact_callback, NULL);
	RegisterSubXactCallback(le_cache_subxact_callback, NULL);
}

/* lease_store.c brackets its own SPI writes with these. */
void
le_cache_own_write_begin(void)
{
	le_own_write_in_progress = true;
}

void
le_cache_own_write_end(void)
{
	le_own_write_in_progress = false;
}

/*
 * leader_election.leases_cache_invalidate(): the function of the triggers on
 * leader_election.leases (after each row INSERT, UPDATE, DELETE; after
 * TRUNCATE; ENABLE ALWAYS).  A change that did not come through
 * lease_store.c empties the whole cache when its transaction ends.
 */
PG_FUNCTION_INFO_V1(le_leases_cache_invalidate);
Datum
le_leases_cache_invalidate(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("leases_cache_invalidate() may only be called as a trigger")));
	if (!le_own_write_in_progress)
		le_foreign_change = true;
	return PointerGetDatum(NULL);
}
