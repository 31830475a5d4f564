/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *	  Waking wait_for_leadership() the moment a lease may have become free,
 *	  and the per-transaction bookkeeping that makes that possible.
 *
 * A lease becomes free in exactly four ways, and each wakes waiters:
 *	  expiry            the waiter sleeps until expires_at (no wake needed)
 *	  release (or a     the releasing transaction ends     } broadcast after
 *	  hand-over, a move)
 *	  a writer / fence  the transaction holding it ends    } its locks are gone
 *	  holder session    the holder backend exits: an on_shmem_exit callback
 *	  exit              broadcasts after its locks have been released
 *
 * A waiter that finds the name's writer lock taken sleeps too: the lock is
 * given back either at the end of the transaction that took it (which
 * broadcasts, whatever it wrote: le_xact_took_writer) or, by a call that
 * wrote nothing, at once (le_writer_given_back), or by a subtransaction
 * rolled back (the resource-release callback): those two wake only the
 * waiters that counted themselves as having found a lock taken
 * (le_writer_try_begin), which sleep on a condition variable of their own,
 * so that waiters that take and give back their own names' locks do not
 * wake each other.
 *
 * With the library in shared_preload_libraries, shared memory holds
 * LE_WAKE_SLOTS condition variables; a name maps to one slot by hash.  Two
 * names sharing a slot only cause spurious wakeups, which the waiter's loop
 * absorbs.  A broadcast must come after the lock release that made the lease
 * free, or a woken waiter would find it still taken and sleep again: hence a
 * resource-release callback (after locks) rather than a commit callback.
 *
 * Besides these, a waiter that leaves without the lease wakes the name's
 * other waiters at once (le_wake_waiters_now): it may have been the one the
 * others stepped aside for (waiters.c, lease.c I10).
 *
 * Without preloading there is no shared memory: waiters then re-check every
 * LE_POLL_MS (a read of one index entry), documented in the README.
 *
 * The same bookkeeping refuses PREPARE TRANSACTION for a transaction that
 * wrote or fenced a lease (lease.c, I4).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

/*
 * The client connection's wait set, as libpq/libpq.h declares it (15, 17
 * and 18: the socket at position 0).  That header includes libpq-be.h,
 * which needs the GSSAPI headers wherever PostgreSQL was built with GSSAPI,
 * as Debian's packages are; these two lines need nothing.
 */
extern PGDLLIMPORT WaitEventSet *FeBeWaitSet;
#define LE_FEBE_SOCKET_POS	0

#define LE_WAKE_SLOTS		1024
#define LE_POLL_MS			10		/* without shared memory */
#define LE_RECHECK_MS		1000	/* safety net with shared memory */

typedef struct LeWakeSlot
{
	ConditionVariable cv;		/* every waiter of the slot's names */
	pg_atomic_uint32 waiters;
	pg_atomic_uint64 broadcasts;	/* advanced before every broadcast */
	/* Waiters that found a writer lock taken sleep here instead. */
	ConditionVariable lock_cv;
	pg_atomic_uint32 lock_waiters;
	pg_atomic_uint64 lock_broadcasts;	/* advanced before every broadcast
										 * of lock_cv alone */
} LeWakeSlot;

typedef struct LeWakeShared
{
	LeWakeSlot	slots[LE_WAKE_SLOTS];
} LeWakeShared;

static LeWakeShared *le_wake = NULL;

/* Slots whose waiters this transaction must wake when it ends. */
static uint64 le_xact_slots[LE_WAKE_SLOTS / 64];
static bool le_xact_any_slot = false;

/* Slots whose waiters this session must wake when it exits. */
static uint64 le_session_slots[LE_WAKE_SLOTS / 64];
static bool le_exit_callback_registered = false;

/*
 * Nesting levels of the (sub)transactions that wrote or fenced a lease and
 * have not been rolled back; kept in TopTransactionContext.
 */
static List *le_touch_levels = NIL;

/*
 * What a rolled-back subtransaction must wake: the slots of the names it
 * wrote or fenced, or whose writer lock it still held (not given back
 * early).  le_held: one entry per such name, level * LE_WAKE_SLOTS + slot,
 * in TopTransactionContext; le_abort_slots: the slots of the entries of a
 * subtransaction being rolled back, woken once its locks are gone.
 */
static List *le_held = NIL;
static uint64 le_abort_slots[LE_WAKE_SLOTS / 64];
static bool le_abort_any_slot = false;

/* The slot the current wait_for_leadership() sleeps on, or -1. */
static int	le_waiting_slot = -1;

/* That slot's broadcast counts when the current attempt began. */
static uint64 le_waiting_seen = 0;
static uint64 le_waiting_seen_lock = 0;

/* Counted in that slot's lock_waiters (le_writer_try_begin). */
static bool le_counted_lock_waiter = false;

static int
le_slot_of(const char *name)
{
	uint32		h = hash_bytes((const unsigned char *) name, strlen(name));

	return (int) ((h ^ MyDatabaseId) % LE_WAKE_SLOTS);
}

static void
le_set_bit(uint64 *bits, int slot)
{
	bits[slot / 64] |= UINT64CONST(1) << (slot % 64);
}

/* Wake every waiter of the slot, those that found a lock taken too. */
static void
le_broadcast_slot(int slot)
{
	pg_atomic_fetch_add_u64(&le_wake->slots[slot].broadcasts, 1);
	ConditionVariableBroadcast(&le_wake->slots[slot].cv);
	ConditionVariableBroadcast(&le_wake->slots[slot].lock_cv);
}

/*
 * Wake only the waiters of the slot that found a writer lock taken (if
 * any): a writer lock given back frees no lease, and waking the others,
 * each of which may take its own name's lock and give it back in turn (a
 * barred or outranked waiter), would have them wake each other for ever.
 */
static void
le_broadcast_lock_waiters(int slot)
{
	pg_memory_barrier();		/* the lock's release before the look */
	if (pg_atomic_read_u32(&le_wake->slots[slot].lock_waiters) == 0)
		return;
	pg_atomic_fetch_add_u64(&le_wake->slots[slot].lock_broadcasts, 1);
	if (slot == le_waiting_slot)
		le_waiting_seen_lock++; /* not woken by its own broadcast */
	ConditionVariableBroadcast(&le_wake->slots[slot].lock_cv);
}

static void
le_broadcast_bits(uint64 *bits)
{
	for (int w = 0; w < LE_WAKE_SLOTS / 64; w++)
	{
		while (bits[w] != 0)
		{
			int			b = pg_rightmost_one_pos64(bits[w]);

			bits[w] &= ~(UINT64CONST(1) << b);
			if (le_wake != NULL)
				le_broadcast_slot(w * 64 + b);
		}
	}
}

Size
le_wakeup_shmem_size(void)
{
	return sizeof(LeWakeShared);
}

void
le_wakeup_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_wake = ShmemInitStruct("leader_election wakeups", sizeof(LeWakeShared),
							  &found);
	if (!found)
	{
		for (int i = 0; i < LE_WAKE_SLOTS; i++)
		{
			ConditionVariableInit(&le_wake->slots[i].cv);
			ConditionVariableInit(&le_wake->slots[i].lock_cv);
			pg_atomic_init_u64(&le_wake->slots[i].lock_broadcasts, 0);
			pg_atomic_init_u32(&le_wake->slots[i].waiters, 0);
			pg_atomic_init_u32(&le_wake->slots[i].lock_waiters, 0);
			pg_atomic_init_u64(&le_wake->slots[i].broadcasts, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
le_hold(int slot)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

	le_held = lappend_int(le_held, GetCurrentTransactionNestLevel() * LE_WAKE_SLOTS + slot);
	MemoryContextSwitchTo(old);
}

/* This transaction wrote or fenced the lease `name`. */
void
le_xact_touched(const char *name)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	int			slot = le_slot_of(name);

	le_touch_levels = lappend_int(le_touch_levels,
								  GetCurrentTransactionNestLevel());
	MemoryContextSwitchTo(old);
	le_hold(slot);
	le_set_bit(le_xact_slots, slot);
	le_xact_any_slot = true;
}

/* Has this transaction written or fenced a lease (not rolled back)? */
bool
le_xact_touched_any(void)
{
	return le_touch_levels != NIL;
}

/*
 * At backend exit, however it exits (FATAL from pg_terminate_backend skips
 * wait_for_leadership's own cleanup): leave the waiter count and wake the
 * waiters of the session-bound leases this session held.
 *
 * on_shmem_exit callbacks run after the before_shmem_exit ones, among them
 * the one that releases this session's locks, and before ProcKill, so the
 * liveness lock is already gone and MyProc is still usable.
 */
static void
le_on_backend_exit(int code, Datum arg)
{
	le_wait_end();
	le_broadcast_bits(le_session_slots);
}

static void
le_register_exit_callback(void)
{
	if (!le_exit_callback_registered)
	{
		on_shmem_exit(le_on_backend_exit, (Datum) 0);
		le_exit_callback_registered = true;
	}
}

/* This session holds `name` under its session identity. */
void
le_wake_on_session_exit(const char *name)
{
	if (le_wake == NULL)
		return;
	le_set_bit(le_session_slots, le_slot_of(name));
	le_register_exit_callback();
}

static void
le_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (le_touch_levels != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that acquired, renewed, released or fenced a lease"),
						 errdetail("A prepared transaction would keep the lease decision open beyond this session.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			le_touch_levels = NIL;	/* freed with TopTransactionContext */
			le_held = NIL;
			break;
		default:
			break;
	}
}

/*
 * le_touch_levels and le_held are in nondecreasing order of nesting level:
 * an entry is appended at the current level, which no entry exceeds (a
 * subtransaction's end relabels or drops its entries), and a commit lowers
 * only the entries of the top level.  So a subtransaction's entries are a
 * suffix, and its end walks only that suffix (a transaction fencing in
 * thousands of exception blocks stays linear).
 */
static int
le_suffix_start(List *entries, int level, int divisor)
{
	int			n = list_length(entries);

	while (n > 0 && list_nth_int(entries, n - 1) / divisor >= level)
		n--;
	return n;
}

static void
le_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			touched = le_suffix_start(le_touch_levels, level, 1);
	int			held = le_suffix_start(le_held, level, LE_WAKE_SLOTS);

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		for (int i = held; i < list_length(le_held); i++)
		{
			le_set_bit(le_abort_slots, list_nth_int(le_held, i) % LE_WAKE_SLOTS);
			le_abort_any_slot = true;
		}
		le_touch_levels = list_truncate(le_touch_levels, touched);
		le_held = list_truncate(le_held, held);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = touched; i < list_length(le_touch_levels); i++)
			lfirst_int(list_nth_cell(le_touch_levels, i)) = level - 1;
		for (int i = held; i < list_length(le_held); i++)
			lfirst_int(list_nth_cell(le_held, i)) =
				(level - 1) * LE_WAKE_SLOTS + list_nth_int(le_held, i) % LE_WAKE_SLOTS;
	}
}

static void
le_resource_release_callback(ResourceReleasePhase phase, bool isCommit,
							 bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS)
		return;
	if (isTopLevel)
	{
		if (le_abort_any_slot)
		{
			le_abort_any_slot = false;
			memset(le_abort_slots, 0, sizeof(le_abort_slots));
		}
		if (!le_xact_any_slot)
			return;
		le_xact_any_slot = false;
		le_broadcast_bits(le_xact_slots);
		return;
	}

	/*
	 * A subtransaction rolled back (ROLLBACK TO SAVEPOINT, an exception
	 * block) gave up, without a word, what it wrote or fenced and the writer
	 * locks it still held: wake those names' waiters, now that its locks
	 * are gone.  (A waiter's own attempt gives back the lock it took before
	 * its subtransaction rolls back, and has nothing here.)
	 */
	if (le_abort_any_slot)
	{
		le_abort_any_slot = false;
		le_broadcast_bits(le_abort_slots);
	}
}

void
le_wakeup_register_callbacks(void)
{
	RegisterXactCallback(le_xact_callback, NULL);
	RegisterSubXactCallback(le_subxact_callback, NULL);
	RegisterResourceReleaseCallback(le_resource_release_callback, NULL);
}

/*
 * Start waiting for `name`.  Preparing to sleep before each attempt means a
 * broadcast that lands between the attempt and the sleep is not lost.
 */
void
le_wait_begin(const char *name)
{
	if (le_wake == NULL)
		return;
	le_register_exit_callback();
	le_waiting_slot = le_slot_of(name);
	pg_atomic_fetch_add_u32(&le_wake->slots[le_waiting_slot].waiters, 1);
	ConditionVariablePrepareToSleep(&le_wake->slots[le_waiting_slot].cv);
}

/*
 * An attempt begins: note the slot's broadcast count.  A broadcast during
 * the attempt may find this backend off the condition variable's list, or
 * its latch may be consumed by a wait inside the attempt (a lock or I/O
 * wait resets the latch); the count still shows it, and le_wait_sleep
 * then does not sleep.
 */
void
le_wait_attempt(void)
{
	le_writer_try_end();
	if (le_wake != NULL && le_waiting_slot >= 0)
	{
		le_waiting_seen = pg_atomic_read_u64(&le_wake->slots[le_waiting_slot].broadcasts);
		le_waiting_seen_lock =
			pg_atomic_read_u64(&le_wake->slots[le_waiting_slot].lock_broadcasts);
	}
}

/*
 * Was this waiter woken since its attempt began: by a broadcast to every
 * waiter of its slot, or, if it found the writer lock taken, by one to
 * those waiters?
 */
static bool
le_woken(void)
{
	LeWakeSlot *slot = &le_wake->slots[le_waiting_slot];

	return pg_atomic_read_u64(&slot->broadcasts) != le_waiting_seen ||
		(le_counted_lock_waiter &&
		 pg_atomic_read_u64(&slot->lock_broadcasts) != le_waiting_seen_lock);
}

/*
 * A waiter whose client has gone away stops waiting at once (README: a
 * waiter that leaves, by disconnecting too, stops counting): its backend
 * would otherwise sleep on, keep its rank and win the lease for nobody.
 * A client backend sleeps on its connection's wait set, which reports the
 * socket's closing as well as the latch; a background worker (a task's
 * procedure) has no client.
 */
static bool
le_client_socket_watchable(void)
{
	return MyProcPort != NULL && FeBeWaitSet != NULL && WaitEventSetCanReportClosed();
}

/*
 * Sleep at most ms on the latch, which a broadcast on cv sets (we are on its
 * list), or until the client's socket closes: then end the session as
 * client_connection_check_interval would.  The caller has checked the
 * broadcast counts; it checks interrupts next.
 *
 * Woken or not, the backend is back on cv's list when this returns, as
 * after ConditionVariableTimedSleep: a backend signalled and left off the
 * list passes a signal on to another waiter when its sleep is cancelled
 * (each attempt's subtransaction rollback cancels it), which passes it on
 * in turn, for ever.  A timed sleep of 0 puts it back, silently.
 */
static void
le_sleep_watching_client(ConditionVariable *cv, long ms)
{
	WaitEvent	ev;
	int			n;

	ModifyWaitEvent(FeBeWaitSet, LE_FEBE_SOCKET_POS, WL_SOCKET_CLOSED, NULL);
	n = WaitEventSetWait(FeBeWaitSet, ms, &ev, 1, le_wait_event_for_leadership());
	(void) ConditionVariableTimedSleep(cv, 0, le_wait_event_for_leadership());
	if (n == 0)
		return;					/* timeout */
	if (ev.events & WL_POSTMASTER_DEATH)
		ereport(FATAL,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("terminating connection due to unexpected postmaster exit")));
	if (ev.events & WL_SOCKET_CLOSED)
	{
		ClientConnectionLost = 1;
		InterruptPending = 1;
		CHECK_FOR_INTERRUPTS();	/* FATAL: connection to client lost */
	}
	if (ev.events & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		if (le_woken())
			le_stats_count(LE_STAT_WAKEUPS);	/* by a broadcast */
	}
}

/* Sleep until `until`, a broadcast on our slot, or an interrupt. */
void
le_wait_sleep(TimestampTz until)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = 0;

	if (until > now)
		ms = (long) ((until - now + 999) / 1000);

	if (le_wake != NULL && le_waiting_slot >= 0)
	{
		LeWakeSlot *slot = &le_wake->slots[le_waiting_slot];
		ConditionVariable *cv = le_counted_lock_waiter ? &slot->lock_cv : &slot->cv;

		/*
		 * Back on the condition variable's list: the attempt ran in a
		 * subtransaction (lease.c), and rolling one back cancels a prepared
		 * sleep.  A broadcast before this shows in the counts below.
		 */
		ConditionVariablePrepareToSleep(cv);
		pg_memory_barrier();
		if (le_woken())
		{
			le_stats_count(LE_STAT_WAKEUPS);
			return;				/* woken during the attempt: try again */
		}
		if (le_client_socket_watchable())
			le_sleep_watching_client(cv, Min(ms, LE_RECHECK_MS));
		else if (!ConditionVariableTimedSleep(cv, Min(ms, LE_RECHECK_MS),
											  le_wait_event_for_leadership()))
			le_stats_count(LE_STAT_WAKEUPS);	/* by a broadcast */
	}
	else
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms, LE_POLL_MS), le_wait_event_for_leadership());
		ResetLatch(MyLatch);
	}
}

void
le_wait_end(void)
{
	if (le_wake == NULL || le_waiting_slot < 0)
		return;
	le_writer_try_end();
	ConditionVariableCancelSleep();
	pg_atomic_fetch_sub_u32(&le_wake->slots[le_waiting_slot].waiters, 1);
	le_waiting_slot = -1;
}

/*
 * Wake the waiters of `name` now, not at the end of the transaction: a
 * waiter that leaves without the lease may have been the one the others
 * stepped aside for (waiters.c).
 */
void
le_wake_waiters_now(const char *name)
{
	int			slot;

	if (le_wake == NULL)
		return;
	slot = le_slot_of(name);
	le_broadcast_slot(slot);
}

/*
 * A waiter about to try the writer lock of `name` without waiting counts
 * itself in the slot's lock_waiters first, and stays counted, if the lock
 * was taken, until its next attempt (le_wait_attempt) or the end of its
 * wait: whoever gives the lock back after the failed try then sees the
 * count (the lock manager orders the two) and wakes it.
 */
void
le_writer_try_begin(const char *name)
{
	if (le_wake == NULL || le_waiting_slot < 0 || le_counted_lock_waiter ||
		le_slot_of(name) != le_waiting_slot)
		return;
	pg_atomic_fetch_add_u32(&le_wake->slots[le_waiting_slot].lock_waiters, 1);
	le_counted_lock_waiter = true;
}

/* The try took the lock (or the wait goes on to a new attempt): uncount. */
void
le_writer_try_end(void)
{
	if (!le_counted_lock_waiter)
		return;
	pg_atomic_fetch_sub_u32(&le_wake->slots[le_waiting_slot].lock_waiters, 1);
	le_counted_lock_waiter = false;
}

/*
 * This transaction took the writer lock of `name`: however it ends, its
 * end wakes the name's waiters, as for a write (a waiter may have found
 * the lock taken).
 */
void
le_xact_took_writer(const char *name)
{
	int			slot;

	if (le_wake == NULL)
		return;
	slot = le_slot_of(name);
	le_hold(slot);
	le_set_bit(le_xact_slots, slot);
	le_xact_any_slot = true;
}

/*
 * The writer lock of `name` was given back before the end of the
 * transaction, by a call that wrote nothing: wake the waiters that found it
 * taken (le_broadcast_lock_waiters).
 */
void
le_writer_given_back(const char *name)
{
	int			entry;

	if (le_wake == NULL)
		return;
	/* The lock le_xact_took_writer noted last for this name is gone. */
	entry = GetCurrentTransactionNestLevel() * LE_WAKE_SLOTS + le_slot_of(name);
	for (int i = list_length(le_held) - 1; i >= 0; i--)
	{
		if (list_nth_int(le_held, i) == entry)
		{
			le_held = list_delete_nth_cell(le_held, i);
			break;
		}
	}
	le_broadcast_lock_waiters(le_slot_of(name));
}

/*
 * How many sessions wait in wait_for_leadership() for `name` (or for a name
 * sharing its slot); -1 without shared memory.
 */
int32
le_waiting_candidates(const char *name)
{
	if (le_wake == NULL)
		return -1;
	return (int32) pg_atomic_read_u32(&le_wake->slots[le_slot_of(name)].waiters);
}
