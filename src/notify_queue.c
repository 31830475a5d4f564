/*-------------------------------------------------------------------------
 *
 * notify_queue.c
 *	  Telling LISTENers on channel "leader_election" of every change of
 *	  leader (elected, released, handed_over, moved) and of every leader's
 *	  info (info), without making the changing transactions take
 *	  PostgreSQL's NOTIFY lock.
 *
 * PostgreSQL serialises every transaction that sent a NOTIFY, cluster-wide,
 * for the whole of its commit (WAL flush included): PreCommit_Notify takes
 * one lock on "database 0" and keeps it until the commit ends.  A grant that
 * called NOTIFY therefore committed one at a time with every other grant and
 * every other application's NOTIFY.  So, with the library preloaded, a
 * changing transaction does not call NOTIFY.  It keeps its events' payloads
 * (le_notify, the only place a payload is built) and:
 *
 *	  at PRE_COMMIT  reserves room for them in its database's queue in shared
 *	                 memory (a ring of LE_NOTIFY_QUEUE_BYTES bytes per
 *	                 database, LE_NOTIFY_DATABASES databases);
 *	  at COMMIT      (the commit record is durable, the name's writer lock is
 *	                 still held) appends them and sets the notifier's latch;
 *	  at ABORT       gives the room back.
 *
 * The ring holds variable-length entries (a length, then the payload), so
 * an event takes the room its payload needs: about 100 bytes for most, up
 * to about 8000 for an "info" event carrying LE_MAX_INFO_BYTES of info.  A
 * 256 kB ring holds some 2,500 ordinary events, or at least 32 with the
 * largest info; a transaction whose events do not fit sends them itself
 * (N2).
 *
 * The notifier, one background worker per database with events (started on
 * demand: by the database's first event, or already by a session's LISTEN
 * leader_election, le_notify_listener_ready; gone after LE_NOTIFIER_IDLE_MS
 * without events, or as soon as DROP DATABASE, ALTER DATABASE or CREATE
 * DATABASE ... TEMPLATE wants its database to itself: le_database_wanted),
 * sends the queued
 * events with NOTIFY in transactions of up to LE_NOTIFY_BATCH events: the
 * NOTIFY lock is then taken once per batch, by the notifier, off every
 * grant's path.  Its own commits are not waited for (synchronous_commit
 * off): they write no data, and a crash that loses them also closes every
 * LISTENing connection.
 *
 * THE RULES
 *
 * N1  Per name, events reach the NOTIFY queue in term order (and, within a
 *     term, in the order they were made).  Every event of a name is made
 *     by a transaction holding the name's writer lock (I1, I7, I9, I11 in
 *     lease.c: grants, releases, hand-overs, moves, set_leader_info) and
 *     enters this queue before that lock is released (COMMIT callbacks run
 *     before locks are released), so the queue holds each name's events in
 *     order.  Whoever sends queued events takes them from
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
 * N3  Every event goes through le_notify, the administrator's name
 *     functions' too (name_admin.c), so N1 and N2 hold for all of them,
 *     and a transaction's events are sent in the order it made them.
 *     Queued events are taken only at the top level of a transaction (the
 *     notifier's batch, or PRE_COMMIT under N2), never in a subtransaction
 *     whose abort would throw their NOTIFYs away.
 *
 * N4  Every event is heard, even one equal to an earlier one: PostgreSQL
 *     drops a NOTIFY equal to one its transaction already sent, so a
 *     repeated payload is made distinct with a trailing mark of spaces
 *     and tabs (le_send).
 *
 * While no session has run LISTEN leader_election (listeners.c, L1), a
 * transaction still reserves room at PRE_COMMIT (whether or not a notifier
 * runs), but at COMMIT, if still nobody listens, gives it back instead of
 * appending: nothing is queued, no notifier is woken or started, no NOTIFY
 * is sent.  If a session started to listen meanwhile, the events are
 * appended as usual and a notifier is started if none runs; since that
 * start may fail when it is too late to send them otherwise, the LISTEN
 * itself first makes sure a notifier runs (le_notify_listener_ready).
 *
 * Without preloading there is no shared memory: events are sent with
 * NOTIFY in the changing transaction, as in 1.0.  A standby grants nothing
 * and cannot LISTEN.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
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
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

#define LE_NOTIFY_DATABASES		8
#define LE_NOTIFY_QUEUE_BYTES	(256 * 1024)	/* per database */
#define LE_NOTIFY_BATCH			512
#define LE_NOTIFIER_IDLE_MS		60000	/* a notifier with nothing to do exits */
#define LE_NOTIFIER_CHECK_MS	500 /* how often an idle notifier looks around */
#define LE_NOTIFIER_START_MS	10000	/* a start not seen by then is retried */

/*
 * An entry of the ring: the payload's length (its terminating zero
 * included), then the payload, padded to a multiple of 4 bytes.  An entry
 * may wrap around the end of the ring.
 */
#define LE_ENTRY_HEADER			((Size) sizeof(uint32))
#define LE_ENTRY_SIZE(len)		TYPEALIGN(4, LE_ENTRY_HEADER + (len))

int			le_notify_delivery = LE_NOTIFY_BACKGROUND;

typedef enum LeNotifierState
{
	LE_NOTIFIER_NONE,
	LE_NOTIFIER_STARTING,
	LE_NOTIFIER_RUNNING
} LeNotifierState;

/*
 * One database's queue: the entries in bytes [head, tail) of ring (positions
 * count bytes since the queue was made, modulo LE_NOTIFY_QUEUE_BYTES in the
 * ring), oldest first.
 */
typedef struct LeNotifyQueue
{
	Oid			database;		/* InvalidOid: free */
	LeNotifierState state;
	TimestampTz starting_since;
	int			notifier_pid;
	Latch	   *notifier_latch;
	uint64		head;
	uint64		tail;
	Size		reserved;		/* bytes promised to committing transactions */
	char		ring[LE_NOTIFY_QUEUE_BYTES];
} LeNotifyQueue;

typedef struct LeNotifyShared
{
	int			tranche;
	LWLock		lock;			/* everything below */
	LeNotifyQueue queues[LE_NOTIFY_DATABASES];
} LeNotifyShared;

static LeNotifyShared *le_notify_shared = NULL;

/* One of this transaction's events, oldest first (in TopTransactionContext). */
typedef struct LePendingEvent
{
	int			nest_level;
	uint32		len;			/* strlen(payload) + 1 */
	char		payload[FLEXIBLE_ARRAY_MEMBER];
} LePendingEvent;

static List *le_pending = NIL;

/* Room (bytes) reserved at PRE_COMMIT in queue le_reserved_queue. */
static Size le_reserved = 0;
static int	le_reserved_queue = -1;

/*
 * The payloads this transaction has sent with NOTIFY (le_send): per hash of
 * a payload, how many.  In TopTransactionContext; NULL until the first.
 */
typedef struct LeSentCount
{
	uint32		hash;			/* the key */
	int			sent;
} LeSentCount;

static HTAB *le_sent = NULL;

/* In a notifier: the queue it serves; -1 in every other backend. */
static int	le_my_queue = -1;

/*
 * Bytes of queued events this transaction sends itself, from the head of
 * queue le_consumed_queue: removed from it at the commit (N3: taken only
 * at the top level).
 */
static Size le_consumed = 0;
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

/* Copy len bytes into / out of the ring at position pos (wrapping). */
static void
le_ring_write(LeNotifyQueue *q, uint64 pos, const void *src, Size len)
{
	Size		off = pos % LE_NOTIFY_QUEUE_BYTES;
	Size		first = Min(len, LE_NOTIFY_QUEUE_BYTES - off);

	memcpy(q->ring + off, src, first);
	if (first < len)
		memcpy(q->ring, (const char *) src + first, len - first);
}

static void
le_ring_read(const LeNotifyQueue *q, uint64 pos, void *dst, Size len)
{
	Size		off = pos % LE_NOTIFY_QUEUE_BYTES;
	Size		first = Min(len, LE_NOTIFY_QUEUE_BYTES - off);

	memcpy(dst, q->ring + off, first);
	if (first < len)
		memcpy((char *) dst + first, q->ring, len - first);
}

/*
 * The queue of this database, under the lock; a free queue is claimed, or
 * an idle one of another database (empty, nothing promised, no notifier, or
 * one that never came up: its database was dropped before it connected).
 * -1 if none can be had.  (A dropped database's queue that still holds
 * events stays taken until the server restarts.)
 *
 * Whoever looked up its queue and let go of the lock must check, when it
 * takes the lock again, that the queue is still its database's
 * (le_queue_is_ours): an idle queue may have been claimed meanwhile, and
 * its events then belong to another database.  Only a queue holding
 * nothing of this transaction's (no room taken, no events taken) can be
 * claimed, so the check is needed only by code that holds neither.
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

/* Is queue qi still this database's?  Under the lock. */
static bool
le_queue_is_ours(int qi)
{
	return le_notify_shared->queues[qi].database == MyDatabaseId;
}

/* ---- sending ---- */

static void
le_lock_sender(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, LE_LOCKTAG_NOTIFY);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * NOTIFY payload in this transaction (N4).  PostgreSQL drops a NOTIFY
 * whose channel and payload equal one the transaction already sent, and
 * two events can be equal: the same info published again in a term (A,
 * then B, then A) and sent in one notifier batch or one transaction.  So a
 * payload sent for the k-th time in a transaction ends with a mark of k - 1
 * (le_append_copy_mark): spaces and tabs, insignificant in JSON, a
 * different mark for every k and at most 32 characters, so that even a
 * transaction that repeats the largest info (an event of about 5 kB)
 * thousands of times stays under NOTIFY's 8000 bytes.  Counted per hash of
 * the payload: two payloads whose hashes collide only get marks they did
 * not need, and no payload ends with a space or tab, so the texts sent stay
 * distinct.
 *
 * An event of another transaction that a changing transaction sends (N2)
 * could also meet a copy that the transaction's own caller sent with
 * NOTIFY leader_election before (anyone can): PostgreSQL would drop the
 * genuine one, and listeners would hear it where the copy stood, before
 * events that precede it.  So such an event (unforgeable) ends with
 * LE_NONCE_CHARS spaces and tabs drawn at random (64 bits), which nobody
 * can copy in advance (no line breaks: listeners may read by line).
 */
#define LE_NONCE_CHARS	64

/*
 * Append n (> 0) as spaces and tabs, in bijective base 2: every n gets its
 * own string, of about log2(n) characters.
 */
static void
le_append_copy_mark(StringInfo buf, uint32 n)
{
	while (n > 0)
	{
		n--;
		appendStringInfoChar(buf, (n & 1) ? '\t' : ' ');
		n >>= 1;
	}
}

static void
le_send(const char *payload, bool unforgeable)
{
	uint32		hash = hash_bytes((const unsigned char *) payload, strlen(payload));
	LeSentCount *count;
	bool		found;

	if (le_sent == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint32);
		ctl.entrysize = sizeof(LeSentCount);
		ctl.hcxt = TopTransactionContext;
		le_sent = hash_create("leader_election sent notifications", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	count = hash_search(le_sent, &hash, HASH_ENTER, &found);
	if (!found)
		count->sent = 0;
	if (count->sent == 0 && !unforgeable)
		Async_Notify(LE_NOTIFY_CHANNEL, payload);
	else
	{
		StringInfoData buf;

		initStringInfo(&buf);
		appendStringInfoString(&buf, payload);
		le_append_copy_mark(&buf, count->sent);
		if (unforgeable)
		{
			uint64		nonce = pg_prng_uint64(&pg_global_prng_state);

			for (int i = 0; i < LE_NONCE_CHARS; i++, nonce >>= 1)
				appendStringInfoChar(&buf, (nonce & 1) ? '\t' : ' ');
		}
		Async_Notify(LE_NOTIFY_CHANNEL, buf.data);
		pfree(buf.data);
	}
	count->sent++;
}

/*
 * N1: send, in this transaction, up to max of the queued events not yet
 * taken by it; they leave the queue when it commits.  Returns how many.
 * Any transaction but the notifier's sends them unforgeable (le_send).
 */
static int
le_take_queued(int qi, int max)
{
	LeNotifyQueue *q = &le_notify_shared->queues[qi];
	char	   *copy;
	char	   *p;
	uint64		from;
	uint64		to;
	int			n = 0;

	Assert(le_consumed_queue < 0 || le_consumed_queue == qi);
	le_lock_sender();
	le_lock();
	/*
	 * The queue was looked up before the sender lock, which may have been
	 * waited for.  Claimed meanwhile by another database, it holds nothing
	 * of this one's (a queue is left only when empty).
	 */
	if (!le_queue_is_ours(qi))
	{
		le_unlock();
		return 0;
	}
	from = q->head + le_consumed;
	to = from;
	while (to < q->tail && n < max)
	{
		uint32		len;

		le_ring_read(q, to, &len, sizeof(len));
		to += LE_ENTRY_SIZE(len);
		n++;
	}
	copy = palloc(Max(to - from, 1));
	le_ring_read(q, from, copy, to - from);
	le_unlock();
	Assert(GetCurrentTransactionNestLevel() == 1);
	le_consumed += to - from;
	le_consumed_queue = qi;
	for (p = copy; p < copy + (to - from);)
	{
		uint32		len;

		memcpy(&len, p, sizeof(len));
		le_send(p + LE_ENTRY_HEADER, le_my_queue < 0);
		p += LE_ENTRY_SIZE(len);
	}
	pfree(copy);
	return n;
}

/* Register a notifier for queue qi; false if no worker slot was free. */
static bool
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
	return started;
}

/* ---- a changing transaction ---- */

/*
 * NOTIFY leader_election, '{"name":..,"event":..,"holder":..,"term":..,
 * "reason":..,"info":..}', plus "successor" on the events handed_over and
 * moved, once this transaction commits (by the notifier, or by the
 * transaction itself: N2).  info is the text of a jsonb (at most
 * LE_MAX_INFO_BYTES, so the payload stays under NOTIFY's limit) or NULL.
 * The only place a payload is built.
 */
void
le_notify(const char *name, const char *event, const char *holder,
		  int64 term, const char *reason, const char *info,
		  const char *successor)
{
	StringInfoData buf;
	bool		with_successor = strcmp(event, "handed_over") == 0 ||
		strcmp(event, "moved") == 0;
	LePendingEvent *p;
	MemoryContext old;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"name\":");
	escape_json(&buf, name);
	appendStringInfo(&buf, ",\"event\":\"%s\",\"holder\":", event);
	if (holder != NULL)
		escape_json(&buf, holder);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfo(&buf, ",\"term\":" INT64_FORMAT ",\"reason\":\"%s\"",
					 term, reason);
	appendStringInfo(&buf, ",\"info\":%s", info != NULL ? info : "null");
	if (with_successor)
	{
		appendStringInfoString(&buf, ",\"successor\":");
		if (successor != NULL)
			escape_json(&buf, successor);
		else
			appendStringInfoString(&buf, "null");
	}
	appendStringInfoChar(&buf, '}');

	if (le_notify_shared == NULL)
	{
		/* Not preloaded: NOTIFY in this transaction, as in 1.0. */
		le_send(buf.data, false);
		pfree(buf.data);
		return;
	}
	p = MemoryContextAlloc(TopTransactionContext,
						   offsetof(LePendingEvent, payload) + buf.len + 1);
	p->nest_level = GetCurrentTransactionNestLevel();
	p->len = buf.len + 1;
	memcpy(p->payload, buf.data, buf.len + 1);
	pfree(buf.data);
	old = MemoryContextSwitchTo(TopTransactionContext);
	le_pending = lappend(le_pending, p);
	MemoryContextSwitchTo(old);
}

/*
 * Should a notifier be started for q (under the lock)?  None runs, or one
 * was asked for so long ago that it must have failed to come up.
 */
static bool
le_notifier_missing(LeNotifyQueue *q)
{
	return q->state == LE_NOTIFIER_NONE ||
		(q->state == LE_NOTIFIER_STARTING &&
		 TimestampDifferenceExceeds(q->starting_since, GetCurrentTimestamp(),
									LE_NOTIFIER_START_MS));
}

static void
le_pre_commit(void)
{
	Size		bytes = 0;
	int			qi;
	bool		start = false;
	bool		queued_before = true;
	ListCell   *lc;

	if (le_pending == NIL)
		return;
	foreach(lc, le_pending)
		bytes += LE_ENTRY_SIZE(((LePendingEvent *) lfirst(lc))->len);

	/* Room first, whoever will send them. */
	le_lock();
	qi = le_queue_of_database(true);
	if (qi >= 0)
	{
		LeNotifyQueue *q = &le_notify_shared->queues[qi];

		if ((q->tail - q->head) + q->reserved + bytes <= LE_NOTIFY_QUEUE_BYTES)
		{
			q->reserved += bytes;
			le_reserved = bytes;
			le_reserved_queue = qi;
		}
	}
	le_unlock();

	/*
	 * Then the listeners (L1, listeners.c): looking only now, after the
	 * room is taken, either this sees a session that has begun to LISTEN,
	 * or that session's LISTEN sees the room taken and makes sure a
	 * notifier will send whatever comes of it (le_notify_listener_ready).
	 * Nobody listens: the COMMIT decides.
	 */
	if (le_reserved > 0 && !le_listeners_any())
		return;

	le_lock();
	/* Without room taken, the queue may have been claimed since. */
	if (qi >= 0 && !le_queue_is_ours(qi))
		qi = -1;
	if (qi >= 0)
	{
		LeNotifyQueue *q = &le_notify_shared->queues[qi];

		if (le_reserved > 0 && le_notify_delivery == LE_NOTIFY_BACKGROUND &&
			q->state == LE_NOTIFIER_RUNNING)
		{
			le_unlock();
			return;
		}
		if (le_reserved > 0)
		{
			q->reserved -= le_reserved;
			le_reserved = 0;
			le_reserved_queue = -1;
		}
		if (le_notify_delivery == LE_NOTIFY_BACKGROUND && le_notifier_missing(q))
		{
			q->state = LE_NOTIFIER_STARTING;
			q->starting_since = GetCurrentTimestamp();
			start = true;
		}
		queued_before = q->tail > q->head + le_consumed;
	}
	le_unlock();
	if (start)
		(void) le_start_notifier(qi);

	/* N2: send them ourselves, after whatever is queued (N1). */
	if (qi >= 0 && queued_before)
		(void) le_take_queued(qi, INT_MAX);
	foreach(lc, le_pending)
		le_send(((LePendingEvent *) lfirst(lc))->payload, false);
	le_pending = NIL;
}

/*
 * The commit is durable and visible; the names' writer locks are still
 * held.  Queue the events (N1), unless no session listens even now (L1:
 * then none is owed them), and wake or start the notifier.  Nothing here
 * may fail: an error after the commit would be a PANIC.
 */
static void
le_at_commit(void)
{
	Latch	   *latch = NULL;
	bool		start = false;
	int			qi = le_reserved_queue;

	if (le_reserved > 0 || le_consumed > 0)
	{
		bool		heard = le_reserved > 0 && le_listeners_any();

		le_lock();
		if (le_consumed > 0)
		{
			LeNotifyQueue *cq = &le_notify_shared->queues[le_consumed_queue];

			/* Only this transaction's sender lock let anyone take these. */
			Assert(cq->head + le_consumed <= cq->tail);
			cq->head = Min(cq->head + le_consumed, cq->tail);
		}
		if (le_reserved > 0)
		{
			LeNotifyQueue *q = &le_notify_shared->queues[qi];
			ListCell   *lc;

			if (heard)
			{
				foreach(lc, le_pending)
				{
					LePendingEvent *p = lfirst(lc);

					le_ring_write(q, q->tail, &p->len, LE_ENTRY_HEADER);
					le_ring_write(q, q->tail + LE_ENTRY_HEADER, p->payload, p->len);
					q->tail += LE_ENTRY_SIZE(p->len);
				}
				latch = q->notifier_latch;
				if (le_notifier_missing(q))
				{
					q->state = LE_NOTIFIER_STARTING;
					q->starting_since = GetCurrentTimestamp();
					start = true;
				}
			}
			q->reserved -= le_reserved;
		}
		le_unlock();
		if (latch != NULL)
			SetLatch(latch);
		if (start)
			(void) le_start_notifier(qi);
	}
}

/*
 * A session has begun to LISTEN leader_election (listeners.c, after
 * counting itself).  In a database with the extension, a notifier is
 * started now if none runs or is starting, so that the changes the session
 * is about to hear are sent at once, not after a worker start (a fork and
 * a connection: several milliseconds, tens while a storm's winners keep
 * the cores busy); like any idle notifier it leaves after
 * LE_NOTIFIER_IDLE_MS without events.  Failing to start one then is no
 * error: the next change starts one, as before.
 *
 * It is an error if this database's queue holds events, or room taken by a
 * committing transaction that saw no listener (L1), and no notifier runs
 * and none can be started: that transaction's COMMIT may no longer send
 * its events itself, so the LISTEN fails (53000) rather than miss them; it
 * may be retried.
 */
void
le_notify_listener_ready(void)
{
	int			qi;
	bool		start = false;
	bool		owed = false;
	bool		installed;

	/* A standby refuses LISTEN, and could not start a notifier anyway. */
	if (le_notify_shared == NULL || RecoveryInProgress())
		return;
	installed = le_extension_installed();
	le_lock();
	qi = le_queue_of_database(installed);
	if (qi >= 0)
	{
		LeNotifyQueue *q = &le_notify_shared->queues[qi];

		owed = q->reserved > 0 || q->tail > q->head;

		/*
		 * When owed, not only when none is missing: a start another session
		 * is making (STARTING) may yet fail, after this LISTEN succeeded.  A
		 * second notifier that comes up exits at once (le_notifier_main).
		 */
		if (owed ? q->state != LE_NOTIFIER_RUNNING :
			(installed && le_notifier_missing(q)))
		{
			q->state = LE_NOTIFIER_STARTING;
			q->starting_since = GetCurrentTimestamp();
			start = true;
		}
	}
	le_unlock();
	if (start && !le_start_notifier(qi) && owed)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start the leader_election notifier for this LISTEN"),
				 errdetail("Changes of leader are waiting to be sent, and no background worker slot is free."),
				 errhint("Retry the LISTEN, or raise max_worker_processes.")));
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
	le_sent = NULL;
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
