/*-------------------------------------------------------------------------
 *
 * notify_queue.c
 *	  Telling LISTENers on channel "leader_election" of every change of
 *	  leader, without making grants take PostgreSQL's NOTIFY lock.
 *
 * PostgreSQL serialises every transaction that sent a NOTIFY, cluster-wide,
 * for the whole of its commit (WAL flush included): PreCommit_Notify takes
 * one lock on "database 0" and keeps it until the commit ends.  A grant that
 * called NOTIFY therefore committed one at a time with every other grant and
 * every other application's NOTIFY.  So, with the library preloaded, a
 * granting (or releasing) transaction does not call NOTIFY.  It keeps its
 * events (le_notify_change) and:
 *
 *	  at PRE_COMMIT  reserves room for them in its database's queue in shared
 *	                 memory (LE_NOTIFY_QUEUE_LEN events per database,
 *	                 LE_NOTIFY_DATABASES databases);
 *	  at COMMIT      (the commit record is durable, the name's writer lock is
 *	                 still held) appends them and sets the notifier's latch;
 *	  at ABORT       gives the room back.
 *
 * The notifier, one background worker per database with events (started on
 * demand, gone after LE_NOTIFIER_IDLE_MS without events, or as soon as
 * DROP DATABASE, ALTER DATABASE or CREATE DATABASE ... TEMPLATE wants its
 * database to itself: le_database_wanted), sends the queued
 * events with NOTIFY in transactions of up to LE_NOTIFY_BATCH events: the
 * NOTIFY lock is then taken once per batch, by the notifier, off every
 * grant's path.  Its own commits are not waited for (synchronous_commit
 * off): they write no data, and a crash that loses them also closes every
 * LISTENing connection.
 *
 * THE RULES
 *
 * N1  Per name, events reach the NOTIFY queue in term order.  Every event of
 *     a name is made by a transaction holding the name's writer lock (I1 in
 *     lease.c) and enters this queue before that lock is released (COMMIT
 *     callbacks run before locks are released), so the queue holds each
 *     name's events in order.  Whoever sends queued events takes them from
 *     the head, in order, holding the sender lock (LE_LOCKTAG_NOTIFY) until
 *     its transaction ends, and removes them from the queue only when that
 *     transaction commits (PostgreSQL's NOTIFY queue takes entries in the
 *     order transactions reach PreCommit_Notify).  A transaction that sends
 *     its own events itself (N2) first sends everything queued before them.
 *
 * N2  Nothing is dropped silently.  When the queue cannot take a
 *     transaction's events (full, no notifier running yet, no queue free
 *     for the database, or leader_election.notify_delivery =
 *     'in_transaction'), the transaction sends them itself with NOTIFY, as
 *     1.0 did, after the queued ones (N1): slower, never lost.  A notifier
 *     that fails leaves its batch in the queue (removal happens only at its
 *     commit); the next change of leader in the database starts a new one,
 *     which sends them (until then they wait).  Lost are only events
 *     queued when the server crashes (shared memory is reset); a crash also
 *     ends every LISTENing session, so no listener that stays connected
 *     misses one.
 *
 * N3  The administrator's name functions send their NOTIFY in SQL
 *     (pg_notify); admin_change_begin first moves every queued event into
 *     that transaction (le_notify_flush_into_transaction), so N1 holds.
 *     That transaction then holds the sender lock to its end: the notifier
 *     and transactions that send their own events wait for it (a deadlock
 *     with one of them, should the admin transaction go on to wait for its
 *     locks, is found by the deadlock detector).
 *
 * Without preloading there is no shared memory: events are sent with
 * NOTIFY in the granting transaction, as in 1.0.  A standby grants nothing
 * and cannot LISTEN.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

#define LE_NOTIFY_DATABASES		8
#define LE_NOTIFY_QUEUE_LEN		1024
#define LE_NOTIFY_BATCH			512
#define LE_NOTIFIER_IDLE_MS		60000	/* a notifier with nothing to do exits */
#define LE_NOTIFIER_CHECK_MS	500 /* how often an idle notifier looks around */
#define LE_NOTIFIER_START_MS	10000	/* a start not seen by then is retried */

int			le_notify_delivery = LE_NOTIFY_BACKGROUND;

typedef enum LeNotifierState
{
	LE_NOTIFIER_NONE,
	LE_NOTIFIER_STARTING,
	LE_NOTIFIER_RUNNING
} LeNotifierState;

static const char *const le_event_names[] = {"elected", "released"};
static const char *const le_reason_names[] = {"none", "released", "expired", "session_ended"};

/* One change of leader. */
typedef struct LeNotifyEvent
{
	int64		term;
	uint8		event;			/* index into le_event_names */
	uint8		reason;			/* index into le_reason_names */
	bool		holder_null;
	char		name[LE_MAX_NAME_BYTES + 1];
	char		holder[LE_MAX_HOLDER_BYTES + 1];
} LeNotifyEvent;

/* One database's queue: events [head, tail) of ring, oldest first. */
typedef struct LeNotifyQueue
{
	Oid			database;		/* InvalidOid: free */
	LeNotifierState state;
	TimestampTz starting_since;
	int			notifier_pid;
	Latch	   *notifier_latch;
	uint64		head;
	uint64		tail;
	int			reserved;		/* room promised to committing transactions */
	LeNotifyEvent ring[LE_NOTIFY_QUEUE_LEN];
} LeNotifyQueue;

typedef struct LeNotifyShared
{
	int			tranche;
	LWLock		lock;			/* everything below */
	LeNotifyQueue queues[LE_NOTIFY_DATABASES];
} LeNotifyShared;

static LeNotifyShared *le_notify_shared = NULL;

/* This transaction's events, oldest first (in TopTransactionContext). */
typedef struct LePendingEvent
{
	int			nest_level;
	LeNotifyEvent ev;
} LePendingEvent;

static List *le_pending = NIL;

/* Room reserved at PRE_COMMIT in queue le_reserved_queue. */
static int	le_reserved = 0;
static int	le_reserved_queue = -1;

/* Queued events this transaction sends itself: removed at its commit. */
static int	le_consumed = 0;
static int	le_consumed_queue = -1;

/* ---- shared memory ---- */

Size
le_notify_shmem_size(void)
{
	return sizeof(LeNotifyShared);
}

void
le_notify_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_notify_shared = ShmemInitStruct("leader_election notify queue",
									   sizeof(LeNotifyShared), &found);
	if (!found)
	{
		memset(le_notify_shared, 0, sizeof(LeNotifyShared));
		le_notify_shared->tranche = LWLockNewTrancheId();
		LWLockInitialize(&le_notify_shared->lock, le_notify_shared->tranche);
	}
	LWLockRelease(AddinShmemInitLock);
	LWLockRegisterTranche(le_notify_shared->tranche, "leader_election_notify");
}

static void
le_lock(void)
{
	LWLockAcquire(&le_notify_shared->lock, LW_EXCLUSIVE);
}

static void
le_unlock(void)
{
	LWLockRelease(&le_notify_shared->lock);
}

/*
 * The queue of this database, under the lock; a free queue is claimed, or
 * an idle one of another database (empty, nothing promised, no notifier, or
 * one that never came up: its database was dropped before it connected).
 * -1 if none can be had.  (A dropped database's queue that still holds
 * events stays taken until the server restarts.)
 */
static int
le_queue_of_database(bool claim)
{
	int			idle = -1;

	for (int i = 0; i < LE_NOTIFY_DATABASES; i++)
	{
		LeNotifyQueue *q = &le_notify_shared->queues[i];

		if (q->database == MyDatabaseId)
			return i;
		if (idle < 0 &&
			(q->database == InvalidOid ||
			 (q->head == q->tail && q->reserved == 0 &&
			  (q->state == LE_NOTIFIER_NONE ||
			   (q->state == LE_NOTIFIER_STARTING &&
				TimestampDifferenceExceeds(q->starting_since, GetCurrentTimestamp(),
										   LE_NOTIFIER_START_MS))))))
			idle = i;
	}
	if (!claim || idle < 0)
		return -1;
	le_notify_shared->queues[idle].database = MyDatabaseId;
	le_notify_shared->queues[idle].state = LE_NOTIFIER_NONE;
	return idle;
}

/* ---- sending ---- */

static void
le_send_now(const LeNotifyEvent *ev)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"name\":");
	escape_json(&buf, ev->name);
	appendStringInfo(&buf, ",\"event\":\"%s\",\"holder\":", le_event_names[ev->event]);
	if (ev->holder_null)
		appendStringInfoString(&buf, "null");
	else
		escape_json(&buf, ev->holder);
	appendStringInfo(&buf, ",\"term\":" INT64_FORMAT ",\"reason\":\"%s\"}",
					 ev->term, le_reason_names[ev->reason]);
	Async_Notify(LE_NOTIFY_CHANNEL, buf.data);
	pfree(buf.data);
}

static void
le_lock_sender(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, LE_LOCKTAG_NOTIFY);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * N1: send, in this transaction, up to max of the queued events not yet
 * taken by it; they leave the queue when it commits.  Returns how many.
 */
static int
le_take_queued(int qi, int max)
{
	LeNotifyQueue *q = &le_notify_shared->queues[qi];
	LeNotifyEvent *copy;
	uint64		from;
	int			n;

	Assert(le_consumed_queue < 0 || le_consumed_queue == qi);
	le_lock_sender();
	le_lock();
	from = q->head + le_consumed;
	n = (int) Min(q->tail - from, (uint64) max);
	copy = palloc(sizeof(LeNotifyEvent) * Max(n, 1));
	for (int i = 0; i < n; i++)
		copy[i] = q->ring[(from + i) % LE_NOTIFY_QUEUE_LEN];
	le_unlock();
	le_consumed += n;
	le_consumed_queue = qi;
	for (int i = 0; i < n; i++)
		le_send_now(&copy[i]);
	pfree(copy);
	return n;
}

/* Register a notifier for queue qi. */
static void
le_start_notifier(int qi)
{
	BackgroundWorker worker;
	bool		started;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	/*
	 * Never restarted by the postmaster (its database may be gone): the next
	 * change in the database starts another (LE_NOTIFIER_NONE).
	 */
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "leader_election");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "le_notifier_main");
	snprintf(worker.bgw_type, BGW_MAXLEN, "leader_election notifier");
	snprintf(worker.bgw_name, BGW_MAXLEN, "leader_election notifier");
	worker.bgw_main_arg = Int32GetDatum(qi);
	memcpy(worker.bgw_extra, &MyDatabaseId, sizeof(Oid));
	started = RegisterDynamicBackgroundWorker(&worker, NULL);
	if (!started)
	{
		le_lock();
		if (le_notify_shared->queues[qi].state == LE_NOTIFIER_STARTING)
			le_notify_shared->queues[qi].state = LE_NOTIFIER_NONE;
		le_unlock();
	}
}

/* ---- a granting transaction ---- */

/*
 * A change of leader made by this transaction: NOTIFY leader_election,
 * '{"name":..,"event":..,"holder":..,"term":..,"reason":..}' once it
 * commits.
 */
void
le_notify_change(const char *name, LeNotifyEventKind event, const char *holder,
				 int64 term, LeNotifyReason reason)
{
	LePendingEvent *p;
	MemoryContext old;

	p = MemoryContextAllocZero(TopTransactionContext, sizeof(LePendingEvent));
	p->nest_level = GetCurrentTransactionNestLevel();
	p->ev.term = term;
	p->ev.event = (uint8) event;
	p->ev.reason = (uint8) reason;
	p->ev.holder_null = (holder == NULL);
	strlcpy(p->ev.name, name, sizeof(p->ev.name));
	if (holder != NULL)
		strlcpy(p->ev.holder, holder, sizeof(p->ev.holder));
	if (le_notify_shared == NULL)
	{
		/* Not preloaded: NOTIFY in this transaction, as in 1.0. */
		le_send_now(&p->ev);
		pfree(p);
		return;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	le_pending = lappend(le_pending, p);
	MemoryContextSwitchTo(old);
}

/* N3: move every queued event of this database into this transaction. */
void
le_notify_flush_into_transaction(void)
{
	int			qi;

	if (le_notify_shared == NULL)
		return;
	le_lock();
	qi = le_queue_of_database(false);
	le_unlock();
	if (qi >= 0)
		(void) le_take_queued(qi, LE_NOTIFY_QUEUE_LEN);
}

static void
le_pre_commit(void)
{
	int			n = list_length(le_pending);
	int			qi;
	bool		start = false;
	bool		queued_before = true;
	ListCell   *lc;

	if (n == 0)
		return;
	le_lock();
	qi = le_queue_of_database(true);
	if (qi >= 0)
	{
		LeNotifyQueue *q = &le_notify_shared->queues[qi];

		if (le_notify_delivery == LE_NOTIFY_BACKGROUND &&
			q->state == LE_NOTIFIER_RUNNING &&
			(q->tail - q->head) + q->reserved + n <= LE_NOTIFY_QUEUE_LEN)
		{
			q->reserved += n;
			le_reserved = n;
			le_reserved_queue = qi;
			le_unlock();
			return;
		}
		if (le_notify_delivery == LE_NOTIFY_BACKGROUND &&
			(q->state == LE_NOTIFIER_NONE ||
			 (q->state == LE_NOTIFIER_STARTING &&
			  TimestampDifferenceExceeds(q->starting_since, GetCurrentTimestamp(),
										 LE_NOTIFIER_START_MS))))
		{
			q->state = LE_NOTIFIER_STARTING;
			q->starting_since = GetCurrentTimestamp();
			start = true;
		}
		queued_before = q->tail > q->head + le_consumed;
	}
	le_unlock();
	if (start)
		le_start_notifier(qi);

	/* N2: send them ourselves, after whatever is queued (N1). */
	if (qi >= 0 && queued_before)
		(void) le_take_queued(qi, LE_NOTIFY_QUEUE_LEN);
	foreach(lc, le_pending)
		le_send_now(&((LePendingEvent *) lfirst(lc))->ev);
	le_pending = NIL;
}

static void
le_at_commit(void)
{
	Latch	   *latch = NULL;

	if (le_reserved > 0 || le_consumed > 0)
	{
		le_lock();
		if (le_consumed > 0)
			le_notify_shared->queues[le_consumed_queue].head += le_consumed;
		if (le_reserved > 0)
		{
			LeNotifyQueue *q = &le_notify_shared->queues[le_reserved_queue];
			ListCell   *lc;

			foreach(lc, le_pending)
			{
				q->ring[q->tail % LE_NOTIFY_QUEUE_LEN] =
					((LePendingEvent *) lfirst(lc))->ev;
				q->tail++;
			}
			q->reserved -= le_reserved;
			latch = q->notifier_latch;
		}
		le_unlock();
		if (latch != NULL)
			SetLatch(latch);
	}
}

static void
le_at_abort(void)
{
	if (le_reserved > 0)
	{
		le_lock();
		le_notify_shared->queues[le_reserved_queue].reserved -= le_reserved;
		le_unlock();
	}
}

static void
le_notify_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			le_pre_commit();
			return;
		case XACT_EVENT_COMMIT:
			le_at_commit();
			break;
		case XACT_EVENT_ABORT:
			le_at_abort();
			break;
		case XACT_EVENT_PREPARE:
			break;
		default:
			return;
	}
	le_pending = NIL;
	le_reserved = 0;
	le_reserved_queue = -1;
	le_consumed = 0;
	le_consumed_queue = -1;
}

static void
le_notify_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	foreach(lc, le_pending)
	{
		LePendingEvent *p = lfirst(lc);

		if (p->nest_level < level)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			le_pending = foreach_delete_current(le_pending, lc);
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			p->nest_level = level - 1;
	}
}

void
le_notify_register_callbacks(void)
{
	RegisterXactCallback(le_notify_xact_callback, NULL);
	RegisterSubXactCallback(le_notify_subxact_callback, NULL);
}

/* ---- the notifier ---- */

static int	le_my_queue = -1;

static void
le_notifier_exit(int code, Datum arg)
{
	LeNotifyQueue *q = &le_notify_shared->queues[le_my_queue];

	le_lock();
	if (q->notifier_pid == MyProcPid)
	{
		q->state = LE_NOTIFIER_NONE;
		q->notifier_pid = 0;
		q->notifier_latch = NULL;
	}
	le_unlock();
}

/* One batch: a transaction that sends up to LE_NOTIFY_BATCH queued events. */
static void
le_notifier_send_batch(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, "sending notifications");
	(void) le_take_queued(le_my_queue, LE_NOTIFY_BATCH);
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Is a command waiting to have this database to itself?  DROP DATABASE,
 * ALTER DATABASE ... RENAME / SET TABLESPACE and CREATE DATABASE ...
 * TEMPLATE lock the database object, then wait a few seconds for its other
 * sessions to end; a new connection's lock on it would conflict.  An idle
 * notifier that sees this exits, so it never makes those commands fail.
 */
static bool
le_database_wanted(Oid database)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, database, 0);
	if (LockAcquire(&tag, RowExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, RowExclusiveLock, true);
	return false;
}

PGDLLEXPORT void le_notifier_main(Datum arg);

void
le_notifier_main(Datum arg)
{
	Oid			database;
	LeNotifyQueue *q;
	TimestampTz idle_since;

	le_my_queue = DatumGetInt32(arg);
	memcpy(&database, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	q = &le_notify_shared->queues[le_my_queue];
	le_lock();
	if (q->database != database ||
		(q->state == LE_NOTIFIER_RUNNING && q->notifier_pid != 0 &&
		 q->notifier_pid != MyProcPid && kill(q->notifier_pid, 0) == 0))
	{
		/* Another notifier serves it, or the queue went to another database. */
		le_unlock();
		proc_exit(0);
	}
	q->state = LE_NOTIFIER_RUNNING;
	q->notifier_pid = MyProcPid;
	q->notifier_latch = MyLatch;
	le_unlock();
	before_shmem_exit(le_notifier_exit, (Datum) 0);

	idle_since = GetCurrentTimestamp();
	for (;;)
	{
		bool		work;
		long		wait_ms;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
		}

		le_lock();
		work = q->tail > q->head;
		le_unlock();
		if (work)
		{
			le_notifier_send_batch();
			idle_since = GetCurrentTimestamp();
			continue;
		}
		if (TimestampDifferenceExceeds(idle_since, GetCurrentTimestamp(),
									   LE_NOTIFIER_IDLE_MS) ||
			le_database_wanted(database))
		{
			bool		quit;

			le_lock();
			quit = (q->tail == q->head && q->reserved == 0);
			if (quit)
			{
				q->state = LE_NOTIFIER_NONE;
				q->notifier_pid = 0;
				q->notifier_latch = NULL;
			}
			le_unlock();
			if (quit)
				proc_exit(0);
			idle_since = GetCurrentTimestamp();
		}
		wait_ms = LE_NOTIFIER_CHECK_MS;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait_ms, PG_WAIT_EXTENSION);
	}
}
