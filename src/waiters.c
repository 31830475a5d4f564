/*-------------------------------------------------------------------------
 *
 * waiters.c
 *	  The sessions waiting in wait_for_leadership() for each name, with
 *	  their priorities: who should take a lease when it frees (I10 in
 *	  lease.c).
 *
 * With the library in shared_preload_libraries, shared memory holds one
 * entry per backend that can wait (max_connections + max_worker_processes +
 * max_wal_senders: a walsender of a replication=database connection runs
 * SQL too);
 * a waiter fills one for the whole of its wait with its database, the name,
 * its priority and a ticket from a counter (its place in the queue).  A
 * waiter is outranked if another entry for the same database and name has
 * a higher priority, or the same priority and an earlier ticket (it has
 * waited longer).  An outranked waiter does not take a free lease; the one
 * that outranks it does, and its commit wakes the others (wakeup.c).
 *
 * An entry is freed when its wait ends, however it ends: normally, by an
 * error or cancel (PG_FINALLY in lease.c), or by the backend exiting (an
 * on_shmem_exit callback); a crash reinitialises shared memory.  A waiter
 * that leaves without the lease wakes the name's other waiters at once, so
 * the next in rank does not sleep until its recheck.
 *
 * Entries hold the whole name, not a hash: a collision would make a waiter
 * defer, forever, to a waiter of another name.
 *
 * LOCKING: one spinlock over the array, held only to fill, free or scan it
 * (no allocation, no error, no other lock inside).  Scans read a dense
 * array of pids, databases, priorities, tickets and name hashes; the names
 * and holders are apart and read only for an entry whose hash matched.
 *
 * Without preloading there is no shared memory: nobody registers, nobody is
 * outranked, and waiters race as in 1.0 (documented in the README).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "leader_election.h"

/*
 * What scans compare, in a dense array of its own so that a scan under the
 * spinlock reads a few pages, not the labels of every entry.
 */
typedef struct LeWaiter
{
	int			pid;			/* 0: free */
	Oid			dbid;
	int32		priority;
	uint32		name_hash;		/* compared before the name */
	uint64		ticket;			/* lower: waiting longer */
} LeWaiter;

/* The labels of entry i, read only once its hash matched. */
typedef struct LeWaiterLabels
{
	char		name[LE_MAX_NAME_BYTES + 1];
	char		holder[LE_MAX_HOLDER_BYTES + 1];	/* who it waits as */
} LeWaiterLabels;

/* entries[size], then (MAXALIGNed) LeWaiterLabels[size]. */
typedef struct LeWaiters
{
	slock_t		mutex;
	uint64		next_ticket;
	int			size;
	LeWaiter	entries[FLEXIBLE_ARRAY_MEMBER];
} LeWaiters;

static LeWaiters *le_waiters = NULL;

/* This backend's entry while it waits, or -1. */
static int	le_my_entry = -1;
static bool le_waiters_exit_registered = false;

static int
le_waiters_count(void)
{
	return MaxConnections + max_worker_processes + max_wal_senders;
}

static Size
le_waiters_labels_offset(int count)
{
	return MAXALIGN(add_size(offsetof(LeWaiters, entries),
							 mul_size(count, sizeof(LeWaiter))));
}

Size
le_waiters_shmem_size(void)
{
	return add_size(le_waiters_labels_offset(le_waiters_count()),
					mul_size(le_waiters_count(), sizeof(LeWaiterLabels)));
}

static LeWaiterLabels *
le_labels(int i)
{
	return (LeWaiterLabels *) ((char *) le_waiters +
							   le_waiters_labels_offset(le_waiters->size)) + i;
}

void
le_waiters_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_waiters = ShmemInitStruct("leader_election waiters",
								 le_waiters_shmem_size(), &found);
	if (!found)
	{
		SpinLockInit(&le_waiters->mutex);
		le_waiters->next_ticket = 1;
		le_waiters->size = le_waiters_count();
		for (int i = 0; i < le_waiters->size; i++)
			le_waiters->entries[i].pid = 0;
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
le_waiters_on_exit(int code, Datum arg)
{
	le_waiter_unregister(false);
}

/*
 * Join the name's waiters with this priority.  If every entry is taken (it
 * cannot be while each backend waits at most once at a time), the wait goes
 * on unranked.
 */
void
le_waiter_register(const char *name, const char *holder, int32 priority)
{
	if (le_waiters == NULL)
		return;
	if (le_my_entry >= 0)
		le_waiter_unregister(false);
	if (!le_waiters_exit_registered)
	{
		on_shmem_exit(le_waiters_on_exit, (Datum) 0);
		le_waiters_exit_registered = true;
	}
	SpinLockAcquire(&le_waiters->mutex);
	for (int i = 0; i < le_waiters->size; i++)
	{
		LeWaiter   *w = &le_waiters->entries[i];

		if (w->pid != 0)
			continue;
		w->pid = MyProcPid;
		w->dbid = MyDatabaseId;
		w->priority = priority;
		w->ticket = le_waiters->next_ticket++;
		w->name_hash = hash_bytes((const unsigned char *) name, strlen(name));
		strlcpy(le_labels(i)->name, name, sizeof(le_labels(i)->name));
		strlcpy(le_labels(i)->holder, holder, sizeof(le_labels(i)->holder));
		le_my_entry = i;
		break;
	}
	SpinLockRelease(&le_waiters->mutex);
}

/*
 * Leave the waiters.  Without the lease, wake the name's other waiters:
 * one of them may now be the first in rank.
 */
void
le_waiter_unregister(bool acquired)
{
	char		name[LE_MAX_NAME_BYTES + 1];
	bool		others = false;

	if (le_waiters == NULL || le_my_entry < 0)
		return;

	/*
	 * Only a waiter that leaves without the lease wakes the others (a
	 * winner's commit wakes them: wakeup.c), so a storm's winners leave
	 * without the scan.  The scan cannot be skipped by the count of the
	 * name's wakeup slot: an exit by FATAL has already left that count
	 * (on_shmem_exit callbacks run in reverse order), and a waiter arriving
	 * now may have seen this entry and stepped aside for it.
	 */
	strlcpy(name, le_labels(le_my_entry)->name, sizeof(name));
	SpinLockAcquire(&le_waiters->mutex);
	{
		LeWaiter   *me = &le_waiters->entries[le_my_entry];

		me->pid = 0;
		for (int i = 0; !acquired && i < le_waiters->size; i++)
		{
			LeWaiter   *w = &le_waiters->entries[i];

			if (w->pid != 0 && w->name_hash == me->name_hash &&
				w->dbid == MyDatabaseId && strcmp(le_labels(i)->name, name) == 0)
			{
				others = true;
				break;
			}
		}
	}
	SpinLockRelease(&le_waiters->mutex);
	le_my_entry = -1;
	if (others)
		le_wake_waiters_now(name);
}

/*
 * Is this backend waiting for `name` behind another waiter (I10)?  False
 * for a backend that is not waiting (try_acquire_leader, the task runner).
 * Waiters as `barred` (the holder a move just removed, I9: it may not take
 * the lease while the reservation lasts) do not count: they cannot take
 * it, so stepping aside for them would leave the lease to them once the
 * reservation lapses.  NULL: every waiter counts.
 *
 * A waiter is counted in its wakeup slot (wakeup.c) only after it has
 * registered here, so while the slot counts this backend alone no other
 * waiter of the name can be registered (except one arriving right now, no
 * different from one arriving a moment later): the usual case of a single
 * waiter takes no lock.
 */
bool
le_waiter_outranked(const char *name, const char *barred)
{
	bool		outranked = false;

	if (le_waiters == NULL || le_my_entry < 0)
		return false;
	if (le_waiting_candidates(name) <= 1)
		return false;
	SpinLockAcquire(&le_waiters->mutex);
	{
		LeWaiter   *me = &le_waiters->entries[le_my_entry];

		if (strcmp(le_labels(le_my_entry)->name, name) == 0)
		{
			for (int i = 0; i < le_waiters->size; i++)
			{
				LeWaiter   *w = &le_waiters->entries[i];

				if (i == le_my_entry || w->pid == 0 ||
					w->name_hash != me->name_hash ||
					w->dbid != me->dbid || strcmp(le_labels(i)->name, name) != 0 ||
					(barred != NULL && strcmp(le_labels(i)->holder, barred) == 0))
					continue;
				if (w->priority > me->priority ||
					(w->priority == me->priority && w->ticket < me->ticket))
				{
					outranked = true;
					break;
				}
			}
		}
	}
	SpinLockRelease(&le_waiters->mutex);
	return outranked;
}

/*
 * How many sessions wait in wait_for_leadership() for `name` in this
 * database, exactly (-1 without shared memory): what waiting_candidates()
 * shows.  The wakeup slot's count also counts the waiters of every name
 * sharing the slot, another role's among them, so it only says when there
 * is nobody to look for.
 */
int32
le_waiters_for_name(const char *name)
{
	int32		in_slot = le_waiting_candidates(name);
	uint32		hash;
	int32		n = 0;

	if (le_waiters == NULL || in_slot < 0)
		return -1;
	if (in_slot == 0)
		return 0;
	hash = hash_bytes((const unsigned char *) name, strlen(name));
	SpinLockAcquire(&le_waiters->mutex);
	for (int i = 0; i < le_waiters->size; i++)
	{
		LeWaiter   *w = &le_waiters->entries[i];

		if (w->pid != 0 && w->name_hash == hash && w->dbid == MyDatabaseId &&
			strcmp(le_labels(i)->name, name) == 0)
			n++;
	}
	SpinLockRelease(&le_waiters->mutex);
	return n;
}
